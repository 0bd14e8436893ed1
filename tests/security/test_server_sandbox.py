"""`runtime_start{workspace_sandbox: true}` is enforced (issue 14): through the real `tether
server`, an approved shell command that writes outside the workspace has no effect on disk,
while its write inside the workspace lands (so it did run). The same command in a runtime
started without the sandbox does write outside: the test can tell the difference."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest
from websockets.asyncio.client import connect

from tests.requirements import need_bwrap
from tests.security.support import MARKER, World, bash
from tests.server.support import Client, ServerProcess, server_env
from tether.testing.fake_provider import FakeProvider

OUTSIDE_WRITES = {
    "touch": "touch {outside}/" + MARKER,
    "redirect into home": "echo x > {home}/" + MARKER,
    "mkdir": "mkdir {outside}/" + MARKER + "_dir",
    "symlink": "ln -s /etc {outside}/" + MARKER + "_link",
    "python": "python3 -c \"open('{outside}/" + MARKER + "_py', 'w').write('x')\"",
    "cp": "cp README.md {outside}/" + MARKER + "_cp",
    "into tether home": "touch {tether_home}/" + MARKER,
}


def _run(world: World, command: str, *, sandbox: bool) -> tuple[dict[str, Any], list[Any]]:
    script = [{"tool_calls": [bash(command)]}, {"text": "done"}]
    with FakeProvider(script) as fake:
        server = ServerProcess(server_env(fake.url, world.tether_home, world.root), world.project)
        try:
            return asyncio.run(_turn(server.url, world, sandbox))
        finally:
            server.stop()


async def _turn(url: str, world: World, sandbox: bool) -> tuple[dict[str, Any], list[Any]]:
    async with connect(url, open_timeout=10) as ws:
        c = Client(ws)
        started = await c.start(world.project, workspace_sandbox=sandbox)
        assert started["workspace_sandbox"] is sandbox, started
        runtime = started["runtime"]
        await c.say(runtime, "go")
        while True:
            frame = await c.wait_for(
                lambda f: f.get("type") in ("control_request", "turn_finished"), timeout=60
            )
            if frame["type"] == "turn_finished":
                return frame, c.deltas("tool_return_message")
            await c.answer(runtime, frame["request_id"], "allow")


@pytest.mark.parametrize("write", OUTSIDE_WRITES.values(), ids=OUTSIDE_WRITES.keys())
def test_workspace_sandbox_keeps_approved_writes_inside(world: World, write: str) -> None:
    need_bwrap()
    command = write.format(outside=world.outside, home=world.home, tether_home=world.tether_home)
    finished, returns = _run(world, f"{command}; echo ran > inside-ok.txt", sandbox=True)
    assert finished["stop_reason"] == "end_turn", finished
    assert len(returns) == 1, returns
    assert not world.effects(), (world.effects(), returns)
    output = str(returns[0].get("tool_return"))
    if "Permission denied by" in output:  # refused before it ran (a guard saw the target)
        assert not (world.project / "inside-ok.txt").exists()
    else:  # it ran, and only its write inside the workspace landed
        assert (world.project / "inside-ok.txt").read_text() == "ran\n", returns


def test_without_the_sandbox_the_same_write_lands(world: World) -> None:
    """The control: what the sandbox stopped above is a real effect when nothing stops it."""
    command = f"touch {world.outside}/{MARKER}; echo ran > inside-ok.txt"
    finished, _ = _run(world, command, sandbox=False)
    assert finished["stop_reason"] == "end_turn"
    assert world.effects() == [world.outside / MARKER]


def test_workspace_sandbox_root_other_than_cwd_is_refused(world: World, tmp_path: Path) -> None:
    with FakeProvider([]) as fake:
        server = ServerProcess(server_env(fake.url, world.tether_home, world.root), world.project)
        try:

            async def scenario() -> dict[str, Any]:
                async with connect(server.url, open_timeout=10) as ws:
                    c = Client(ws)
                    await c.send({"type": "runtime_start", "request_id": "s",
                                  "cwd": str(world.project),
                                  "create_agent": {"body": {"model": "anthropic/claude-test"}},
                                  "workspace_sandbox": {"root": str(world.outside)}})
                    return await c.of_type("runtime_start_response")

            answer = asyncio.run(scenario())
        finally:
            server.stop()
    assert answer["success"] is False and "workspace_sandbox.root" in answer["error"]
    assert not list(world.tether_home.glob("agents/*.json"))  # nothing was created
