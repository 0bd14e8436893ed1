"""`git_safe_env`: how it merges into a command's environment, and that a benign repository's
inspect commands print exactly what they print without it (safe mode changes no output).

The hostile layouts it closes are in tests/security/test_git_repos.py.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from tests.security.support import World
from tests.security.test_git_repos import benign_repo, dirty, git, signed_commit
from tether.tools.git_safety import SAFE_CONFIG, git_safe_env


def test_it_appends_after_the_callers_config_and_drops_external_diff() -> None:
    base = {"PATH": "/usr/bin", "GIT_CONFIG_COUNT": "1", "GIT_CONFIG_KEY_0": "user.name",
            "GIT_CONFIG_VALUE_0": "me", "GIT_EXTERNAL_DIFF": "/x/run.sh", "GIT_PAGER": "less"}
    env = git_safe_env(base)
    assert env["GIT_CONFIG_KEY_0"] == "user.name" and env["GIT_CONFIG_VALUE_0"] == "me"
    assert env["GIT_CONFIG_COUNT"] == str(1 + len(SAFE_CONFIG))
    assert env["GIT_CONFIG_KEY_1"] == "core.fsmonitor" and env["GIT_CONFIG_VALUE_1"] == "false"
    assert "GIT_EXTERNAL_DIFF" not in env
    assert env["GIT_PAGER"] == "cat" and env["GIT_ALLOW_PROTOCOL"] == "none"
    assert base["GIT_PAGER"] == "less", "the caller's mapping is not changed"


@pytest.mark.parametrize("count", ["x", "-3", ""])
def test_a_bad_count_starts_over(count: str) -> None:
    env = git_safe_env({"GIT_CONFIG_COUNT": count})
    assert env["GIT_CONFIG_COUNT"] == str(len(SAFE_CONFIG))
    assert env["GIT_CONFIG_KEY_0"] == "core.fsmonitor"


def test_git_reads_every_safe_setting(tmp_path: Path) -> None:
    """git accepts the environment (a malformed one makes every git command die)."""
    env = git_safe_env({**os.environ, "HOME": str(tmp_path), "GIT_CONFIG_NOSYSTEM": "1"})
    shown = subprocess.run(["git", "config", "--list", "--show-scope"], env=env, cwd=tmp_path,
                           capture_output=True, text=True, check=True).stdout
    for key, value in SAFE_CONFIG:
        assert f"command\t{key.lower()}={value}" in shown.splitlines(), key


INSPECT = ["git status", "git status --short", "git diff", "git diff --stat", "git log -p",
           "git show HEAD", "git log --format=%H%x20%G? -2", "git blame README.md",
           "git grep demo", "git ls-files", "git rev-parse HEAD", "git branch --list",
           "git submodule status", "git log --oneline --graph --all"]


def test_a_benign_repository_reads_the_same_in_safe_mode(tmp_path: Path) -> None:
    world = World.build(tmp_path)
    benign_repo(world)
    upstream = benign_repo(world, world.root / "upstream")
    git(world.project, "-c", "protocol.file.allow=always", "submodule", "add", "-q",
        str(upstream), "sub", home=world.home)
    git(world.project, "commit", "-qm", "submodule", home=world.home)
    signed_commit(world, world.project)
    dirty(world)
    plain = {**os.environ, "HOME": str(world.home), "GIT_CONFIG_NOSYSTEM": "1"}
    safe = git_safe_env(plain)
    for command in INSPECT:
        out = [subprocess.run(command.split(), cwd=world.project, env=env, capture_output=True,
                              text=True, stdin=subprocess.DEVNULL, check=False)
               for env in (plain, safe)]
        assert (out[1].returncode, out[1].stdout) == (out[0].returncode, out[0].stdout), command
