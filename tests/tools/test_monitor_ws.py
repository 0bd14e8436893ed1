"""Monitor's `ws` source against a real WebSocket server on loopback: the first message is the
condition; `persistent` logs every message in a background task until the server closes."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
from websockets.asyncio.server import ServerConnection, serve

from tether.tools.monitor import MonitorTool, ws_watcher

from .support import make_ctx


@asynccontextmanager
async def ws_server(handler: Callable[[ServerConnection], Any]) -> AsyncIterator[str]:
    async with serve(handler, "127.0.0.1", 0) as server:
        port = next(iter(server.sockets)).getsockname()[1]
        yield f"ws://127.0.0.1:{port}/events"


def test_the_first_message_meets_the_condition(tmp_path: Path) -> None:
    async def handler(ws: ServerConnection) -> None:
        await asyncio.sleep(0.2)
        await ws.send("build finished\nall green")
        await asyncio.sleep(5)

    async def scenario() -> None:
        async with ws_server(handler) as url:
            result = await MonitorTool().run(
                {"description": "build", "ws": url, "timeout_ms": 10_000}, make_ctx(tmp_path))
        assert not result.is_error, result.output
        assert result.output.startswith("Condition met")
        assert f"[connected to {url}]" in result.output
        assert "build finished\\nall green" in result.output  # one line per message

    asyncio.run(scenario())


def test_silence_times_out_and_a_refused_connection_is_an_error(tmp_path: Path) -> None:
    async def handler(ws: ServerConnection) -> None:
        await asyncio.sleep(30)

    async def scenario() -> None:
        async with ws_server(handler) as url:
            quiet = await MonitorTool().run(
                {"description": "quiet", "ws": url, "timeout_ms": 1_500}, make_ctx(tmp_path))
        assert quiet.is_error and "timed out after 1500ms" in quiet.output
        refused = await MonitorTool().run(
            {"description": "nobody", "ws": url, "timeout_ms": 10_000}, make_ctx(tmp_path))
        assert refused.is_error and "exited with code 2" in refused.output
        assert "could not watch" in refused.output

    asyncio.run(scenario())


def test_closed_before_any_message_is_not_the_condition(tmp_path: Path) -> None:
    async def handler(ws: ServerConnection) -> None:
        await ws.close()

    async def scenario() -> None:
        async with ws_server(handler) as url:
            result = await MonitorTool().run(
                {"description": "x", "ws": url, "timeout_ms": 10_000}, make_ctx(tmp_path))
        assert result.is_error and "exited with code 1" in result.output
        assert "[closed by the server" in result.output

    asyncio.run(scenario())


def test_persistent_logs_every_message_in_a_background_task(tmp_path: Path) -> None:
    async def handler(ws: ServerConnection) -> None:
        for n in range(3):
            await ws.send(f"event {n}")
            await asyncio.sleep(0.05)
        await ws.send(b"\x00\x01")
        await ws.close()

    async def scenario() -> None:
        monitor = MonitorTool()
        ctx = make_ctx(tmp_path)
        async with ws_server(handler) as url:
            started = await monitor.run(
                {"description": "events", "ws": url, "persistent": True}, ctx)
            assert not started.is_error, started.output
            task_id = started.output.split("ID: ")[1].split()[0].rstrip(".)")
            pool = monitor._bash.background_tasks(ctx)
            assert await pool.wait(task_id, 15)
        output = pool.output(task_id)
        assert [line for line in output.splitlines() if line.startswith("event")] == [
            "event 0", "event 1", "event 2"]
        assert "<binary message: 2 bytes>" in output and "[closed by the server" in output

    asyncio.run(scenario())


@pytest.mark.parametrize("url, why", [
    ("http://127.0.0.1:1/x", "ws:// or wss://"),
    ("ws:///nohost", "with a host"),
    ("ws://h/x y", "spaces"),
    ("ws://h/x\n; touch /tmp/pwned", "control"),
])
def test_a_bad_url_is_refused_before_anything_runs(tmp_path: Path, url: str, why: str) -> None:
    result = asyncio.run(MonitorTool().run(
        {"description": "x", "ws": url}, make_ctx(tmp_path)))
    assert result.is_error and why in result.output
    both = asyncio.run(MonitorTool().run(
        {"description": "x", "ws": "ws://h/", "command": "true"}, make_ctx(tmp_path)))
    assert both.is_error and "exactly one" in both.output


def test_the_url_is_one_quoted_word_of_the_watcher_command(tmp_path: Path) -> None:
    planted = tmp_path / "pwned"
    url = f"ws://127.0.0.1:1/$(touch${{IFS}}{planted})'x"
    command = ws_watcher(url, persistent=False)
    assert command.endswith(f" -m tether.tools.ws_watch --first 'ws://127.0.0.1:1/$(touch${{IFS}}"
                            f"{planted})'\"'\"'x'")
    result = asyncio.run(MonitorTool().run(
        {"description": "x", "ws": url, "timeout_ms": 10_000}, make_ctx(tmp_path)))
    assert result.is_error and "could not watch" in result.output
    assert not planted.exists()
