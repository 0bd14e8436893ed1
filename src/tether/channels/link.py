"""The gateway's websocket link to `tether server` (protocol v2): connect with the bearer
token, send frames, wait for the response to a request id, and hand every other frame to the
gateway; reconnects with backoff when the server goes away. Each connection has a number
(`generation`): a runtime started on an earlier one is not started on this one."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import Awaitable, Callable
from typing import Any

import orjson

Frame = dict[str, Any]


class ServerLink:
    def __init__(
        self, url: str, token: str | None, on_frame: Callable[[Frame], Awaitable[None]],
        on_connect: Callable[[], Awaitable[None]],
    ) -> None:
        self.url = url
        self.token = token
        self.on_frame = on_frame
        self.on_connect = on_connect
        self.ws: Any = None
        self.waiting: dict[str, asyncio.Future[Frame]] = {}
        self.connected = asyncio.Event()
        self.generation = 0  # which connection this is (runtimes are per connection)
        self._ids = itertools.count(1)
        self._task: asyncio.Task[None] | None = None
        self._closing = False

    def request_id(self, prefix: str) -> str:
        return f"gw-{prefix}-{next(self._ids)}"

    async def connect_once(self) -> None:
        from websockets.asyncio.client import connect

        headers = {"Authorization": f"Bearer {self.token}"} if self.token else None
        self.ws = await connect(self.url, additional_headers=headers, open_timeout=10,
                                max_size=None)

    async def run(self) -> None:
        """Read frames until closed; reconnect (1 s, 2 s, … 10 s) when the server drops."""
        from websockets.exceptions import ConnectionClosed

        delay = 1.0
        while not self._closing:
            if self.ws is None:
                try:
                    await self.connect_once()
                except (OSError, TimeoutError, Exception) as exc:  # noqa: BLE001 - any failure: retry
                    print(f"channel-gateway: cannot reach {self.url} ({exc}); retrying",
                          flush=True)
                    await asyncio.sleep(delay)
                    delay = min(delay * 2, 10.0)
                    continue
                delay = 1.0
                self.generation += 1
                self.connected.set()
                asyncio.ensure_future(self._announce())
            try:
                async for raw in self.ws:
                    frame = orjson.loads(raw)
                    rid = frame.get("request_id")
                    waiter = self.waiting.get(rid) if isinstance(rid, str) else None
                    if waiter is not None and not waiter.done() and frame.get("type") != (
                        "control_request"
                    ):
                        waiter.set_result(frame)
                        continue
                    asyncio.ensure_future(self._deliver(frame))
            except ConnectionClosed:
                pass
            self.connected.clear()
            self.ws = None
            for waiter in self.waiting.values():
                if not waiter.done():
                    waiter.set_exception(ConnectionError("the App Server connection closed"))

    async def _announce(self) -> None:
        try:
            await self.on_connect()
        except Exception as exc:  # noqa: BLE001 - logged, the link keeps running
            print(f"channel-gateway: starting runtimes failed: {exc}", flush=True)

    async def _deliver(self, frame: Frame) -> None:
        try:
            await self.on_frame(frame)
        except Exception as exc:  # noqa: BLE001 - one bad frame never stops the gateway
            print(f"channel-gateway: handling {frame.get('type')} failed: "
                  f"{type(exc).__name__}: {exc}", flush=True)

    async def send(self, frame: Frame) -> None:
        await self.connected.wait()
        await self.ws.send(orjson.dumps(frame).decode())

    async def call(self, frame: Frame, timeout: float = 60) -> Frame:
        """Send a frame with a request_id and wait for the frame answering it."""
        rid = frame["request_id"]
        fut: asyncio.Future[Frame] = asyncio.get_running_loop().create_future()
        self.waiting[rid] = fut
        try:
            await self.send(frame)
            return await asyncio.wait_for(fut, timeout)
        finally:
            self.waiting.pop(rid, None)

    async def close(self) -> None:
        self._closing = True
        if self.ws is not None:
            with contextlib.suppress(Exception):
                await self.ws.close()
