"""Hostile git through the real `tether -p`: a model proposes an inspect command in a repository
that names a program, and the program never runs (no marker, no canary printed); in a benign
repository the same commands are auto-allowed, not asked.

The layouts (each proven live in test_git_repos.py) are built per attempt in a fresh world.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.security.support import World, attempt, bash
from tests.security.test_git_repos import CASES, Layout, benign_repo, build, dirty, signed_commit


def _in(run_in: Path, world: World, command: str) -> str:
    """The command as the model would spell it from the workspace root."""
    if run_in == world.project.resolve():
        return command
    return command.replace("git ", f"git -C {run_in.relative_to(world.project.resolve())} ", 1)


@pytest.mark.parametrize(("layout", "command"), CASES)
def test_an_inspect_command_never_runs_the_repository_program(
    tmp_path: Path, layout: Layout, command: str
) -> None:
    world, run_in = build(tmp_path, layout)
    outcome = attempt(world, bash(_in(run_in, world, command)))
    assert outcome.run.code == 0, outcome.explain()
    assert outcome.effect_free(), outcome.explain()
    assert outcome.results, outcome.explain()


BENIGN = [
    "git status",
    "git diff",
    "git diff --stat",
    "git log -p",
    "git show HEAD",
    "git show --show-signature HEAD",
    "git log --format=%G? -1",
    "git blame README.md",
    "git grep demo",
    "git log --oneline -3",
]


@pytest.mark.parametrize("command", BENIGN)
def test_a_benign_repository_is_not_over_blocked(tmp_path: Path, command: str) -> None:
    world = World.build(tmp_path)
    benign_repo(world)
    signed_commit(world, world.project)
    dirty(world)
    outcome = attempt(world, bash(command))
    assert outcome.effect_free(), outcome.explain()
    assert outcome.statuses == ["success"], outcome.explain()
    assert not outcome.denied, outcome.explain()
