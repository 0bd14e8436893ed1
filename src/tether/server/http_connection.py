"""The App Server's connections: `/v1/` requests served as plain HTTP/1.1, the rest websockets.

`websockets` reads only bodiless GET requests and would close a long streaming reply after its
handshake timeout, so the OpenAI bridge gives `serve()` this connection class: it reads the
request line first and either hands the bytes on to the websocket handshake or answers the
request itself through the bridge (one request per connection, `Connection: close`).
"""

from __future__ import annotations

import asyncio
import contextlib
import http
from typing import TYPE_CHECKING, Any, ClassVar

import orjson
from websockets.asyncio.server import ServerConnection

from tether.server import auth

if TYPE_CHECKING:
    from tether.server.openai_bridge import OpenAIBridge, TurnWatch

API_PREFIX = b"/v1/"
REQUEST_LINE_TIMEOUT_S = 10.0  # as websockets' open_timeout for the upgrade
REQUEST_TIMEOUT_S = 60.0  # headers and body
MAX_HEAD_BYTES = 64 * 1024
_ERROR_TYPES = {401: "authentication_error", 403: "permission_error", 404: "not_found_error"}


class ApiError(Exception):
    """An OpenAI-shaped error response: `{"error": {message, type, param, code}}`."""

    def __init__(
        self, status: int, message: str, param: str | None = None, code: str | None = None
    ) -> None:
        super().__init__(message)
        self.status, self.message, self.param, self.code = status, message, param, code

    def body(self) -> dict[str, Any]:
        kind = _ERROR_TYPES.get(self.status) or (
            "server_error" if self.status >= 500 else "invalid_request_error"
        )
        if self.status == 429:
            kind = "rate_limit_error"
        return {
            "error": {"message": self.message, "type": kind, "param": self.param, "code": self.code}
        }


# --- the connection: /v1/ here, everything else to websockets --------------------------------


class HttpConnection(ServerConnection):
    bridge: ClassVar[OpenAIBridge]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.route: str | None = None  # "ws" | "http" once the request line is in
        self.head_sent = False
        self.body_read = False
        self.declared_body = 0
        self._chunked = False
        self.watch: TurnWatch | None = None
        self.grant = auth.NO_GRANT  # replaced once the request is authorized
        self._first = bytearray()
        self._reader = asyncio.StreamReader(limit=MAX_HEAD_BYTES)
        self._raw: asyncio.Transport | None = None
        self._timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # websockets starts its handshake task here; that waits until the request line is in.
        assert isinstance(transport, asyncio.Transport)
        self._raw = transport
        self._timer = self.loop.call_later(REQUEST_LINE_TIMEOUT_S, transport.abort)

    def data_received(self, data: bytes) -> None:
        if self.route == "ws":
            super().data_received(data)
            return
        if self.route == "http":
            self._reader.feed_data(data)
            return
        self._first += data
        if b"\n" not in self._first and len(self._first) < MAX_HEAD_BYTES:
            return
        assert self._raw is not None and self._timer is not None
        self._timer.cancel()
        target = bytes(self._first).split(b"\n", 1)[0].split(b" ")
        if len(target) >= 2 and target[1].startswith(API_PREFIX):
            self.route = "http"
            self.transport = self._raw
            self._reader.set_transport(self._raw)
            self._reader.feed_data(bytes(self._first))
            asyncio.ensure_future(self.bridge.serve(self))
        else:
            self.route = "ws"
            super().connection_made(self._raw)
            super().data_received(bytes(self._first))
        self._first.clear()

    def eof_received(self) -> bool | None:  # type: ignore[override]
        if self.route == "ws":
            return super().eof_received()
        self._reader.feed_eof()
        if self.route == "http":  # HTTP clients do not half-close: this one has left
            self.notify_lost("lost")
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        if self.route == "ws":
            super().connection_lost(exc)
            return
        if self._timer is not None:
            self._timer.cancel()
        self._reader.feed_eof()
        for waiter in self.drain_waiters:
            if not waiter.done():
                waiter.set_result(None)
        self.notify_lost("lost")

    def notify_lost(self, why: str) -> None:
        if self.watch is not None:
            self.watch.give_up(why)

    # --- reading and writing HTTP/1.1 --------------------------------------------------------

    async def read_head(self) -> tuple[str, str, auth.Headers, int] | None:
        """(method, path, headers, body length); None if the client left first."""
        try:
            head = await self._reader.readuntil(b"\r\n\r\n")
        except asyncio.LimitOverrunError:
            raise ApiError(431, "request headers are too large") from None
        except asyncio.IncompleteReadError:
            return None
        lines = head.decode("latin-1").split("\r\n")
        method, _, rest = lines[0].partition(" ")
        target = rest.rpartition(" ")[0] or rest
        pairs = (line.partition(":") for line in lines[1:] if line)
        headers = [(k.strip(), v.strip()) for k, _, v in pairs]
        named = {k.lower(): v for k, v in headers}
        if "transfer-encoding" in named:
            raise ApiError(411, "chunked request bodies are not supported; send Content-Length")
        length = named.get("content-length", "0")
        if not length.isdigit():
            raise ApiError(400, "invalid Content-Length header")
        self.declared_body = int(length)
        return method, target.split("?", 1)[0], headers, self.declared_body

    async def read_body(self, length: int, headers: auth.Headers) -> bytes | None:
        if any(k.lower() == "expect" and v.lower() == "100-continue" for k, v in headers):
            await self._write(b"HTTP/1.1 100 Continue\r\n\r\n")
        try:
            body = await self._reader.readexactly(length)
        except asyncio.IncompleteReadError:
            return None
        self.body_read = True
        return body

    async def send_head(self, status: int, headers: dict[str, str]) -> None:
        self.head_sent = True
        try:
            phrase = http.HTTPStatus(status).phrase
        except ValueError:  # 499, the client went away
            phrase = "Error"
        lines = [f"HTTP/1.1 {status} {phrase}"]
        lines += [f"{k}: {v}" for k, v in {**headers, "Connection": "close"}.items()]
        await self._write(("\r\n".join(lines) + "\r\n\r\n").encode())

    async def send_json(self, status: int, payload: Any) -> None:
        body = orjson.dumps(payload)
        headers = {"Content-Type": "application/json", "Content-Length": str(len(body))}
        await self.send_head(status, headers)
        await self._write(body)

    async def start_sse(self) -> None:
        headers = {"Content-Type": "text/event-stream", "Cache-Control": "no-cache"}
        await self.send_head(200, {**headers, "Transfer-Encoding": "chunked"})
        self._chunked = True

    async def send_event(self, data: Any, name: str | None = None) -> None:
        prefix = f"event: {name}\n".encode() if name else b""
        await self.send_raw(prefix + b"data: " + orjson.dumps(data) + b"\n\n")

    async def send_raw(self, data: bytes) -> None:
        """Body bytes (one chunk of a streamed body)."""
        await self._write(b"%x\r\n%s\r\n" % (len(data), data) if self._chunked else data)

    async def _write(self, data: bytes) -> None:
        if self.transport.is_closing():
            return
        self.transport.write(data)
        await self.drain()

    def finish(self) -> None:
        if not self.transport.is_closing():
            if self._chunked:
                self.transport.write(b"0\r\n\r\n")
            self.transport.close()

    async def linger(self, seconds: float = 1.0) -> None:
        """Read what the client is still sending before closing, so it sees the response and
        not a reset."""
        with contextlib.suppress(TimeoutError, ConnectionError):
            async with asyncio.timeout(seconds):
                while await self._reader.read(65536):
                    pass
