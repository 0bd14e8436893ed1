"""Esc ends a hung MCP call in the TUI as it ends a shell command (issue 29 item 4): the turn
stops at once, the call is recorded as interrupted in the transcript and its effect checkpoint
settled, the hanging server (tests/mcp/servers/hanging.py) keeps nothing waiting, and the next
prompt runs."""

from __future__ import annotations

import json
import sqlite3
import sys
import time
from pathlib import Path

import pytest

from tests.tui.support import (
    SIZE,
    assert_every_call_answered,
    disk_entries,
    make_app,
    point_at,
    run,
    settle,
    submit,
    wait_for,
)
from tether.testing.fake_provider import FakeProvider

REPO = Path(__file__).resolve().parents[2]


def test_escape_ends_a_hung_mcp_call_and_records_it(
    workdir: Path, tether_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    mark = tmp_path / "hang.pid"
    hang = {"command": sys.executable, "args": ["-m", "tests.mcp.servers.hanging"],
            "cwd": str(REPO), "env": {"HANGING_MARK": str(mark)}}
    tether_home.mkdir(parents=True, exist_ok=True)
    (tether_home / "settings.json").write_text(json.dumps({"mcpServers": {"hang": hang}}))
    script = [{"tool_calls": [{"name": "mcp__hang__hang", "arguments": {}}]},
              {"text": "after the interrupt"}]
    with FakeProvider(script) as fake:
        point_at(fake.url, monkeypatch)

        async def scenario() -> None:
            app = make_app("--yolo")
            async with app.run_test(size=SIZE) as pilot:
                await submit(pilot, "call the hanging tool")
                await wait_for(pilot, lambda: mark.exists() and bool(mark.read_text().strip()),
                               timeout=60, what="the call to reach the hanging server")
                started = time.monotonic()
                await pilot.press("escape")
                await settle(pilot, app)
                assert time.monotonic() - started < 10  # a hang guard; the bench measures
                await submit(pilot, "go on")
                await settle(pilot, app)
                assert "after the interrupt" in app.transcript.plain_text()
        run(scenario())
        assert len(fake.requests) == 2  # the interrupted call was not sent; the next prompt was
    results = [m for m in disk_entries(tether_home)
               if m["role"] == "toolResult" and m.get("toolName") == "mcp__hang__hang"]
    assert len(results) == 1 and results[0]["isError"], results
    assert "Interrupted" in json.dumps(results[0]["content"]), results
    with sqlite3.connect(tether_home / "checkpoints.db") as db:
        rows = db.execute("SELECT phase FROM effect_checkpoints WHERE tool_name = ?",
                          ("mcp__hang__hang",)).fetchall()
    assert rows == [("after",)], rows
    assert_every_call_answered(tether_home)
