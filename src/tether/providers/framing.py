"""An HTTP/1.1 answer read off a stream: the transport's errors, the head, and a body delimited
by chunked, Content-Length or the connection closing (gzip/deflate decoded)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Mapping
from typing import Any

MAX_HEAD = 64 * 1024  # status line + headers
_MAX_ERROR_BODY = 1024 * 1024
_READ_SIZE = 64 * 1024
_CHUNKS_UNFINISHED = "the server closed the connection mid-response (chunked body unfinished)"


class TransportError(Exception):
    """A request that got no complete answer."""


class BadTarget(TransportError):
    """The URL, a header value or the proxy setting cannot be used to send a request."""


class ConnectFailed(TransportError):
    """No connection: refused, unresolvable, TLS verification failed, or a proxy refused."""

    def __init__(self, message: str, *, retryable: bool = True) -> None:
        super().__init__(message)
        self.retryable = retryable


class TimedOut(TransportError):
    """A phase (connect, write, read) passed its deadline."""

    def __init__(self, phase: str) -> None:
        super().__init__(f"{phase} timed out")
        self.phase = phase


class Broken(TransportError):
    """The connection closed, or sent something that is not HTTP, before the answer ended.

    `retryable` is False when the request went out on a reused connection that then closed
    without a byte of answer: the server may have acted on it, so it must not be sent again.
    `reset` marks a connection reset by the peer before any answer (its socket was closed with
    our bytes unread), `unanswered` an orderly close before any answer.
    """

    def __init__(
        self, message: str, *, retryable: bool = True, reset: bool = False, unanswered: bool = False
    ) -> None:
        super().__init__(message)
        self.retryable = retryable
        self.reset = reset
        self.unanswered = unanswered


class Response:
    """Status and lower-cased headers of an answer whose body is read as it arrives;
    `complete` turns True once the body was read to its end."""

    def __init__(
        self,
        status: int,
        reason: str,
        headers: dict[str, str],
        reader: asyncio.StreamReader,
        timeout_s: float | None,
    ) -> None:
        self.status = status
        self.reason = reason
        self.headers = headers
        self.complete = False
        self._body = self._pieces(reader, timeout_s)

    async def _pieces(
        self, reader: asyncio.StreamReader, timeout_s: float | None
    ) -> AsyncIterator[bytes]:
        # body() is called here, on the first read: a bad Content-Length or encoding is
        # raised where the body is read, never while the response is being built.
        async for piece in body(reader, self.headers, timeout_s):
            yield piece
        self.complete = True

    def iter_bytes(self) -> AsyncIterator[bytes]:
        return self._body

    async def read(self, limit: int = _MAX_ERROR_BODY) -> bytes:
        """The whole body (an error answer), truncated at `limit` bytes."""
        parts: list[bytes] = []
        size = 0
        async for piece in self._body:
            parts.append(piece)
            size += len(piece)
            if size >= limit:
                break
        return b"".join(parts)[:limit]

    async def drain(self, limit: int) -> bool:
        """Read and drop what is left of the body (at most `limit` bytes); True if it ended."""
        size = 0
        async for piece in self._body:
            size += len(piece)
            if size > limit:
                return False
        return self.complete


def persistent(version: str, headers: Mapping[str, str]) -> bool:
    """Whether the server lets the connection carry another request (RFC 9112 §9.3): HTTP/1.1
    unless it says `Connection: close`, and a body with a delimited end."""
    tokens = {t.strip().lower() for t in headers.get("connection", "").split(",")}
    if version != "HTTP/1.1" or "close" in tokens:
        return False
    return "chunked" in headers.get("transfer-encoding", "").lower() or "content-length" in headers


def keep_alive_hint_s(headers: Mapping[str, str]) -> float | None:
    """The `Keep-Alive: timeout=N` a server announces, if any."""
    for part in headers.get("keep-alive", "").split(","):
        name, _, value = part.strip().partition("=")
        if name.strip().lower() == "timeout":
            try:
                return float(value.strip())
            except ValueError:
                return None
    return None


async def read_head(
    reader: asyncio.StreamReader, timeout_s: float | None
) -> tuple[str, int, str, dict[str, str]]:
    """The first final answer's version, status, reason and headers (1xx interims skipped)."""
    while True:
        try:
            async with asyncio.timeout(timeout_s):
                raw = await reader.readuntil(b"\r\n\r\n")
        except TimeoutError:
            raise TimedOut("waiting for the response") from None
        except asyncio.IncompleteReadError as exc:
            if not exc.partial:
                raise Broken(
                    "the server closed the connection without answering", unanswered=True
                ) from None
            raise Broken(
                "the server closed the connection in the middle of the response headers"
            ) from None
        except asyncio.LimitOverrunError:
            raise Broken(f"the response headers exceed {MAX_HEAD // 1024} KiB") from None
        except ConnectionResetError as exc:
            raise Broken(
                f"reading the response failed ({exc.strerror or exc})",
                reset=not reader._buffer,  # type: ignore[attr-defined]
            ) from None
        except OSError as exc:
            raise Broken(f"reading the response failed ({exc.strerror or exc})") from None
        version, status, reason, headers = parse_head(raw)
        if status >= 200 or status == 101:
            return version, status, reason, headers
        # 1xx interim answers (100 Continue, 103 Early Hints) precede the real one


