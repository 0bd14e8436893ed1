"""Esc interrupts a running tool, prompts typed meanwhile queue, Ctrl-C twice exits cleanly."""

from __future__ import annotations

import json
import time
import uuid
from pathlib import Path
from typing import Any

import pytest

from tests.tui.support import (
    SIZE,
    assert_every_call_answered,
    bash,
    make_app,
    point_at,
    processes_with,
    run,
    screen_text,
    settle,
    submit,
    wait_for,
)
from tether.testing.fake_provider import FakeProvider
from tether.tui.widgets import ToolBlock


def slow_command(marker: str) -> str:
    return f"python3 -c 'import time; time.sleep(30)' {marker}"


def test_escape_interrupts_a_long_command_and_requeues_typed_prompts(
    workdir: Path, tether_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    marker = f"tether-tui-{uuid.uuid4().hex}"
    with FakeProvider([{"tool_calls": [bash(slow_command(marker))]}, {"text": "never sent"}]) as fake:
        point_at(fake.url, monkeypatch)

        async def scenario() -> None:
            app = make_app("--yolo")
            async with app.run_test(size=SIZE) as pilot:
                await submit(pilot, "run the slow thing")
                await wait_for(pilot, lambda: bool(processes_with(marker)), what="the command to start")
                assert app.query(ToolBlock)
                await submit(pilot, "then this")  # typed while the turn runs: queued
                assert app.queue == ["then this"]
                assert "queued: then this" in screen_text(app)
                started = time.monotonic()
                await pilot.press("escape")
                await settle(pilot, app)
                assert time.monotonic() - started < 10
                assert processes_with(marker) == []  # the process group was killed
                shot = screen_text(app)
                assert "Interrupted" in shot
                assert app.queue == [] and app.prompt_box.text == "then this"  # back, not sent
        run(scenario())
        assert len(fake.requests) == 1
    assert_every_call_answered(tether_home)


def test_prompts_typed_during_a_turn_are_sent_after_it(
    workdir: Path, tether_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    script: list[dict[str, Any]] = [{"text": "first answer", "delay_ms": 800}, {"text": "second answer"}]
    with FakeProvider(script) as fake:
        point_at(fake.url, monkeypatch)

        async def scenario() -> None:
            app = make_app()
            async with app.run_test(size=SIZE) as pilot:
                await submit(pilot, "one")
                await wait_for(pilot, lambda: app.busy, what="the turn to start")
                await submit(pilot, "two")
                assert app.queue == ["two"]
                await settle(pilot, app)
                text = app.transcript.plain_text()
                assert text.index("first answer") < text.index("two") < text.index("second answer")
        run(scenario())
        assert len(fake.requests) == 2
        assert "two" in json.dumps(fake.requests[1]["body"]["messages"][-1])


def test_ctrl_c_twice_exits_cleanly_during_a_turn(
    workdir: Path, tether_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    marker = f"tether-tui-{uuid.uuid4().hex}"
    with FakeProvider([{"tool_calls": [bash(slow_command(marker))]}, {"text": "never sent"}]) as fake:
        point_at(fake.url, monkeypatch)

        async def scenario() -> int | None:
            app = make_app("--yolo")
            async with app.run_test(size=SIZE) as pilot:
                await submit(pilot, "run the slow thing")
                await wait_for(pilot, lambda: bool(processes_with(marker)), what="the command to start")
                await pilot.press("ctrl+c")
                assert "press Ctrl-C again to exit" in screen_text(app)
                await pilot.press("ctrl+c")
                await wait_for(pilot, lambda: not app.is_running, what="the app to exit")
            return app.return_value

        assert run(scenario()) == 0
        assert len(fake.requests) == 1
    assert processes_with(marker) == []
    assert_every_call_answered(tether_home)


def test_escape_during_an_approval_denies_and_interrupts(
    workdir: Path, tether_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from tether.tui.approvals import ApprovalScreen

    with FakeProvider([{"tool_calls": [bash("touch nope")]}, {"text": "never sent"}]) as fake:
        point_at(fake.url, monkeypatch)

        async def scenario() -> None:
            app = make_app()
            async with app.run_test(size=SIZE) as pilot:
                await submit(pilot, "touch it")
                await wait_for(pilot, lambda: isinstance(app.screen, ApprovalScreen), what="the dialog")
                await pilot.press("escape")
                await settle(pilot, app)
                assert not isinstance(app.screen, ApprovalScreen)
                assert "Interrupted" in screen_text(app)
        run(scenario())
        assert len(fake.requests) == 1
    assert not (workdir / "nope").exists()
    assert_every_call_answered(tether_home)
