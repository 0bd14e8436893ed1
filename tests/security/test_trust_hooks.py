"""g4 / issue 14, trust binds to what runs: a hostile commit edits the script a trusted project
hook runs, or the mod behind a symlink, or a skill; the real `tether` must not run the edited
code until the folder is trusted again, and `tether trust --status` says which file changed."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.e2e.support import run_tether
from tests.security.support import MARKER, World, attempt, tool

GOOD = "TRUSTED_HOOK_RAN"


def _hook_settings(command: str) -> dict:
    return {"hooks": {"PreToolUse": [{"matcher": "*", "hooks": [
        {"type": "command", "command": command}]}]}}


def _trust(world: World, *args: str) -> str:
    run = run_tether(["trust", *args], env=world.env("http://127.0.0.1:9"), cwd=world.project)
    assert run.code == 0, run.stderr
    return run.stdout


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def _script_in_project(world: World) -> tuple[str, Path]:
    script = world.project / "scripts" / "guard.sh"
    _write(script, f"#!/bin/sh\ntouch {world.project}/{GOOD}\nexit 0\n")
    return "sh ./scripts/guard.sh", script


def _script_behind_link(world: World) -> tuple[str, Path]:
    real = world.outside / "real-guard.sh"
    _write(real, f"#!/bin/sh\ntouch {world.project}/{GOOD}\nexit 0\n")
    (world.project / "guard.sh").symlink_to(real)
    return "sh ./guard.sh", real


def _script_named_by_variable(world: World) -> tuple[str, Path]:
    script = world.project / "tools" / "guard.sh"
    _write(script, f"#!/bin/sh\ntouch {world.project}/{GOOD}\nexit 0\n")
    return 'sh "$TETHER_WORKING_DIR/tools/guard.sh"', script


LAYOUTS: dict[str, Callable[[World], tuple[str, Path]]] = {
    "script in the project": _script_in_project,
    "script behind a symlink": _script_behind_link,
    "script named through $TETHER_WORKING_DIR": _script_named_by_variable,
}


@pytest.mark.parametrize("layout", LAYOUTS.values(), ids=LAYOUTS.keys())
def test_an_edited_hook_script_does_not_run(world: World, layout: Callable) -> None:
    command, script = layout(world)
    (world.project / ".tether").mkdir(exist_ok=True)
    (world.project / ".tether" / "settings.json").write_text(json.dumps(_hook_settings(command)))
    _trust(world)
    # The trusted hook runs (the control: this test can tell a hook that ran).
    first = attempt(world, tool("Read", file_path="README.md"))
    assert (world.project / GOOD).exists(), first.explain()
    (world.project / GOOD).unlink()
    # A hostile change to the script, nothing else.
    script.write_text(f"#!/bin/sh\ntouch {world.outside}/{MARKER}\nexit 0\n")
    status = _trust(world, "--status")
    assert status.startswith("changed:"), status
    assert "hook:" in status and ": changed" in status, status
    second = attempt(world, tool("Read", file_path="README.md"))
    assert not world.effects(), second.explain()
    assert not (world.project / GOOD).exists()
    assert "not trusted" in second.run.stderr or "changed" in second.run.stderr, second.run.stderr


def test_an_edited_mod_behind_a_symlink_does_not_load(world: World) -> None:
    mod = world.outside / "evil"
    _write(mod / "__init__.py", "def activate(api):\n    pass\n")
    (world.project / ".tether" / "mods").mkdir(parents=True)
    (world.project / ".tether" / "mods" / "evil").symlink_to(mod, target_is_directory=True)
    _trust(world)
    # Edit the module behind the link: it would write the marker when imported.
    _write(mod / "__init__.py",
           f"open({str(world.outside / MARKER)!r}, 'w').write('x')\n"
           "def activate(api):\n    pass\n")
    status = _trust(world, "--status")
    assert ".tether/mods/evil/__init__.py: changed" in status, status
    attempt(world, tool("Read", file_path="README.md"))
    assert not world.effects()
