"""Starting the app the way `tether` does: first frame, then the session resolved in a thread."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.tui.support import (
    MODEL,
    SIZE,
    disk_entries,
    point_at,
    run,
    screen_text,
    settle,
    submit,
    wait_for,
)
from tether.cli.flags import parse_run_flags
from tether.testing.fake_provider import FakeProvider
from tether.tui.app import TetherApp


def test_prompt_typed_while_starting_is_sent_once_ready(workdir: Path, tether_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with FakeProvider([{"text": "hello after start"}]) as fake:
        point_at(fake.url, monkeypatch)

        async def scenario() -> None:
            app = TetherApp(flags=parse_run_flags(["--model", MODEL], stdin_is_tty=True))
            async with app.run_test(size=SIZE) as pilot:
                assert not app.ready  # the first frame comes before the session
                assert "starting…" in screen_text(app)
                await submit(pilot, "early bird")
                await wait_for(pilot, lambda: app.ready, what="the session")
                await settle(pilot, app)
                assert "hello after start" in app.transcript.plain_text()
        run(scenario())
        assert len(fake.requests) == 1
    assert [m["role"] for m in disk_entries(tether_home)] == ["user", "assistant"]


def test_initial_prompt_from_the_command_line(workdir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with FakeProvider([{"text": "answered the argument"}]) as fake:
        point_at(fake.url, monkeypatch)
        flags = parse_run_flags(["--model", MODEL, "what is up"], stdin_is_tty=True)
        assert not flags.headless and flags.prompt == "what is up"

        async def scenario() -> None:
            app = TetherApp(flags=flags, initial_prompt=flags.prompt)
            async with app.run_test(size=SIZE) as pilot:
                await wait_for(pilot, lambda: "answered the argument" in app.transcript.plain_text())
                assert "> what is up" in screen_text(app)
        run(scenario())


def test_startup_error_exits_1_with_the_message(workdir: Path) -> None:
    async def scenario() -> TetherApp:
        app = TetherApp(flags=parse_run_flags([], stdin_is_tty=True))  # no provider configured
        async with app.run_test(size=SIZE) as pilot:
            await wait_for(pilot, lambda: not app.is_running, what="the app to give up")
        return app

    app = run(scenario())
    assert app.return_value == 1
    assert app.startup_error is not None and "No model configured" in app.startup_error


def test_resume_conflicts_are_usage_errors() -> None:
    from tether.errors import UsageError

    for argv in (["--resume", "--new"], ["--resume", "-p", "x"], ["--resume", "--conversation", "local-conv-1"]):
        with pytest.raises(UsageError):
            parse_run_flags(argv, stdin_is_tty=True)
    assert parse_run_flags(["-r"], stdin_is_tty=True).resume
