"""kill -9 of the real `tether server` in the middle of a tool call (security case f1): after a
restart the call is reported as an unknown outcome, to the client and to the model, and the
tool is never run again."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import sqlite3
import time
from pathlib import Path

from websockets.asyncio.client import connect

from tests.e2e.support import transcript_lines
from tests.server.support import Client, ServerProcess, bash, server_env
from tether.runtime.turns.checkpoints import UNKNOWN_OUTCOME
from tether.testing.fake_provider import FakeProvider


def test_kill_9_mid_tool_reports_unknown_and_never_reruns(tmp_path: Path) -> None:
    project = tmp_path / "project"
    project.mkdir()
    home = tmp_path / "tether-home"
    ledger = project / "ledger.txt"
    script = [
        {"tool_calls": [bash("echo ran >> ledger.txt; echo $$ > group.pid; sleep 30")]},
        {"text": "I will not run it again"},
    ]
    with FakeProvider(script) as fake:
        env = server_env(fake.url, home, tmp_path)
        first = ServerProcess(env, project)

        async def start_turn() -> dict[str, str]:
            async with connect(first.url) as ws:
                c = Client(ws)
                runtime = (await c.start(project, mode="bypassPermissions"))["runtime"]
                await c.say(runtime, "append to the ledger")
                await c.wait_for(
                    lambda f: (
                        f.get("type") == "stream_delta"
                        and f["delta"].get("message_type") == "client_tool_start"
                    )
                )
                deadline = time.monotonic() + 20
                while not (project / "group.pid").exists() and time.monotonic() < deadline:
                    await asyncio.sleep(0.05)
                return runtime

        try:
            runtime = asyncio.run(start_turn())
            first.kill_9()  # mid-tool: `before` is on disk, `after` is not
        finally:
            first.stop()
            _kill_group(project / "group.pid")
        assert ledger.read_text() == "ran\n"
        db = sqlite3.connect(home / "checkpoints.db")
        assert [r[0] for r in db.execute("SELECT phase FROM effect_checkpoints")] == ["before"]
        db.close()

        second = ServerProcess(env, project)
        try:

            async def recover() -> tuple[dict, str]:
                async with connect(second.url) as ws:
                    c = Client(ws)
                    started = await c.start(project, **runtime)
                    await c.say(runtime, "what happened?", request_id="after-crash")
                    finished = await c.of_type("turn_finished", request_id="after-crash")
                    return started, finished["stop_reason"]

            started, stop_reason = asyncio.run(recover())
        finally:
            assert second.stop() == 0
        assert stop_reason == "end_turn"
        effects = started["recovered_effects"]
        assert [(e["tool_name"], e["outcome"], e["output"]) for e in effects] == [
            ("Bash", "unknown", UNKNOWN_OUTCOME)
        ]
        # the model was told, in the one result of that call, and nothing ran again
        assert len(fake.requests) == 2 and fake.violations == []
        assert UNKNOWN_OUTCOME in json.dumps(fake.requests[1]["body"])
        assert ledger.read_text() == "ran\n"
    results = [
        line
        for line in transcript_lines(home)
        if line.get("message", {}).get("role") == "toolResult"
    ]
    assert len(results) == 1 and UNKNOWN_OUTCOME in json.dumps(results[0])
    db = sqlite3.connect(home / "checkpoints.db")
    assert [r[0] for r in db.execute("SELECT phase FROM effect_checkpoints")] == ["unknown"]
    db.close()


def _kill_group(pid_file: Path) -> None:
    try:
        os.killpg(int(pid_file.read_text()), signal.SIGKILL)
    except (FileNotFoundError, ValueError, ProcessLookupError, PermissionError):
        pass
