"""The prompt box: enter sends, ctrl+j adds a line, up/down walk the history, pastes stay whole."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.tui.support import SIZE, make_app, point_at, run, settle, submit
from tether.testing.fake_provider import FakeProvider


def test_multiline_history_and_paste(workdir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from textual import events

    with FakeProvider([{"text": "one"}, {"text": "two"}]) as fake:
        point_at(fake.url, monkeypatch)

        async def scenario() -> None:
            app = make_app()
            async with app.run_test(size=SIZE) as pilot:
                await pilot.press("a", "ctrl+j", "b")
                assert app.prompt_box.text == "a\nb"
                await pilot.press("enter")
                await settle(pilot, app)
                box = app.prompt_box
                app.post_message(events.Paste("pasted\nblock"))  # as the driver sends it: never submits
                await pilot.pause(0.1)
                assert box.text == "pasted\nblock" and not app.busy
                box.clear()
                await pilot.press("up")
                assert box.text == "a\nb"  # the previous prompt
                await pilot.press("down")  # onto its second line
                assert box.text == "a\nb" and box.cursor_location[0] == 1
                await pilot.press("down")
                assert box.text == ""  # back to the draft
                await submit(pilot, "second")
                await settle(pilot, app)
                await pilot.press("up")
                assert box.text == "second"
                await pilot.press("up")  # the cursor is on line 0 of "second": older entry
                assert box.text == "a\nb"
        run(scenario())
        first = json.dumps(fake.requests[0]["body"]["messages"][-1])
    assert "a\\nb" in first
