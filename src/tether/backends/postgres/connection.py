"""Connecting to the PostgreSQL store: the `postgresql://` URL checked, psycopg imported (here,
on the path that needs it), one worker's `PgSession`, and the errors the store raises."""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from tether.errors import StoreError

if TYPE_CHECKING:
    import psycopg

SCHEMES = ("postgresql", "postgres")
IDLE_IN_TX_MS = 10_000
EXTRA_HINT = "install the postgres extra: pip install 'tether[postgres]'"


class PgStoreUnavailable(StoreError):
    """The PostgreSQL store cannot be reached or used; the message names the database (never
    its password) and the cause."""


class LeaseLost(StoreError):
    """A write of a conversation's former lease holder, refused: another worker holds the
    conversation now (a newer fencing token), so this worker's view of it is stale."""

    def __init__(
        self, conversation: str, token: int | None, current: int | None, holder: str | None,
        worker: str | None = None,
    ) -> None:
        now = "no lease" if current is None else f"token {current}, held by {holder}"
        mine = (f"{worker} does not hold its lease" if token is None
                else f"this worker's lease (token {token}) is no longer current")
        super().__init__(
            f"write to conversation {conversation} refused: {mine} ({now});"
            " the conversation moved to another worker"
        )
        self.conversation = conversation
        self.token = token
        self.current = current


def check_url(url: str) -> str:
    """`url` if it is a PostgreSQL conninfo URL, else a clear error saying what was wrong."""
    scheme = urlsplit(url).scheme
    if scheme not in SCHEMES:
        raise PgStoreUnavailable(
            f"--store {redact(url)!r} is not a PostgreSQL URL: expected postgresql://…"
            f" (got scheme {scheme or 'none'!r})"
        )
    return url


def redact(url: str) -> str:
    """The URL without its password, for messages and logs."""
    parts = urlsplit(url)
    if parts.password is None:
        return url
    netloc = parts.netloc.replace(f":{parts.password}@", ":***@", 1)
    return parts._replace(netloc=netloc).geturl()


def _psycopg() -> Any:
    try:
        import psycopg
    except ImportError as exc:
        raise PgStoreUnavailable(f"the PostgreSQL store needs psycopg 3: {EXTRA_HINT}") from exc
    return psycopg


def connect(url: str) -> psycopg.Connection[Any]:
    """A new autocommit connection to the store at `url` (transactions opened explicitly)."""
    psycopg = _psycopg()
    check_url(url)
    try:
        conn: Any = psycopg.connect(url, autocommit=True, connect_timeout=10)
    except psycopg.Error as exc:
        raise PgStoreUnavailable(
            f"cannot connect to the PostgreSQL store {redact(url)}: {str(exc).strip()}"
        ) from exc
    return conn


@contextlib.contextmanager
def store_errors(url: str, doing: str) -> Iterator[None]:
    """psycopg's errors as `PgStoreUnavailable` naming what was being done (a lost session, an
    idle-in-transaction timeout, a server shutting down); integrity errors and tether's own pass
    through."""
    psycopg = _psycopg()
    try:
        yield
    except psycopg.IntegrityError:
        raise
    except psycopg.Error as exc:
        raise PgStoreUnavailable(
            f"the PostgreSQL store {redact(url)} failed to {doing}: {str(exc).strip()}"
        ) from exc


