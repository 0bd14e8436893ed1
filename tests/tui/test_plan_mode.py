"""Plan mode in the interactive app: edits denied, ExitPlanMode's dialog shows the plan and its
approval switches the session back to the mode it came from."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.tui.support import SIZE, make_app, point_at, run, screen_text, settle, submit, wait_for
from tether.testing.fake_provider import FakeProvider
from tether.tui.approvals import ApprovalScreen

PLAN = "1. add hello.txt saying hello"


def test_plan_approved_in_the_dialog_leaves_plan_mode(workdir: Path, tether_home: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    script = [{"tool_calls": [{"name": "Write", "arguments": {"file_path": "early.txt", "content": "x"}}]},
              {"tool_calls": [{"name": "ExitPlanMode", "arguments": {"plan": PLAN}}]},
              {"text": "plan approved, on it"}]
    with FakeProvider(script) as fake:
        point_at(fake.url, monkeypatch)

        async def scenario() -> None:
            app = make_app("--permission-mode", "plan", "--toolset", "default")
            async with app.run_test(size=SIZE) as pilot:
                assert app.prepared.flags.permission_mode == "plan"
                await submit(pilot, "plan a greeting", typed=False)
                await wait_for(pilot, lambda: isinstance(app.screen, ApprovalScreen), what="the plan dialog")
                shot = screen_text(app)
                assert "ExitPlanMode needs your approval" in shot and "add hello.txt" in shot
                await pilot.press("y")
                await settle(pilot, app)
                assert app.prepared.flags.permission_mode == "standard"
                assert "plan approved, on it" in app.transcript.plain_text()
        run(scenario())
        denied = [m for m in fake.requests[1]["body"]["messages"] if m["role"] == "user"][-1]
        assert "plan mode" in str(denied)
    assert not (workdir / "early.txt").exists()
