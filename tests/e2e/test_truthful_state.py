"""End to end: what the headless run reports is what it did (issue 18 item 7).

The init event names the run's real memory, skill sources, reflection trigger and permission
mode; a turn that ends on tool output with no text has that output as its result; a reader that
goes away ends the run quietly."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.support import TETHER, run_tether, tether_env
from tether.testing.fake_provider import FakeProvider

MODEL = "anthropic/claude-test"


def init_of(workdir: Path, *flags: str, settings: dict[str, Any] | None = None, home: Path) -> dict[str, Any]:
    if settings is not None:
        home.mkdir(parents=True, exist_ok=True)
        (home / "settings.json").write_text(json.dumps(settings))
    with FakeProvider([{"text": "ok"}]) as fake:
        run = run_tether(["-p", "hi", "--model", MODEL, "--output-format", "stream-json", *flags],
                         env=tether_env(fake.url, MODEL), cwd=workdir)
    assert run.code == 0, run.stderr
    return run.events[0]


def test_init_reports_the_runs_real_state(workdir: Path, tether_home: Path) -> None:
    init = init_of(workdir, home=tether_home)
    assert init["memfs_enabled"] is True
    assert init["skill_sources"] == ["bundled", "global", "agent", "project"]
    assert init["reflection_trigger"] == "compaction-event" and init["permission_mode"] == "standard"


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        (("--no-skills",), {"skill_sources": []}),
        (("--skill-sources", "project,global"), {"skill_sources": ["global", "project"]}),
        (("--no-bundled-skills",), {"skill_sources": ["global", "agent", "project"]}),
        (("--reflection-trigger", "step-count", "--reflection-step-count", "3"),
         {"reflection_trigger": "step-count", "reflection_step_count": 3}),
        (("--reflection-trigger", "off"), {"reflection_trigger": "off"}),
        (("--permission-mode", "acceptEdits"), {"permission_mode": "acceptEdits"}),
    ],
)
def test_init_follows_the_flags(flags: tuple[str, ...], expected: dict[str, Any], workdir: Path,
                                tether_home: Path) -> None:
    init = init_of(workdir, *flags, home=tether_home)
    assert {k: init[k] for k in expected} == expected


def test_init_reports_the_mode_the_settings_chose(workdir: Path, tether_home: Path) -> None:
    init = init_of(workdir, settings={"permissions": {"defaultMode": "acceptEdits"}}, home=tether_home)
    assert init["permission_mode"] == "acceptEdits"


@pytest.mark.parametrize("fmt", ["text", "json", "stream-json"])
def test_a_turn_ending_on_tool_output_has_it_as_result(fmt: str, workdir: Path) -> None:
    call = {"name": "Bash", "arguments": {"command": "echo the-tool-said-this", "description": "t"}}
    with FakeProvider([{"tool_calls": [call]}, {"text": ""}]) as fake:
        run = run_tether(["-p", "go", "--model", MODEL, "--yolo", "--output-format", fmt],
                         env=tether_env(fake.url, MODEL), cwd=workdir)
    assert run.code == 0, run.stderr
    if fmt == "text":
        assert run.stdout.strip() == "the-tool-said-this"
    elif fmt == "json":
        assert json.loads(run.stdout)["result"] == "the-tool-said-this"
    else:
        result = [e for e in run.events if e.get("type") == "result"][-1]
        assert result["result"] == "the-tool-said-this"


def test_a_closed_stdout_ends_quietly(workdir: Path) -> None:
    with FakeProvider([{"text": "a reply nobody reads " * 200}]) as fake:
        proc = subprocess.Popen(
            [TETHER, "-p", "hi", "--model", MODEL, "--output-format", "stream-json"],
            stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            env=tether_env(fake.url, MODEL), cwd=workdir,
        )
        assert proc.stdout is not None and proc.stderr is not None
        proc.stdout.close()  # the reader goes away before the first line
        err = proc.stderr.read().decode()
        proc.stderr.close()
        code = proc.wait(timeout=60)
    assert code == 1 and "Traceback" not in err
    assert "could not write" in err
