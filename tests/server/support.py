"""Driving the App Server from tests: in-process or as the real `tether server`, over real
websockets and raw HTTP on loopback, against the fake provider."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from websockets.asyncio.client import ClientConnection, connect

from tests.e2e.support import TETHER
from tether.server.app_server import AppServer, ServerOptions, make_context
from tether.testing.fake_provider import FakeProvider

MODEL = "anthropic/claude-test"
Frame = dict[str, Any]


def provider_env(url: str) -> dict[str, str]:
    return {"ANTHROPIC_BASE_URL": url, "ANTHROPIC_API_KEY": "sk-test"}


def point_at(fake: FakeProvider, monkeypatch: pytest.MonkeyPatch) -> None:
    """This process's provider settings, for an in-process server, point at `fake`."""
    for key, value in provider_env(fake.url).items():
        monkeypatch.setenv(key, value)


def bash(command: str) -> dict[str, Any]:
    return {"name": "Bash", "arguments": {"command": command, "description": "test"}}


class Client:
    """A protocol v2 peer: sends frames, waits for frames matching a predicate, keeps them all."""

    def __init__(self, ws: ClientConnection) -> None:
        self.ws = ws
        self.seen: list[Frame] = []

    async def send(self, frame: Frame | str) -> None:
        await self.ws.send(frame if isinstance(frame, str) else json.dumps(frame))

    async def wait_for(self, pred: Callable[[Frame], bool], timeout: float = 20) -> Frame:
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise AssertionError(f"timed out; saw {[f.get('type') for f in self.seen]}")
            try:
                raw = await asyncio.wait_for(self.ws.recv(), left)
            except TimeoutError:
                continue
            frame = json.loads(raw)
            self.seen.append(frame)
            if pred(frame):
                return frame

    async def of_type(self, kind: str, timeout: float = 20, **match: Any) -> Frame:
        return await self.wait_for(
            lambda f: f.get("type") == kind and all(f.get(k) == v for k, v in match.items()),
            timeout,
        )

    async def start(self, cwd: Path, **fields: Any) -> Frame:
        if "agent_id" not in fields:
            fields.setdefault("create_agent", {"body": {"model": MODEL}})
        if "conversation_id" not in fields:
            fields.setdefault("create_conversation", {})
        await self.send(
            {"type": "runtime_start", "request_id": "start-1", "cwd": str(cwd), **fields}
        )
        response = await self.of_type("runtime_start_response")
        assert response["success"], response
        return response

    async def say(
        self, runtime: dict[str, str], text: str, request_id: str | None = "in-1",
        idempotency_key: str | None = None,
    ) -> None:
        frame: Frame = {
            "type": "input",
            "runtime": runtime,
            "payload": {"kind": "create_message", "messages": [{"role": "user", "content": text}]},
        }
        if request_id is not None:
            frame["request_id"] = request_id
        if idempotency_key is not None:
            frame["idempotency_key"] = idempotency_key
        await self.send(frame)

    async def answer(
        self, runtime: dict[str, str], request_id: str, behavior: str = "allow", **extra: Any
    ) -> None:
        await self.send(
            {
                "type": "input",
                "runtime": runtime,
                "payload": {
                    "kind": "approval_response",
                    "request_id": request_id,
                    "decision": {"behavior": behavior, **extra},
                },
            }
        )

    def deltas(self, message_type: str) -> list[Frame]:
        return [
            f["delta"]
            for f in self.seen
            if f.get("type") == "stream_delta" and f["delta"].get("message_type") == message_type
        ]


class InProcess:
    """An AppServer on this event loop (the environment must already point at the provider)."""

    def __init__(self, cwd: Path, **options: Any) -> None:
        self.options = ServerOptions(cwd=cwd, **options)
        self.server: AppServer | None = None
        self.url = ""

    async def __aenter__(self) -> InProcess:
        ctx = make_context(self.options, dict(os.environ))
        self.server = AppServer(self.options, ctx)
        self.url = await self.server.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        assert self.server is not None
        await self.server.stop()
        self.server.ctx.checkpoints.close()

    @property
    def port(self) -> int:
        assert self.server is not None
        return self.server.port

    def connect(self, **kw: Any) -> Any:
        return connect(self.url, open_timeout=10, **kw)


async def raw_http(
    port: int, request_line: str, headers: dict[str, str] | None = None, host: str | None = None
) -> tuple[int, str]:
    """Send one HTTP/1.1 request by hand (to set any Host / Origin); returns (status, body)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    lines = [request_line, f"Host: {host if host is not None else f'127.0.0.1:{port}'}"]
    lines += [f"{k}: {v}" for k, v in (headers or {}).items()]
    writer.write(("\r\n".join(lines) + "\r\n\r\n").encode())
    await writer.drain()
    data = await asyncio.wait_for(reader.read(65536), 10)
    writer.close()
    head, _, body = data.decode("utf-8", "replace").partition("\r\n\r\n")
    return int(head.split(" ", 2)[1]), body


UPGRADE = {
    "Upgrade": "websocket",
    "Connection": "Upgrade",
    "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==",
    "Sec-WebSocket-Version": "13",
}


class ServerProcess:
    """The real `tether server` console script in a subprocess."""

    def __init__(self, env: dict[str, str], cwd: Path, *args: str) -> None:
        self.proc = subprocess.Popen(
            [TETHER, "server", "--listen", "ws://127.0.0.1:0", *args],
            env=env,
            cwd=cwd,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline().strip()
        if not line:
            err = self.proc.stderr.read() if self.proc.stderr else ""
            raise AssertionError(f"tether server printed no URL (exit {self.proc.poll()}): {err}")
        self.url = line

    @property
    def http_base(self) -> str:
        """The server's HTTP root (its websocket URL without ws:// and /ws)."""
        return self.url.replace("ws://", "http://").removesuffix("/ws")

    def kill_9(self) -> None:
        """SIGKILL, as a crash: the server gets no chance to clean up."""
        os.kill(self.proc.pid, signal.SIGKILL)
        assert self.stop() == -signal.SIGKILL

    def stop(self, sig: int | None = None) -> int:
        if self.proc.poll() is None:
            if sig is None:
                self.proc.terminate()
            else:
                self.proc.send_signal(sig)
        code = self.proc.wait(timeout=20)
        for stream in (self.proc.stdout, self.proc.stderr):
            if stream is not None:
                stream.close()
        return code


def server_env(url: str, home: Path, tmp: Path) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("ANTHROPIC_", "OPENAI_", "TETHER_"))
    }
    env.update(provider_env(url))
    env["TETHER_HOME"] = str(home)
    env["HOME"] = str(tmp / "home")
    env.pop("PYTHONUNBUFFERED", None)  # the URL line must be flushed anyway
    return env


async def released(srv: InProcess, scope_key: tuple[str, str]) -> None:
    """Wait until the server's table no longer holds the runtime (grace 0: the next turns)."""
    assert srv.server is not None
    for _ in range(200):
        if all((s.agent_id, s.conversation_id) != scope_key for s in srv.server.runtimes):
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"runtime {scope_key} was not released: {list(srv.server.runtimes)}")
