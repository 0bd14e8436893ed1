"""The interactive app end to end in-process: prompts, streaming, approvals, interrupts."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from tests.tui.support import (
    SIZE,
    assert_every_call_answered,
    bash,
    disk_entries,
    make_app,
    point_at,
    run,
    screen_text,
    settle,
    submit,
    wait_for,
)
from tether.testing.fake_provider import FakeProvider
from tether.tui.approvals import ApprovalRequest, ApprovalScreen, Choice


def test_prompt_and_streamed_answer(workdir: Path, tether_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    script = [{"text": "Hello **world** from the fake model", "chunk_size": 3, "usage": {"input": 40, "output": 9}}]
    with FakeProvider(script) as fake:
        point_at(fake.url, monkeypatch)

        async def scenario() -> None:
            app = make_app()
            async with app.run_test(size=SIZE) as pilot:
                await submit(pilot, "say hello")
                await settle(pilot, app)
                text = app.transcript.plain_text()
                assert "say hello" in text
                assert "Hello **world** from the fake model" in text
                shot = screen_text(app)
                assert "> say hello" in shot
                assert "Hello world from the fake model" in shot  # rendered as Markdown
                assert "anthropic/claude-test" in shot and "mode standard" in shot
                assert "ctx 49 tok" in shot
                assert app.prepared.session.conversation_id in shot
        run(scenario())
        assert len(fake.requests) == 1 and fake.violations == []
    roles = [m["role"] for m in disk_entries(tether_home)]
    assert roles == ["user", "assistant"]


def _bash_script(command: str, answer: str = "done") -> list[dict]:
    return [{"tool_calls": [bash(command)]}, {"text": answer}]


def test_approval_allow_once_runs_the_command(workdir: Path, tether_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with FakeProvider(_bash_script("echo made-by-tui > out.txt", "I wrote it")) as fake:
        point_at(fake.url, monkeypatch)

        async def scenario() -> None:
            app = make_app()  # standard mode: shell needs a human
            async with app.run_test(size=SIZE) as pilot:
                await submit(pilot, "write the file")
                await wait_for(pilot, lambda: isinstance(app.screen, ApprovalScreen), what="the dialog")
                shot = screen_text(app)
                assert "Bash needs your approval" in shot
                assert "$ echo made-by-tui > out.txt" in shot
                assert "Yes, and allow for this session  (a)" in shot and "Bash(echo:*)" in shot
                assert isinstance(app.screen, ApprovalScreen)
                assert app.screen.request.rules == ("Bash(echo:*)", f"Write(/{workdir}/out.txt)")
                assert not (workdir / "out.txt").exists()
                await pilot.press("y")
                await settle(pilot, app)
                assert not isinstance(app.screen, ApprovalScreen)
                assert "I wrote it" in app.transcript.plain_text()
                assert app.prepared.policy is not None and app.prepared.policy.rules.session_allow == ()
        run(scenario())
        assert fake.violations == []
    assert (workdir / "out.txt").read_text() == "made-by-tui\n"
    assert_every_call_answered(tether_home)


def test_approval_deny_with_reason_reaches_the_model(workdir: Path, tether_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with FakeProvider(_bash_script("touch should-not-exist", "ok, I will not")) as fake:
        point_at(fake.url, monkeypatch)

        async def scenario() -> None:
            app = make_app()
            async with app.run_test(size=SIZE) as pilot:
                await submit(pilot, "make a file")
                await wait_for(pilot, lambda: isinstance(app.screen, ApprovalScreen), what="the dialog")
                await pilot.press("n")
                await pilot.pause(0.1)
                assert isinstance(app.screen, ApprovalScreen)  # now asking why
                await submit(pilot, "not in this repo")
                await settle(pilot, app)
                text = app.transcript.plain_text()
                assert "not in this repo" in text and "ok, I will not" in text
                assert "Denied" in screen_text(app)
        run(scenario())
        second = json.dumps(fake.requests[1]["body"])
    assert not (workdir / "should-not-exist").exists()
    assert "The user denied this tool call. The user said: not in this repo" in second
    assert_every_call_answered(tether_home)


def test_allow_always_adds_the_session_rule(workdir: Path, tether_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    script: list[dict[str, Any]] = [
        {"tool_calls": [bash("echo one >> log.txt")]},
        {"tool_calls": [bash("echo two >> log.txt")]},  # covered by the new rule: no dialog
        {"text": "logged twice"},
    ]
    with FakeProvider(script) as fake:
        point_at(fake.url, monkeypatch)

        async def scenario() -> None:
            app = make_app()
            dialogs: list[ApprovalRequest] = []
            show = app.approver.show

            def counting(request: ApprovalRequest) -> asyncio.Future[Choice]:
                dialogs.append(request)
                return show(request)

            app.approver.show = counting
            async with app.run_test(size=SIZE) as pilot:
                await submit(pilot, "log twice")
                await wait_for(pilot, lambda: isinstance(app.screen, ApprovalScreen), what="the dialog")
                await pilot.press("a")
                await settle(pilot, app)
                assert len(dialogs) == 1
                assert app.prepared.policy is not None
                rules = ["Bash(echo:*)", f"Write(/{workdir}/log.txt)"]
                assert [str(r) for r in app.prepared.policy.rules.session_allow] == rules
                assert f"Allowed for this session: {', '.join(rules)}" in app.transcript.plain_text()
                assert "logged twice" in app.transcript.plain_text()
        run(scenario())
        assert len(fake.requests) == 3
    assert (workdir / "log.txt").read_text() == "one\ntwo\n"


def test_write_approval_shows_a_unified_diff(workdir: Path, tether_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (workdir / "notes.txt").write_text("alpha\nbeta\ngamma\n")
    edit = {"name": "Edit", "arguments": {"file_path": "notes.txt", "old_string": "beta", "new_string": "BETA"}}
    with FakeProvider([{"tool_calls": [edit]}, {"text": "edited"}]) as fake:
        point_at(fake.url, monkeypatch)

        async def scenario() -> None:
            app = make_app()
            async with app.run_test(size=SIZE) as pilot:
                await submit(pilot, "shout beta")
                await wait_for(pilot, lambda: isinstance(app.screen, ApprovalScreen), what="the dialog")
                shot = screen_text(app)
                assert "Edit needs your approval" in shot
                assert "@@ -1,3 +1,3 @@" in shot
                assert "-beta" in shot and "+BETA" in shot and " alpha" in shot
                assert "Yes, and allow for this session  (a)" in shot and "    Edit" in shot
                await pilot.press("down", "enter")  # arrows + enter: the second option, allow always
                await settle(pilot, app)
        run(scenario())
        assert fake.violations == []
    assert (workdir / "notes.txt").read_text() == "alpha\nBETA\ngamma\n"
