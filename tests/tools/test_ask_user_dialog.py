"""AskUserQuestion in the TUI: the dialog shows the questions, and the picked and typed answers
reach the model through the tool's result."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.tui.support import SIZE, make_app, point_at, run, screen_text, settle, submit, wait_for
from tether.testing.fake_provider import FakeProvider
from tether.tui.approvals import ApprovalScreen

QUESTIONS = [
    {"question": "Which database?", "header": "DB", "multiSelect": False,
     "options": [{"label": "sqlite", "description": "a file"}, {"label": "postgres"}]},
    {"question": "Which checks?", "header": "CI", "multiSelect": True,
     "options": [{"label": "lint"}, {"label": "types"}, {"label": "tests"}]},
    {"question": "Project name?", "header": "Name", "multiSelect": False,
     "options": [{"label": "tether"}]},
]  # fmt: skip


def test_tui_answers_ask_user_question(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    workdir = tmp_path / "project"
    workdir.mkdir()
    monkeypatch.chdir(workdir)  # the app runs in-process, in this folder
    script = [{"tool_calls": [{"name": "AskUserQuestion", "arguments": {"questions": QUESTIONS}}]},
              {"text": "noted"}]  # fmt: skip
    with FakeProvider(script) as fake:
        point_at(fake.url, monkeypatch)

        async def scenario() -> None:
            app = make_app()
            async with app.run_test(size=SIZE) as pilot:
                await submit(pilot, "set it up")
                await wait_for(pilot, lambda: isinstance(app.screen, ApprovalScreen), what="the dialog")
                assert "Which database?" in screen_text(app) and "postgres" in screen_text(app)
                await pilot.press("down", "enter")  # postgres
                await wait_for(pilot, lambda: "Which checks?" in screen_text(app), what="question 2")
                await pilot.press("enter", "down", "down", "enter")  # lint, tests
                await pilot.pause()
                assert "[x] lint" in screen_text(app) and "[x] tests" in screen_text(app)
                await pilot.press("down", "down", "enter")  # Done (after "Other")
                await wait_for(pilot, lambda: "Project name?" in screen_text(app), what="question 3")
                await pilot.press("down", "enter")  # Other: type an answer
                await pilot.press(*"ripcord", "enter")
                await settle(pilot, app)
                assert "noted" in app.transcript.plain_text()
        run(scenario())
        assert fake.violations == []
        second = json.dumps(fake.requests[1]["body"])
    assert '\\"Which database?\\"=\\"postgres\\"' in second
    assert '\\"Which checks?\\"=\\"lint, tests\\"' in second
    assert '\\"Project name?\\"=\\"ripcord\\"' in second