def parse_head(raw: bytes) -> tuple[str, int, str, dict[str, str]]:
    text = raw.decode("latin-1")
    status_line, _, rest = text.partition("\r\n")
    version, _, tail = status_line.partition(" ")
    code, _, reason = tail.partition(" ")
    if not version.startswith("HTTP/1.") or not (code.isdigit() and len(code) == 3):
        raise Broken(f"the server did not answer in HTTP/1.x (status line {status_line[:80]!r})")
    headers: dict[str, str] = {}
    name = ""
    for line in rest.split("\r\n"):
        if not line:
            continue
        if line[0] in " \t" and name:  # obsolete line folding
            headers[name] += " " + line.strip()
            continue
        name, sep, value = line.partition(":")
        name = name.strip().lower()
        if not sep or not name:
            raise Broken(f"the server sent a malformed header line {line[:80]!r}")
        value = value.strip()
        headers[name] = f"{headers[name]}, {value}" if name in headers else value
    return version, int(code), reason.strip(), headers


def body(
    reader: asyncio.StreamReader, headers: Mapping[str, str], timeout_s: float | None
) -> AsyncIterator[bytes]:
    encoding = headers.get("content-encoding", "identity").strip().lower()
    decoder = _decoder(encoding)
    if "chunked" in headers.get("transfer-encoding", "").lower():
        pieces = _chunked(reader, timeout_s)
    elif "content-length" in headers:
        try:
            length = int(headers["content-length"].split(",")[0])
        except ValueError:
            raise Broken(
                f"the server sent an invalid Content-Length {headers['content-length']!r}"
            ) from None
        pieces = _sized(reader, length, timeout_s)
    else:
        pieces = _until_close(reader, timeout_s)
    # An identity body is the pieces themselves: one async-generator layer less per piece.
    return pieces if decoder is None else _decoded(pieces, decoder)


async def _decoded(pieces: AsyncIterator[bytes], decoder: Any) -> AsyncIterator[bytes]:
    async for piece in pieces:
        if out := decoder.decompress(piece):
            yield out
    if tail := decoder.flush():
        yield tail


def _decoder(encoding: str) -> Any:
    if encoding in ("identity", ""):
        return None
    import zlib

    if encoding in ("gzip", "x-gzip"):
        return zlib.decompressobj(16 + zlib.MAX_WBITS)
    if encoding == "deflate":
        return zlib.decompressobj()
    raise Broken(f"the server compressed its answer with {encoding!r}, which tether cannot decode")


async def _receive(
    op: Awaitable[bytes], timeout_s: float | None, *, cut: str, ready: bool = False
) -> bytes:
    """One read of the body under its deadline, its failures as transport errors; `cut` says
    what an early end of the connection means here. A `ready` read (its bytes are already
    buffered) cannot wait, so no deadline is armed: a timer per read was ~1/10 of the CPU an
    App Server spends on a text turn (three reads per chunk of a chunked body)."""
    try:
        if ready:
            return await op
        async with asyncio.timeout(timeout_s):
            return await op
    except TimeoutError:
        raise TimedOut("reading the response") from None
    except asyncio.IncompleteReadError:
        raise Broken(cut) from None
    except asyncio.LimitOverrunError:
        raise Broken("the server sent an overlong chunk header") from None
    except OSError as exc:
        raise Broken(f"the connection broke mid-response ({exc.strerror or exc})") from None


def _buffered(reader: asyncio.StreamReader) -> bytes | bytearray:
    # What arrived and was not read yet (asyncio keeps it in `_buffer`; without it, every
    # read just takes the armed path).
    return getattr(reader, "_buffer", b"")


def _read(
    reader: asyncio.StreamReader, n: int, timeout_s: float | None, *, exact: bool = False
) -> Awaitable[bytes]:
    have = len(_buffered(reader))
    op = reader.readexactly(n) if exact else reader.read(n)
    ready = have >= n if exact else have > 0
    return _receive(op, timeout_s, cut="the server closed the connection mid-response", ready=ready)


def _line(reader: asyncio.StreamReader, timeout_s: float | None) -> Awaitable[bytes]:
    ready = b"\r\n" in _buffered(reader)
    return _receive(reader.readuntil(b"\r\n"), timeout_s, cut=_CHUNKS_UNFINISHED, ready=ready)


async def _chunked(reader: asyncio.StreamReader, timeout_s: float | None) -> AsyncIterator[bytes]:
    while True:
        size_line = (await _line(reader, timeout_s)).split(b";", 1)[0].strip()
        try:
            size = int(size_line, 16)
        except ValueError:
            raise Broken(f"the server sent an invalid chunk size {size_line[:20]!r}") from None
        if size == 0:
            while (await _line(reader, timeout_s)) != b"\r\n":
                pass  # trailer fields, unused
            return
        while size:
            piece = await _read(reader, min(size, _READ_SIZE), timeout_s)
            if not piece:
                raise Broken(_CHUNKS_UNFINISHED)
            size -= len(piece)
            yield piece
        if await _read(reader, 2, timeout_s, exact=True) != b"\r\n":
            raise Broken("the server sent a chunk longer than its declared size")


async def _sized(
    reader: asyncio.StreamReader, length: int, timeout_s: float | None
) -> AsyncIterator[bytes]:
    while length > 0:
        piece = await _read(reader, min(length, _READ_SIZE), timeout_s)
        if not piece:
            raise Broken(
                f"the server closed the connection {length} bytes before the end of the body"
            )
        length -= len(piece)
        yield piece


async def _until_close(
    reader: asyncio.StreamReader, timeout_s: float | None
) -> AsyncIterator[bytes]:
    while piece := await _read(reader, _READ_SIZE, timeout_s):
        yield piece
