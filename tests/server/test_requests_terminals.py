"""Terminals over protocol v2 (`terminal_spawn`, `terminal_input`, `terminal_resize`,
`terminal_kill`): a shell on a pty in the workspace whose output comes back as
`terminal_output`, its exit as `terminal_exited`, killed with its connection, outside the
workspace refused, and never opened for a scoped token."""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

import pytest

from tests.server.requests_client import admin_client, token
from tests.server.support import Client, point_at
from tether.testing.fake_provider import FakeProvider


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


async def _output_until(c: Client, terminal_id: str, needle: str) -> str:
    """Everything the terminal wrote so far, once it holds `needle`."""
    def written() -> str:
        return "".join(f["data"] for f in c.seen if f.get("type") == "terminal_output"
                       and f["terminal_id"] == terminal_id)

    while needle not in written():
        await c.of_type("terminal_output", terminal_id=terminal_id)
    return written()


def test_a_terminal_runs_the_shell_in_the_workspace(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    project = tmp_path / "project"
    project.mkdir()
    monkeypatch.setenv("SHELL", "/bin/sh")
    with FakeProvider([]) as fake:
        point_at(fake, monkeypatch)

        async def scenario() -> None:
            async with admin_client(project) as (srv, c):
                await c.send({"type": "terminal_spawn", "terminal_id": "t1", "cols": 100,
                              "rows": 30})
                spawned = await c.of_type("terminal_spawned", terminal_id="t1")
                assert spawned["pid"] > 0
                await c.send({"type": "terminal_input", "terminal_id": "t1",
                              "data": "pwd; echo sum-$((40+2)); stty size\n"})
                out = await _output_until(c, "t1", "sum-42")
                await _output_until(c, "t1", "30 100")
                assert str(project) in out
                await c.send({"type": "terminal_resize", "terminal_id": "t1", "cols": 70,
                              "rows": 20})
                await c.send({"type": "terminal_input", "terminal_id": "t1",
                              "data": "stty size; exit 3\n"})
                await _output_until(c, "t1", "20 70")
                exited = await c.of_type("terminal_exited", terminal_id="t1")
                assert exited["exitCode"] == 3

                await c.send({"type": "terminal_spawn", "terminal_id": "t2",
                              "cwd": str(tmp_path)})
                refused = await c.of_type("terminal_exited", terminal_id="t2")
                assert refused["exitCode"] == -1 and "outside" in refused["error"]
                await c.send({"type": "terminal_input", "terminal_id": "nope", "data": "x"})
                assert "no terminal" in (await c.of_type("error"))["message"]

                await c.send({"type": "terminal_spawn", "terminal_id": "t3"})
                pid = (await c.of_type("terminal_spawned", terminal_id="t3"))["pid"]
                await c.send({"type": "terminal_kill", "terminal_id": "t3"})
                assert (await c.of_type("terminal_exited", terminal_id="t3"))["exitCode"] != 0

                async with srv.connect(additional_headers=token()) as ws2:
                    other = Client(ws2)
                    await other.send({"type": "terminal_spawn", "terminal_id": "t4"})
                    pid = (await other.of_type("terminal_spawned", terminal_id="t4"))["pid"]
                    await other.send({"type": "terminal_input", "terminal_id": "t4",
                                      "data": "sleep 600\n"})
                deadline = time.monotonic() + 10
                while _alive(pid) and time.monotonic() < deadline:  # reaped with its client
                    await asyncio.sleep(0.05)
                assert not _alive(pid)

                async with srv.connect(additional_headers=token(agents=["agent-x"])) as ws3:
                    scoped = Client(ws3)
                    await scoped.send({"type": "terminal_spawn", "terminal_id": "s1"})
                    no = await scoped.of_type("terminal_exited", terminal_id="s1")
                    assert no["exitCode"] == -1 and "scoped" in no["error"]
                    await scoped.send({"type": "terminal_input", "terminal_id": "t1", "data": "x"})
                    assert "scoped" in (await scoped.of_type("error"))["message"]

        asyncio.run(scenario())
