"""The TUI's hooks read Claude Code's JSON output: additionalContext is context (the JSON is not),
`decision: "block"` and `continue: false` keep a prompt from the model (issue 18 item 4)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.tui.support import SIZE, make_app, point_at, run, settle, submit, wait_for
from tether.testing.fake_provider import FakeProvider


def hook(doc: dict[str, Any]) -> list[dict[str, Any]]:
    return [{"hooks": [{"type": "command", "command": f"cat > /dev/null; echo '{json.dumps(doc)}'"}]}]


@pytest.mark.parametrize(
    ("output", "reason"),
    [
        ({"decision": "block", "reason": "prompts about prod are refused"}, "prompts about prod are refused"),
        ({"continue": False, "stopReason": "quiet hours"}, "quiet hours"),
    ],
)
def test_json_from_user_prompt_submit_blocks_the_prompt(
    output: dict[str, Any], reason: str, workdir: Path, tether_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tether_home.mkdir(parents=True, exist_ok=True)
    (tether_home / "settings.json").write_text(json.dumps({"hooks": {"UserPromptSubmit": hook(output)}}))
    with FakeProvider([{"text": "never"}]) as fake:
        point_at(fake.url, monkeypatch)

        async def scenario() -> None:
            app = make_app()
            async with app.run_test(size=SIZE) as pilot:
                await wait_for(pilot, lambda: app.ready, what="the session")
                await submit(pilot, "deploy to prod")
                await settle(pilot, app)
                await wait_for(pilot, lambda: reason in app.transcript.plain_text(), what="the refusal")
        run(scenario())
        assert fake.requests == []


def test_additional_context_reaches_the_model_and_the_json_does_not(
    workdir: Path, tether_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tether_home.mkdir(parents=True, exist_ok=True)
    doc = {"hookSpecificOutput": {"hookEventName": "UserPromptSubmit", "additionalContext": "sprint ends Friday"}}
    (tether_home / "settings.json").write_text(json.dumps({"hooks": {"UserPromptSubmit": hook(doc)}}))
    with FakeProvider([{"text": "ok"}]) as fake:
        point_at(fake.url, monkeypatch)

        async def scenario() -> None:
            app = make_app()
            async with app.run_test(size=SIZE) as pilot:
                await wait_for(pilot, lambda: app.ready, what="the session")
                await submit(pilot, "plan the week")
                await settle(pilot, app)
                await wait_for(pilot, lambda: "ok" in app.transcript.plain_text(), what="the answer")
        run(scenario())
        sent = json.dumps(fake.requests[0]["body"]["messages"])
    assert "sprint ends Friday" in sent and "hookSpecificOutput" not in sent
