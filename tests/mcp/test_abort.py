"""A hung MCP call ends like a Bash command: on abort, past its limit, and at close the server's
whole process group is killed (the hanging server ignores SIGTERM and reads nothing more)."""

from __future__ import annotations

import asyncio
import os
import sys
from pathlib import Path
from typing import Any

import pytest

from tether.core.tools import ToolRegistry, ToolRunContext
from tether.errors import UsageError
from tether.mcp.client import McpServers
from tether.mcp.config import McpServerConfig, parse_servers
from tether.mcp.tools import registrar

REPO = Path(__file__).resolve().parents[2]


def hanging(mark: Path, timeout_s: float | None = None) -> McpServerConfig:
    return McpServerConfig("hang", "stdio", "cli", "test", command=sys.executable,
                           args=("-m", "tests.mcp.servers.hanging"), cwd=REPO,
                           env={"HANGING_MARK": str(mark)}, timeout_s=timeout_s)


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


async def wait_gone(pid: int, within: float = 5.0) -> bool:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + within
    while alive(pid) and loop.time() < deadline:
        await asyncio.sleep(0.05)
    return not alive(pid)


async def call_hang(tmp_path: Path, servers: McpServers, abort: asyncio.Event) -> Any:
    registry = ToolRegistry()
    servers.on_change = registrar(lambda: registry, servers)
    await servers.ready()
    tool = registry.get("mcp__hang__hang")
    assert tool is not None, servers.status()
    ctx = ToolRunContext(tmp_path, "call-1", abort=abort, scratch_dir=tmp_path)
    return await tool.run({}, ctx)


def test_abort_ends_the_call_and_close_kills_the_server(tmp_path: Path) -> None:
    mark = tmp_path / "mark"

    async def go() -> tuple[Any, int, bool]:
        servers = McpServers((hanging(mark),), env=dict(os.environ))
        abort = asyncio.Event()

        async def abort_when_in_flight() -> None:
            while not mark.exists():
                await asyncio.sleep(0.02)
            abort.set()

        try:
            trigger = asyncio.ensure_future(abort_when_in_flight())
            result = await asyncio.wait_for(call_hang(tmp_path, servers, abort), 60)
            await trigger
        finally:
            await servers.close()
        pid = int(mark.read_text())
        return result, pid, await wait_gone(pid)

    result, pid, gone = asyncio.run(go())
    assert result.is_error and result.output == "Interrupted by user"
    assert gone, f"the hanging server {pid} outlived close()"


def test_a_server_timeout_ends_the_call_as_timed_out(tmp_path: Path) -> None:
    mark = tmp_path / "mark"

    async def go() -> Any:
        servers = McpServers((hanging(mark, timeout_s=4.0),), env=dict(os.environ),
                             call_timeout_ms=600_000)  # the server's own limit wins
        try:
            return await asyncio.wait_for(call_hang(tmp_path, servers, asyncio.Event()), 60)
        finally:
            await servers.close()

    result = asyncio.run(go())
    assert result.is_error
    assert result.output.startswith("MCP tool call timed out after 4000ms"), result.output
    assert mark.exists()  # the call did reach the server


@pytest.mark.parametrize(("env", "setting", "says"), [
    ({}, 1200, "after 1200ms"),  # the mcpToolTimeout setting
    ({"MCP_TOOL_TIMEOUT": "900"}, 5000, "after 900ms"),  # the environment beats the setting
])
def test_run_wide_timeouts(tmp_path: Path, env: dict[str, str], setting: int, says: str) -> None:
    mark = tmp_path / "mark"

    async def go() -> Any:
        servers = McpServers((hanging(mark),), env={**os.environ, **env}, call_timeout_ms=setting)
        try:
            return await asyncio.wait_for(call_hang(tmp_path, servers, asyncio.Event()), 60)
        finally:
            await servers.close()

    result = asyncio.run(go())
    assert result.is_error and says in result.output, result.output


def test_the_default_call_limit_stays_600_s() -> None:
    servers = McpServers((hanging(Path("unused")),), env={})
    assert servers.call_timeout("hang") == 600.0


