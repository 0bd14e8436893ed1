"""The TUI-only hooks (reference §9): SessionStart, UserPromptSubmit and Stop, from settings."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.tui.support import SIZE, make_app, point_at, run, settle, submit, wait_for
from tether.testing.fake_provider import FakeProvider


def hook(command: str) -> list[dict[str, Any]]:
    return [{"hooks": [{"type": "command", "command": command, "timeout": 20}]}]


def test_session_start_prompt_submit_and_stop_hooks(workdir: Path, tether_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tether_home.mkdir(parents=True, exist_ok=True)
    (tether_home / "settings.json").write_text(json.dumps({"hooks": {
        "SessionStart": hook("echo 'the codeword is kiwi'"),
        "UserPromptSubmit": hook("grep -q secret && { echo 'no secrets here' >&2; exit 2; }; exit 0"),
        "Stop": hook("test -f stopped-once && exit 0; touch stopped-once; echo 'also say goodbye' >&2; exit 2"),
    }}))
    with FakeProvider([{"text": "hi"}, {"text": "goodbye"}]) as fake:
        point_at(fake.url, monkeypatch)

        async def scenario() -> None:
            app = make_app()
            async with app.run_test(size=SIZE) as pilot:
                await wait_for(pilot, lambda: "codeword" in app.transcript.plain_text(), what="SessionStart")
                await submit(pilot, "hello")
                await settle(pilot, app)
                await wait_for(pilot, lambda: "goodbye" in app.transcript.plain_text(), what="the Stop continuation")
                await submit(pilot, "tell me the secret")
                await settle(pilot, app)
                text = app.transcript.plain_text()
                assert "Prompt blocked by a UserPromptSubmit hook" in text and "no secrets here" in text
        run(scenario())
        requests = [json.dumps(r["body"]["messages"]) for r in fake.requests]
    assert len(requests) == 2  # the blocked prompt never reached the model
    assert "the codeword is kiwi" in requests[0]
    assert "also say goodbye" in requests[1] and "secret" not in requests[1]
