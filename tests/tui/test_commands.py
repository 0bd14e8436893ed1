"""Slash commands and reopening conversations: /model, /new, /resume, --resume, --conversation."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.tui.support import (
    MODEL,
    SIZE,
    make_app,
    point_at,
    run,
    screen_text,
    settle,
    submit,
    wait_for,
)
from tether.testing.fake_provider import FakeProvider
from tether.tui.commands import PickerScreen, parse_command


def test_parse_command() -> None:
    assert parse_command("/model openai/gpt-5.5") == ("model", "openai/gpt-5.5")
    assert parse_command("  /HELP ") == ("help", "")
    assert parse_command("/etc/hosts is odd") is None  # a path is a prompt
    assert parse_command("hello /model") is None
    assert parse_command("/") is None


def test_model_switches_the_next_turns(workdir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with FakeProvider([{"text": "from the other model"}]) as fake:
        point_at(fake.url, monkeypatch)

        async def scenario() -> None:
            app = make_app()
            async with app.run_test(size=SIZE) as pilot:
                await submit(pilot, "/model")
                await wait_for(pilot, lambda: isinstance(app.screen, PickerScreen), what="the model list")
                assert "anthropic/claude-test  (current)" in screen_text(app)
                await pilot.press("escape")
                await pilot.pause(0.1)
                await submit(pilot, "/model anthropic/claude-other")
                await wait_for(pilot, lambda: app.prepared.session.model == "anthropic/claude-other")
                await submit(pilot, "hi")
                await settle(pilot, app)
                assert "anthropic/claude-other" in screen_text(app)
                await submit(pilot, "/model nonsense")
                await pilot.pause(0.2)
                assert "/model:" in app.transcript.plain_text()  # the handle error, shown
                assert app.prepared.session.model == "anthropic/claude-other"
        run(scenario())
        assert fake.requests[0]["body"]["model"] == "claude-other"


def _first_session(monkeypatch: pytest.MonkeyPatch, fake: FakeProvider) -> str:
    """One TUI session with one exchange; returns its conversation id."""

    async def scenario() -> str:
        app = make_app()
        async with app.run_test(size=SIZE) as pilot:
            await submit(pilot, "first topic")
            await settle(pilot, app)
            conv = app.prepared.session.conversation_id
            await submit(pilot, "/exit")
            await wait_for(pilot, lambda: not app.is_running, what="/exit")
        return conv

    result: str = run(scenario())
    return result


def test_new_then_resume_from_the_list(workdir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with FakeProvider([{"text": "answer one"}, {"text": "answer two"}]) as fake:
        point_at(fake.url, monkeypatch)

        async def scenario() -> None:
            app = make_app()
            async with app.run_test(size=SIZE) as pilot:
                await submit(pilot, "first topic")
                await settle(pilot, app)
                first = app.prepared.session.conversation_id
                await submit(pilot, "/new")
                await wait_for(pilot, lambda: app.prepared.session.conversation_id != first, what="/new")
                assert "answer one" not in app.transcript.plain_text()
                await submit(pilot, "/resume")
                await wait_for(pilot, lambda: isinstance(app.screen, PickerScreen), what="the list")
                shot = screen_text(app)
                assert first in shot and "first topic" in shot and "(current)" in shot
                await pilot.press("enter")  # the most recent conversation with messages
                await wait_for(pilot, lambda: app.prepared.session.conversation_id == first, what="the switch")
                await pilot.pause(0.3)
                text = app.transcript.plain_text()
                assert "first topic" in text and "answer one" in text
                await submit(pilot, "follow up")
                await settle(pilot, app)
        run(scenario())
        second = json.dumps(fake.requests[1]["body"]["messages"])
    assert "first topic" in second and "answer one" in second and "follow up" in second


def test_resume_flag_reopens_the_latest_conversation_with_history(
    workdir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with FakeProvider([{"text": "answer one"}]) as fake:
        point_at(fake.url, monkeypatch)
        conv = _first_session(monkeypatch, fake)

    for args in (("--model", MODEL, "--resume"), ("--model", MODEL, "--conversation", conv)):

        async def reopen(args: tuple[str, ...] = args) -> None:
            app = make_app(*args)
            assert app.prepared.session.conversation_id == conv
            async with app.run_test(size=SIZE) as pilot:
                await wait_for(pilot, lambda: "answer one" in app.transcript.plain_text(), what="history")
                await pilot.pause(0.3)
                shot = screen_text(app)
                assert "> first topic" in shot and "answer one" in shot

        run(reopen())


def test_information_commands(workdir: Path, tether_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with FakeProvider([]) as fake:
        point_at(fake.url, monkeypatch)

        async def scenario() -> None:
            app = make_app("--allowedTools", "Bash(git status:*)")
            async with app.run_test(size=SIZE) as pilot:
                await submit(pilot, "/help")
                await pilot.pause(0.2)
                shot = screen_text(app)
                for name in ("/model", "/new", "/resume", "/agents", "/compact", "/memory",
                             "/permissions", "/hooks", "/mods", "/skills", "/clear", "/exit"):
                    assert name in shot, name
                for line in ("/agents", "/compact", "/hooks", "/mods", "/skills", "/memory", "/permissions"):
                    await submit(pilot, line, typed=False)
                await pilot.pause(0.3)
                text = app.transcript.plain_text()
                assert app.prepared.session.agent.id in text  # /agents
                assert "/compact: " in text or "Compacted" in text  # an empty conversation
                assert "Memory" in text and ("Skills:" in text or "No skills" in text)
                assert "mods" in text.lower()
                assert "No hooks configured" in text
                assert "allow (--allowedTools): Bash(git status:*)" in text
                assert "Permission mode: standard" in text
                await submit(pilot, "/permissions acceptEdits", typed=False)
                await pilot.pause(0.1)
                assert app.prepared.flags.permission_mode == "acceptEdits"
                await pilot.press("shift+tab")
                assert app.prepared.flags.permission_mode == "plan"
                assert app.prepared.registry.get("ExitPlanMode") is not None  # the way out of plan mode
                await pilot.press("shift+tab")
                assert app.prepared.flags.permission_mode == "strict"
                await submit(pilot, "/bogus")
                await pilot.pause(0.1)
                assert "Unknown command /bogus" in app.transcript.plain_text()
                await submit(pilot, "/clear")
                await pilot.pause(0.2)
                assert "/agents" not in app.transcript.plain_text()
        run(scenario())
        assert fake.requests == []


def test_mcp_command_and_server_prompts(workdir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    repo = Path(__file__).resolve().parents[2]
    config = json.dumps({"mcpServers": {"toy": {
        "command": sys.executable, "args": ["-m", "tests.mcp.servers.toybox"], "cwd": str(repo)}}})
    with FakeProvider([{"text": "reviewed"}]) as fake:
        point_at(fake.url, monkeypatch)

        async def scenario() -> None:
            app = make_app("--mcp-config", config)
            async with app.run_test(size=SIZE) as pilot:
                await wait_for(pilot, lambda: app.ready, what="the session")
                await submit(pilot, "/mcp")
                await wait_for(pilot, lambda: "mcp__toy__echo" in app.transcript.plain_text(),
                               timeout=60, what="the MCP listing")
                text = app.transcript.plain_text()
                assert "toy  connected" in text and "/mcp__toy__review  (prompt)" in text
                await submit(pilot, "/mcp__toy__review topic=the-tests")
                await settle(pilot, app, timeout=60)
        run(scenario())
        assert "Please review the-tests carefully." in json.dumps(fake.requests[0]["body"])


def test_an_mcp_server_that_fails_to_start_is_said_on_screen(workdir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    config = json.dumps({"mcpServers": {"broken": {"command": "/nonexistent/mcp-server-binary"}}})
    with FakeProvider([{"text": "never"}]) as fake:
        point_at(fake.url, monkeypatch)

        async def scenario() -> None:
            app = make_app("--mcp-config", config)
            async with app.run_test(size=SIZE) as pilot:
                await wait_for(pilot, lambda: "MCP server 'broken' failed to start" in app.transcript.plain_text(),
                               timeout=60, what="the failure notice")
        run(scenario())
        assert fake.requests == []
