"""A minimal asyncio HTTP/1.1 listener for inbound webhooks (one POST per connection): reads
the request line, headers and a `Content-Length` body (bounded), hands them to a handler and
writes its (status, JSON body) answer. Channels that receive webhooks use it instead of a web
framework, so the gateway needs nothing beyond the standard library for them."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable
from typing import Any

import orjson

MAX_BODY = 1024 * 1024
Handler = Callable[[str, str, dict[str, str], bytes], Awaitable[tuple[int, dict[str, Any]]]]
REASONS = {200: "OK", 400: "Bad Request", 401: "Unauthorized", 404: "Not Found",
           405: "Method Not Allowed", 413: "Payload Too Large", 500: "Internal Server Error"}


class InboundHTTP:
    def __init__(self, host: str, port: int, handler: Handler) -> None:
        self.host, self.port, self.handler = host, port, handler
        self.server: asyncio.Server | None = None

    async def start(self) -> int:
        self.server = await asyncio.start_server(self._serve, self.host, self.port)
        self.port = self.server.sockets[0].getsockname()[1]
        return self.port

    async def stop(self) -> None:
        if self.server is not None:
            self.server.close()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self.server.wait_closed(), 5)

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            status, body = await asyncio.wait_for(self._read_and_handle(reader), 30)
        except (TimeoutError, asyncio.IncompleteReadError, ValueError):
            status, body = 400, {"ok": False, "error": "malformed request"}
        except Exception as exc:  # noqa: BLE001 - the platform retries a 500
            status, body = 500, {"ok": False, "error": f"{type(exc).__name__}: {exc}"}
        data = orjson.dumps(body)
        head = (f"HTTP/1.1 {status} {REASONS.get(status, 'Error')}\r\nContent-Type: "
                f"application/json\r\nContent-Length: {len(data)}\r\nConnection: close\r\n\r\n")
        with contextlib.suppress(Exception):
            writer.write(head.encode() + data)
            await writer.drain()
            writer.close()

    async def _read_and_handle(self, reader: asyncio.StreamReader) -> tuple[int, dict[str, Any]]:
        line = (await reader.readuntil(b"\r\n")).decode("latin-1").strip()
        method, path, _ = line.split(" ", 2)
        headers: dict[str, str] = {}
        while True:
            raw = (await reader.readuntil(b"\r\n")).decode("latin-1")
            if raw == "\r\n":
                break
            name, _, value = raw.partition(":")
            headers[name.strip().lower()] = value.strip()
        length = int(headers.get("content-length", "0"))
        if length > MAX_BODY:
            return 413, {"ok": False, "error": f"body over {MAX_BODY} bytes"}
        body = await reader.readexactly(length) if length else b""
        return await self.handler(method, path, headers, body)
