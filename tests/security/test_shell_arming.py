"""Writes that arm later execution, tried: `.git/` (hooks, config — also nested) and `.tether/`
are not written by Write/Edit or a redirection on a mode's grant (`acceptEdits`, `--yolo`), nor
by `--allowedTools Edit,Write`; a rule naming the directory does admit it."""

from __future__ import annotations

import pytest

from tests.security.support import World, attempt, bash, tool

TARGETS = [".git/hooks/pre-commit", ".git/config", "sub/.git/config", ".tether/settings.json",
           "pkg/.tether/mods/x.py"]
GRANTS = [["--permission-mode", "acceptEdits"], ["--yolo"], ["--allowedTools", "Edit,Write"]]


def _prepare(world: World) -> dict:
    (world.project / "sub" / ".git").mkdir(parents=True)
    (world.project / "sub" / ".git" / "config").write_text("[core]\n")
    (world.project / "pkg" / ".tether" / "mods").mkdir(parents=True)
    return {p: (world.project / p).read_bytes() if (world.project / p).exists() else None
            for p in TARGETS}


@pytest.mark.parametrize("grant", GRANTS, ids=["acceptEdits", "yolo", "allowedTools"])
@pytest.mark.parametrize("target", TARGETS)
def test_file_tools_do_not_write_arming_dirs(git_world: World, target: str, grant: list) -> None:
    before = _prepare(git_world)
    out = attempt(git_world, tool("Write", file_path=target, content="touch /tmp/x\n"), args=grant)
    after = (git_world.project / target).read_bytes() if (git_world.project / target).exists() else None
    assert after == before[target], out.explain()
    assert out.denied, out.explain()


@pytest.mark.parametrize("grant", GRANTS[:2], ids=["acceptEdits", "yolo"])
@pytest.mark.parametrize("target", TARGETS[:4])
def test_redirections_do_not_write_arming_dirs(git_world: World, target: str, grant: list) -> None:
    before = _prepare(git_world)
    out = attempt(git_world, bash(f"echo '[core] fsmonitor = evil' >> {target}"), args=grant)
    after = (git_world.project / target).read_bytes() if (git_world.project / target).exists() else None
    assert after == before[target], out.explain()
    assert out.denied, out.explain()


def test_a_rule_naming_the_directory_admits_the_write(git_world: World) -> None:
    out = attempt(git_world, tool("Write", file_path=".git/hooks/pre-commit", content="#!/bin/sh\n"),
                  args=["--allowedTools", "Write(.git/hooks/**)"])
    assert out.statuses == ["success"], out.explain()
    assert (git_world.project / ".git" / "hooks" / "pre-commit").read_text() == "#!/bin/sh\n"
