"""The keep-alive connections to provider origins: a few idle ones per origin, per event loop.

Every model step of a tool loop POSTs to the same origin, so the connection (TCP, TLS, a proxy
tunnel) of one step serves the next, and in long-lived processes (TUI, App Server,
bidirectional) the next turn's. Concurrent conversations each take their own connection; at
most `MAX_IDLE_PER_ORIGIN` are kept once they go idle. Nothing exists until the first request
on a loop, and the loop's `shutdown_asyncgens()` (run by `asyncio.run`) closes what is left.

A connection is kept only after its answer was read to the end, and is taken again only if
nothing arrived on it while idle (a server closing an idle connection sends a FIN or a TLS
close_notify first): a stale connection is dropped before a byte is written to it.

TLS sessions are remembered per origin, so a second connection resumes instead of a full
handshake where the server offers tickets or a session cache.
"""

from __future__ import annotations

import asyncio
import select
import weakref
from collections.abc import AsyncGenerator
from contextlib import suppress
from typing import Any

IDLE_TIMEOUT_S = 90.0  # as Go's and reqwest's defaults; a server's Keep-Alive hint can lower it
MAX_IDLE_PER_ORIGIN = 256  # one per conversation of a busy App Server (see `give`)
# (scheme, host, port, proxy, SSL_CERT_FILE, SSL_CERT_DIR): connections and TLS sessions are
# shared only where every one of these agrees.
Origin = tuple[str, str, int, str, str, str]


class Connection:
    """One open connection to an origin, and what the pool knows about it."""

    __slots__ = ("origin", "reader", "writer", "reused", "_expiry")

    def __init__(
        self, origin: Origin, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        self.origin = origin
        self.reader = reader
        self.writer = writer
        self.reused = False  # True once it served an earlier request
        self._expiry: asyncio.TimerHandle | None = None

    def idle_and_quiet(self) -> bool:
        """Open, and nothing (no EOF, no stray byte) arrived since its last answer ended."""
        if self.writer.is_closing() or self.reader.at_eof() or _buffered(self.reader):
            return False
        sock = self.writer.get_extra_info("socket")
        if sock is None:
            return True
        try:
            return not _readable(sock.fileno())
        except (OSError, ValueError):
            return False

    def tls_session(self) -> Any:
        ssl_object = self.writer.get_extra_info("ssl_object")
        return getattr(ssl_object, "session", None) if ssl_object is not None else None

    def resumed(self) -> bool:
        """Whether the TLS handshake resumed a remembered session."""
        ssl_object = self.writer.get_extra_info("ssl_object")
        return bool(getattr(ssl_object, "session_reused", False))

    def abort(self) -> None:
        if self._expiry is not None:
            self._expiry.cancel()
            self._expiry = None
        self.writer.transport.abort()


def _readable(fd: int) -> bool:
    """Readable while idle means a FIN, a close_notify or garbage: never reusable. This looks
    without consuming, so the loop's own reader is not disturbed; poll, because select cannot
    take descriptors past 1024 (a busy App Server has more)."""
    if hasattr(select, "poll"):
        poller = select.poll()
        poller.register(fd, select.POLLIN | select.POLLPRI)
        return bool(poller.poll(0))
    readable, _, _ = select.select([fd], [], [], 0)
    return bool(readable)


def _buffered(reader: asyncio.StreamReader) -> bool:
    # Unread bytes on an idle connection belong to no request we sent.
    return bool(getattr(reader, "_buffer", b""))


class Pool:
    """Idle connections per origin (last in, first out) and the last TLS session of each."""

    def __init__(self) -> None:
        self._idle: dict[Origin, list[Connection]] = {}
        self._sessions: dict[Origin, Any] = {}
        self._closer: AsyncGenerator[None, None] | None = None

    def take(self, origin: Origin) -> Connection | None:
        """An idle connection to `origin` that is still good, or None; stale ones are closed."""
        idle = self._idle.get(origin)
        while idle:
            conn = idle.pop()
            if conn._expiry is not None:
                conn._expiry.cancel()
                conn._expiry = None
            if conn.idle_and_quiet():
                conn.reused = True
                return conn
            conn.abort()
        return None

    def give(self, conn: Connection, idle_s: float = IDLE_TIMEOUT_S) -> None:
        """Keep `conn` (its answer fully read) for the next request, for at most `idle_s`."""
        session = conn.tls_session()
        if session is not None:
            self._sessions[conn.origin] = session
        if idle_s <= 0 or conn.writer.is_closing():
            conn.abort()
            return
        idle = self._idle.setdefault(conn.origin, [])
        idle.append(conn)
        while len(idle) > MAX_IDLE_PER_ORIGIN:
            idle.pop(0).abort()
        conn._expiry = asyncio.get_running_loop().call_later(idle_s, self._expire, conn)

    def forget(self, conn: Connection) -> None:
        """A connection that will not come back: keep its TLS session, close it."""
        session = conn.tls_session()
        if session is not None:
            self._sessions[conn.origin] = session
        conn.abort()

    def session(self, origin: Origin) -> Any:
        return self._sessions.get(origin)

    def idle_count(self, origin: Origin | None = None) -> int:
        if origin is not None:
            return len(self._idle.get(origin, ()))
        return sum(len(v) for v in self._idle.values())

    def close_all(self) -> None:
        for idle in self._idle.values():
            for conn in idle:
                conn.abort()
        self._idle.clear()

    def _expire(self, conn: Connection) -> None:
        conn._expiry = None
        idle = self._idle.get(conn.origin)
        if idle and conn in idle:
            idle.remove(conn)
        conn.abort()


_POOLS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Pool] = weakref.WeakKeyDictionary()


async def _close_at_loop_shutdown(pool: Pool) -> AsyncGenerator[None, None]:
    # Started once, never resumed: the loop finalises unfinished async generators in
    # `shutdown_asyncgens()`, which runs this `finally` while the loop can still close sockets.
    try:
        yield
    finally:
        pool.close_all()
        # Let the loop go: this generator's finaliser refers to it, and the pool to this.
        pool._closer = None
        with suppress(RuntimeError):
            _POOLS.pop(asyncio.get_running_loop(), None)


async def for_running_loop() -> Pool:
    """The running loop's pool, created on first use."""
    loop = asyncio.get_running_loop()
    pool = _POOLS.get(loop)
    if pool is None:
        pool = _POOLS[loop] = Pool()
        pool._closer = _close_at_loop_shutdown(pool)
        await pool._closer.__anext__()  # registers it with the loop's async-generator hooks
    return pool


def existing(loop: asyncio.AbstractEventLoop | None = None) -> Pool | None:
    """The loop's pool if a request made one (tests and benchmarks inspect it)."""
    return _POOLS.get(loop or asyncio.get_running_loop())