@pytest.mark.parametrize("value", ["0", "-5", "1.5s", "ten", str(86_400_001)])
def test_a_bad_timeout_variable_is_a_clear_error(value: str) -> None:
    with pytest.raises(UsageError, match="MCP_TOOL_TIMEOUT environment variable must be a whole "
                                         "number of milliseconds"):
        McpServers((), env={"MCP_TOOL_TIMEOUT": value})


@pytest.mark.parametrize("value", [0, -1, "5000", True, 1.5, {}])
def test_a_bad_server_timeout_is_a_clear_error(value: Any) -> None:
    raw = {"x": {"command": "srv", "timeout": value}}
    with pytest.raises(UsageError, match=r"mcpServers\.x\.timeout must be a whole number of milliseconds"):
        parse_servers(raw, source="user", origin="settings.json", env={}, base=Path("/"))


def test_a_server_timeout_is_read_in_milliseconds() -> None:
    [server] = parse_servers({"x": {"command": "srv", "timeout": 2500}}, source="user",
                             origin="settings.json", env={}, base=Path("/"))
    assert server.timeout_s == 2.5
    assert server.describe()["timeout"] == 2500  # what `tether mcp get` shows


def test_the_setting_is_validated_and_held_to_trust(tmp_path: Path) -> None:
    from tether.runtime.session.settings import load_settings

    home, cwd = tmp_path / "tether-home", tmp_path / "project"
    (cwd / ".tether").mkdir(parents=True)
    home.mkdir(exist_ok=True)
    (home / "settings.json").write_text('{"mcpToolTimeout": "30s"}')
    with pytest.raises(UsageError, match=r"settings\.json: mcpToolTimeout must be a whole number of "
                                         r"milliseconds from 1 to 86400000 \(a day\), not '30s'"):
        load_settings(home, cwd, trust="untrusted")
    (home / "settings.json").write_text('{"mcpToolTimeout": 45000}')
    (cwd / ".tether" / "settings.json").write_text('{"mcpToolTimeout": 86400000}')
    untrusted = load_settings(home, cwd, trust="untrusted")
    assert untrusted.mcp_tool_timeout_ms == 45000
    assert any("mcpToolTimeout" in line for line in untrusted.ignored)
    assert load_settings(home, cwd, trust="trusted").mcp_tool_timeout_ms == 86_400_000


def test_resource_reads_honour_abort_too(tmp_path: Path) -> None:
    mark = tmp_path / "mark"

    async def go() -> Any:
        servers = McpServers((hanging(mark),), env=dict(os.environ))
        registry = ToolRegistry()
        servers.on_change = registrar(lambda: registry, servers)
        abort = asyncio.Event()

        async def abort_when_in_flight() -> None:
            while not mark.exists():
                await asyncio.sleep(0.02)
            abort.set()

        try:
            await servers.ready()
            tool = registry.get("ReadMcpResource")
            assert tool is not None, servers.status()
            trigger = asyncio.ensure_future(abort_when_in_flight())
            ctx = ToolRunContext(tmp_path, "call-r", abort=abort, scratch_dir=tmp_path)
            result = await asyncio.wait_for(tool.run({"server": "hang", "uri": "hang://forever"}, ctx), 60)
            await trigger
            return result
        finally:
            await servers.close()

    result = asyncio.run(go())
    assert result.is_error and result.output == "Interrupted by user"


def test_a_leash_is_found_by_its_token_and_its_group_killed() -> None:
    import subprocess

    from tether.mcp import leash

    child = subprocess.Popen([sys.executable, "-m", "tether.mcp.leash", "--", "sleep", "60"],
                             env={**os.environ, leash.LEASH_ENV: "tok-1"}, start_new_session=True)
    try:
        found = None
        for _ in range(100):  # until the leash has forked its server
            found = leash.find_leash("tok-1")
            if found is not None:
                break
        assert found == child.pid
        assert child.pid in leash._children_by_parent()  # the fallback sees it too
        assert leash.find_leash("tok-2") is None
        assert not leash.kill_leash(child.pid, "tok-2")  # another token: not that leash
        assert leash.kill_leash(child.pid, "tok-1")
        assert child.wait(timeout=10) != 0
    finally:
        child.kill()
        child.wait()
