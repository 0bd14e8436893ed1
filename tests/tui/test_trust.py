"""The interactive trust prompt: an untrusted folder whose settings ask for more is offered trust."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.tui.support import MODEL, SIZE, point_at, run, screen_text, settle, submit, wait_for
from tether.cli.flags import parse_run_flags
from tether.runtime.policy.trust import TrustStore
from tether.testing.fake_provider import FakeProvider
from tether.tui.app import TetherApp


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    d = tmp_path / "project"
    (d / ".tether").mkdir(parents=True)
    (d / ".tether" / "settings.json").write_text(
        json.dumps({"permissions": {"allow": ["Bash(touch made)"]}})
    )
    monkeypatch.chdir(d)
    return d


def bash(command: str) -> dict:
    return {"name": "Bash", "arguments": {"command": command, "description": "t"}}


@pytest.mark.parametrize("answer", ["trust", "skip"])
def test_untrusted_project_settings_prompt_for_trust(
    workdir: Path, tether_home: Path, monkeypatch: pytest.MonkeyPatch, answer: str
) -> None:
    with FakeProvider([{"tool_calls": [bash("touch made")]}, {"text": "ok"}]) as fake:
        point_at(fake.url, monkeypatch)

        async def scenario() -> None:
            app = TetherApp(flags=parse_run_flags(["--model", MODEL], stdin_is_tty=True))
            async with app.run_test(size=SIZE) as pilot:
                await wait_for(pilot, lambda: "Trust " in screen_text(app), what="the trust prompt")
                assert "permissions.allow" in screen_text(app)
                await pilot.press("enter" if answer == "trust" else "down", *([] if answer == "trust" else ["enter"]))
                await wait_for(pilot, lambda: ("Trusted " if answer == "trust" else "not trusted")
                               in app.transcript.plain_text(), what="the trust answer")
                await submit(pilot, "go", typed=False)
                if answer == "skip":  # the allow rule is off: the call is asked; deny it
                    await wait_for(pilot, lambda: "touch made" in screen_text(app), what="approval")
                    await pilot.press("n")
                    await pilot.press(*"no", "enter")
                await settle(pilot, app)
        run(scenario())
    state = TrustStore(tether_home).state(workdir)
    assert state == ("trusted" if answer == "trust" else "untrusted")
    assert (workdir / "made").exists() == (answer == "trust")
