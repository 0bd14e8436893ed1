"""What the transcript draws: retries, reasoning (collapsed), folded tool output, Markdown."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.tui.support import bash, make_app, point_at, run, screen_text, settle, submit
from tether.testing.fake_provider import FakeProvider
from tether.tui.widgets import FOLD_LINES, ReasoningBlock, ToolBlock


def test_retry_reasoning_folded_output_and_markdown(workdir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    script: list[dict[str, Any]] = [
        {"fault": {"status": 429, "retry_after_ms": 20}},
        {"thinking": "Counting is a job for seq.\nSecond thought.", "tool_calls": [bash("seq 1 30")]},
        {"text": "## Counted\n\n- thirty lines\n- all there"},
    ]
    with FakeProvider(script) as fake:
        point_at(fake.url, monkeypatch)

        async def scenario() -> None:
            app = make_app("--yolo")
            async with app.run_test(size=(110, 60)) as pilot:
                await submit(pilot, "count", typed=False)
                await settle(pilot, app)
                shot = screen_text(app)
                assert "retrying (attempt 1/" in shot
                reasoning = app.query_one(ReasoningBlock)
                assert reasoning.collapsed and "Second thought." in reasoning.text
                assert "Thinking  Counting is a job for seq." in shot and "Second thought." not in shot
                tool = app.query_one(ToolBlock)
                assert tool.result is not None and tool.result.output.splitlines()[-1] == "30"
                assert "● Bash  seq 1 30" in shot
                assert f"{30 - FOLD_LINES} more lines" in shot
                assert "    8" in shot and "    9\n" not in shot  # lines past the fold are hidden
                assert "Counted" in shot and "## Counted" not in shot  # Markdown, rendered
                assert "• thirty lines" in shot or "thirty lines" in shot
        run(scenario())
        assert len(fake.requests) == 3 and fake.violations == []


def test_non_interactive_paths_do_not_import_textual() -> None:
    code = (
        "import sys\n"
        "from tether.cli.main import main\n"
        "main(['--version'])\n"
        "main(['-p', 'x', '--tools', 'nope'])\n"  # a headless usage error, after flag parsing
        "assert not any(m == 'textual' or m.startswith('textual.') for m in sys.modules), 'textual imported'\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
