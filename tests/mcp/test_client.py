"""MCP clients against real servers from the package registries (mcp-server-time, a crasher)."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path

from tether.core.tools import ToolRegistry, ToolRunContext
from tether.mcp.client import McpServers
from tether.mcp.config import McpServerConfig
from tether.mcp.tools import registrar


def stdio(name: str, *args: str, timeout: float | None = None) -> McpServerConfig:
    return McpServerConfig(name, "stdio", "cli", "test", command=sys.executable, args=args,
                           timeout_s=timeout)


TIME = stdio("time", "-m", "mcp_server_time", "--local-timezone", "UTC")


def run(coro):  # type: ignore[no-untyped-def]
    return asyncio.run(coro)


def test_time_server_tools_registered_and_called(tmp_path: Path) -> None:
    async def go() -> tuple[list[str], str, bool]:
        registry = ToolRegistry()
        servers = McpServers((TIME,), env=dict(os.environ))
        servers.on_change = registrar(lambda: registry, servers)
        try:
            await servers.ready()
            tool = registry.get("mcp__time__get_current_time")
            assert tool is not None, servers.status()
            ok = await tool.run({"timezone": "UTC"}, ToolRunContext(tmp_path, "c1", scratch_dir=tmp_path))
            bad = await tool.run({"timezone": "Nope/Zone"}, ToolRunContext(tmp_path, "c2", scratch_dir=tmp_path))
            return sorted(registry.names()), ok.output, bad.is_error
        finally:
            await servers.close()

    names, output, bad_is_error = run(go())
    # mcp-server-time declares the resources capability: the resource tools come with it
    assert names == ["ListMcpResources", "ReadMcpResource", "mcp__time__convert_time",
                     "mcp__time__get_current_time"]
    assert '"timezone": "UTC"' in output
    assert bad_is_error


def test_failing_and_slow_servers_are_reported_and_bounded(tmp_path: Path) -> None:
    crash = stdio("crash", "-c", "import sys; sys.exit(3)")
    slow = stdio("slow", "-c", "import time; time.sleep(60)", timeout=1.0)
    missing = McpServerConfig("missing", "stdio", "cli", "test", command="/nonexistent/server")

    async def go() -> tuple[dict[str, dict], float]:
        servers = McpServers((TIME, crash, slow, missing), env=dict(os.environ))
        loop = asyncio.get_running_loop()
        started = loop.time()
        try:
            await servers.ready()
            return {s["name"]: s for s in servers.status()}, loop.time() - started
        finally:
            await servers.close()

    status, took = run(go())
    assert status["time"]["status"] == "connected"
    for name in ("crash", "slow", "missing"):
        assert status[name]["status"] == "failed" and status[name]["error"], status
    assert "within 1 s" in status["slow"]["error"]
    assert took < 15


def test_server_that_dies_mid_session_withdraws_its_tools(tmp_path: Path) -> None:
    async def go() -> tuple[bool, str, list[str]]:
        registry = ToolRegistry()
        servers = McpServers((TIME,), env=dict(os.environ))
        servers.on_change = registrar(lambda: registry, servers)
        try:
            await servers.ready()
            tool = registry.get("mcp__time__get_current_time")
            assert tool is not None
            os.killpg(_server_group(), 9)
            await asyncio.sleep(0.3)
            result = await tool.run({"timezone": "UTC"}, ToolRunContext(tmp_path, "c1"))
            return result.is_error, result.output, registry.names()
        finally:
            await servers.close()

    is_error, output, names = run(go())
    assert is_error and "time" in output
    assert names == []


def _server_group() -> int:
    """The process group of the leash this process started (its only child session)."""
    me = os.getpid()
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()
        if int(fields[1]) == me and "tether.mcp.leash" in Path(f"/proc/{entry}/cmdline").read_text():
            return int(fields[2])
    raise AssertionError("no leash child found")