class PgSession:
    """One worker's connections to the store: its name (`worker`) and its presence connection
    (`presence.py`), opened on first use with the schema migrated and used under a lock (psycopg
    connections are not for concurrent use). With `pool_size` > 1, `transaction` runs on up to
    that many further connections, one thread each, so the input queue, leases and checkpoints
    of one worker do not wait behind each other's round trips; a thread already inside a
    transaction nests on its own connection (a savepoint)."""

    def __init__(
        self, url: str, worker: str, *, idle_in_transaction_ms: int = IDLE_IN_TX_MS,
        pool_size: int = 1,
    ) -> None:
        if pool_size < 1:
            raise ValueError(f"pool_size must be at least 1, got {pool_size}")
        self.url = check_url(url)
        self.worker = worker
        self.idle_in_transaction_ms = int(idle_in_transaction_ms)
        self.pool_size = pool_size
        self.lock = threading.RLock()
        self._conn: psycopg.Connection[Any] | None = None
        self._closed = False
        self._pool = threading.Condition()
        self._idle: list[psycopg.Connection[Any]] = []
        self._pooled = 0  # pool connections open or being opened
        self._mine = threading.local()  # the pool connection this thread is inside

    @property
    def conn(self) -> psycopg.Connection[Any]:
        """The presence connection; call under `lock`."""
        if self._conn is None or self._conn.closed:
            if self._closed:
                raise PgStoreUnavailable(f"the store session of {self.worker} is closed")
            from tether.backends.postgres import events, presence, schema

            conn = self._connect()
            try:
                with store_errors(self.url, "prepare its schema"):
                    schema.migrate(conn)
                    events.ensure_tables(conn)
                    presence.register(conn, self.worker)
            except BaseException:
                conn.close()
                raise
            self._conn = conn
        return self._conn

    def _connect(self) -> psycopg.Connection[Any]:
        conn = connect(self.url)
        try:
            with store_errors(self.url, "set up its session"):
                # A worker stopped inside a transaction would hold its row locks (a lease
                # row share-locked by a fenced write) forever; the server ends its session.
                conn.execute(
                    f"SET idle_in_transaction_session_timeout = {self.idle_in_transaction_ms}"
                )
        except BaseException:
            conn.close()
            raise
        return conn

    @contextlib.contextmanager
    def transaction(self, doing: str) -> Iterator[psycopg.Cursor[Any]]:
        """A cursor inside one transaction (on the presence connection, or a pool one)."""
        if self.pool_size == 1:
            with self.lock, store_errors(self.url, doing):
                conn = self.conn
                with conn.transaction(), conn.cursor() as cur:
                    yield cur
            return
        mine = getattr(self._mine, "conn", None)
        if mine is not None:  # nested in this thread's transaction
            with store_errors(self.url, doing), mine.transaction(), mine.cursor() as cur:
                yield cur
            return
        conn = self._checkout(doing)
        self._mine.conn = conn
        try:
            with store_errors(self.url, doing), conn.transaction(), conn.cursor() as cur:
                yield cur
        finally:
            self._mine.conn = None
            self._checkin(conn)

    @contextlib.contextmanager
    def statement(self, doing: str) -> Iterator[psycopg.Cursor[Any]]:
        """A cursor whose every `execute` is its own transaction (autocommit: one round trip,
        no BEGIN or COMMIT), for a write that is one statement; inside this thread's open
        `transaction` it runs in that transaction."""
        if self.pool_size == 1:
            with self.lock, store_errors(self.url, doing), self.conn.cursor() as cur:
                yield cur
            return
        mine = getattr(self._mine, "conn", None)
        if mine is not None:
            with store_errors(self.url, doing), mine.cursor() as cur:
                yield cur
            return
        conn = self._checkout(doing)
        self._mine.conn = conn
        try:
            with store_errors(self.url, doing), conn.cursor() as cur:
                yield cur
        finally:
            self._mine.conn = None
            self._checkin(conn)

    def _checkout(self, doing: str) -> psycopg.Connection[Any]:
        self.open()  # the schema migrated and the worker present before any pooled work
        with self._pool:
            while True:
                if self._closed:
                    raise PgStoreUnavailable(f"the store session of {self.worker} is closed")
                if self._idle:
                    return self._idle.pop()
                if self._pooled < self.pool_size:
                    self._pooled += 1
                    break
                self._pool.wait()
        try:
            with store_errors(self.url, doing):
                return self._connect()
        except BaseException:
            with self._pool:
                self._pooled -= 1
                self._pool.notify()
            raise

    def _checkin(self, conn: psycopg.Connection[Any]) -> None:
        with self._pool:
            if conn.closed or conn.broken or self._closed:
                self._pooled -= 1
                conn.close()
            else:
                self._idle.append(conn)
            self._pool.notify()

    def open(self) -> None:
        with self.lock, store_errors(self.url, "open"):
            self.conn  # noqa: B018  (connect, migrate, register)

    def close(self) -> None:
        with self.lock:
            self._closed = True
            if self._conn is not None:
                self._conn.close()
                self._conn = None
        with self._pool:
            for conn in self._idle:
                conn.close()
            self._pooled -= len(self._idle)
            self._idle.clear()
            self._pool.notify_all()
