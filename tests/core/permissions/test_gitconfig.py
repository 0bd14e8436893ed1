"""`git_hazard`: which keys count as programs, benign repositories pass, the cache notices every
change that matters, probing runs nothing but git, and the file scan stands in without git.

The hostile layouts themselves (each proven live) are in tests/security/test_git_repos.py.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.requirements import missing
from tests.security.support import World
from tests.security.test_git_repos import LAYOUTS, Layout, benign_repo, build, evil_program, git
from tether.core.permissions.gitconfig import git_hazard, program_key


@pytest.mark.parametrize(("key", "value", "runs"), [
    ("core.fsmonitor", "/x/run.sh", True),
    ("core.fsmonitor", "false", False),
    ("core.fsmonitor", "true", False),  # git's own daemon
    ("core.pager", "less", True),
    ("pager.log", "false", False),
    ("pager.log", "sh -c id", True),
    ("diff.external", "x", True),
    ("diff.conv.textconv", "x", True),
    ("diff.conv.binary", "true", False),
    ("filter.x.process", "x filter-process", True),
    ("filter.x.required", "true", False),
    ("gpg.program", "x", True),
    ("gpg.ssh.program", "x", True),
    ("gpg.format", "ssh", False),
    ("credential.https://h.example.helper", "x", True),
    ("credential.helper", "", False),
    ("credential.helper", "store", False),  # git's own `git credential-store`
    ("credential.helper", "/w/.evil/helper", True),
    ("filter.lfs.process", "git-lfs filter-process", False),
    ("filter.lfs.clean", "git-lfs clean -- %f", False),
    ("filter.lfs.clean", "./git-lfs clean -- %f", True),
    ("core.sshcommand", "ssh -i key", True),  # lazy fetches in a partial clone run it
    ("alias.st", "!touch p", True),
    ("alias.st", "status -s", False),
    ("protocol.ext.allow", "always", True),
    ("protocol.ext.allow", "never", False),
    ("remote.origin.uploadpack", "x", True),
    ("remote.origin.url", "https://h.example/r.git", False),
    ("user.name", "x", False),
    ("core.hookspath", ".husky", False),  # judged by the hooks it holds, not the setting
    ("CORE.FSMONITOR", "x", True),
    ("core.editor", "vim", False),  # only for a person at a terminal
    ("sequence.editor", "x", False),
    ("difftool.x.cmd", "x", False),
    ("merge.evil.driver", "x %O %A %B", True),  # a `git pull` a rule allows runs it
])
def test_program_keys(key: str, value: str, runs: bool) -> None:
    assert program_key(key, value) is runs


def _benign_with_hooks(world: World) -> Path:
    benign_repo(world)
    hook = world.project / ".git" / "hooks" / "pre-commit"
    hook.write_text("#!/bin/sh\nexit 0\n")
    hook.chmod(0o755)
    (world.project / ".husky").mkdir()
    (world.project / ".husky" / "pre-push").write_text("#!/bin/sh\nexit 0\n")
    git(world.project, "config", "core.hooksPath", ".husky", home=world.home)
    git(world.project, "config", "remote.origin.url", "https://h.example/r.git", home=world.home)
    git(world.project, "config", "pull.rebase", "true", home=world.home)
    return world.project


def _benign_worktree_and_submodule(world: World) -> Path:
    upstream = benign_repo(world, world.root / "upstream")
    benign_repo(world)
    git(world.project, "-c", "protocol.file.allow=always", "submodule", "add", "-q",
        str(upstream), "sub", home=world.home)
    git(world.project, "worktree", "add", "-q", str(world.project / "wt"), home=world.home)
    return world.project


@pytest.mark.parametrize("make", [benign_repo, _benign_with_hooks, _benign_worktree_and_submodule,
                                  lambda w: w.project], ids=["plain", "hooks", "submodule", "no-repo"])
def test_benign_repositories_have_no_hazard(tmp_path: Path, make) -> None:
    world = World.build(tmp_path)
    assert git_hazard(make(world)) is None


def test_the_cache_notices_changes_to_what_git_reads(tmp_path: Path) -> None:
    world = World.build(tmp_path)
    repo = benign_repo(world)
    evil = evil_program(world)
    assert git_hazard(repo) is None
    for _ in range(20):
        assert git_hazard(repo) is None  # cached: what that costs is bench/git_safety.py's job

    # an include whose target does not exist yet, then appears
    git(repo, "config", "include.path", "../later.cfg", home=world.home)
    assert git_hazard(repo) is None
    (repo / "docs").mkdir()
    assert git_hazard(repo / "docs") is None  # the repository's verdict, reused
    (repo / "later.cfg").write_text(f"[core]\n\tfsmonitor = {evil}\n")
    assert "later.cfg" in (git_hazard(repo) or "")
    assert "later.cfg" in (git_hazard(repo / "docs") or "")
    (repo / "later.cfg").write_text("[user]\n\tname = x\n")
    assert git_hazard(repo) is None

    # a hook that appears, and a subfolder that becomes a bare layout
    hook = repo / ".git" / "hooks" / "post-index-change"
    hook.write_text("#!/bin/sh\n")
    hook.chmod(0o755)
    assert "post-index-change" in (git_hazard(repo) or "")
    hook.unlink()
    sub = repo / "sub"
    sub.mkdir()
    assert git_hazard(sub) is None
    git(sub, "init", "-q", "--bare", home=world.home)
    git(sub, "config", "gpg.program", str(evil), home=world.home)
    assert "gpg.program" in (git_hazard(sub) or "")


def test_git_dir_from_the_environment_is_the_one_judged(tmp_path: Path, monkeypatch) -> None:
    world = World.build(tmp_path)
    benign_repo(world)
    elsewhere = benign_repo(world, world.root / "elsewhere")
    git(elsewhere, "config", "diff.external", "x", home=world.home)
    monkeypatch.setenv("GIT_DIR", str(elsewhere / ".git"))
    assert "diff.external" in (git_hazard(world.project) or "")


def test_a_config_git_cannot_read_is_a_hazard(tmp_path: Path) -> None:
    world = World.build(tmp_path)
    repo = benign_repo(world)
    with (repo / ".git" / "config").open("a") as f:
        f.write("[core\n\tfsmonitor = x\n")
    assert "could not inspect" in (git_hazard(repo) or "")


@pytest.mark.parametrize("layout", LAYOUTS, ids=[layout.name for layout in LAYOUTS])
def test_probing_runs_nothing_but_git(tmp_path: Path, layout: Layout) -> None:
    """strace every execve while git_hazard probes the hostile layout: git only."""
    strace = shutil.which("strace") or missing("strace", "apt-get install strace")
    world, run_in = build(tmp_path, layout)
    log = tmp_path / "strace.log"
    code = ("import sys; from pathlib import Path; "
            "from tether.core.permissions.gitconfig import git_hazard; "
            "print(git_hazard(Path(sys.argv[1])))")
    done = subprocess.run([strace, "-f", "-qq", "-e", "trace=execve", "-e", "signal=none",
                           "-o", str(log), sys.executable, "-c", code, str(run_in)],
                          capture_output=True, text=True, timeout=60, check=True,
                          env={**os.environ, "HOME": str(world.home)})
    assert layout.names in done.stdout
    ran = [line.split('"')[1] for line in log.read_text().splitlines()
           if "execve(" in line and "= 0" in line]
    assert ran and all(os.path.basename(p).startswith(("git", "python")) for p in ran), ran
    assert not world.effects()


@pytest.mark.parametrize("name", ["fsmonitor-section-line", "config-worktree", "linked-worktree",
                                  "bare-subfolder", "bare-root", "include-path"])
def test_without_git_the_files_are_scanned(tmp_path: Path, monkeypatch, name: str) -> None:
    layout = next(layout for layout in LAYOUTS if layout.name == name)
    world, run_in = build(tmp_path, layout)
    fine = benign_repo(world, world.root / "fine")
    monkeypatch.setenv("PATH", str(tmp_path / "no-git-here"))
    hazard = git_hazard(run_in) or ""
    assert layout.names in hazard or "included from another file" in hazard, hazard
    assert git_hazard(fine) is None


def test_a_directory_not_there_yet_is_judged_by_its_parents(tmp_path: Path) -> None:
    world = World.build(tmp_path)
    repo = benign_repo(world)
    git(repo, "config", "core.fsmonitor", str(evil_program(world)), home=world.home)
    assert "core.fsmonitor" in (git_hazard(repo / "later" / "deeper") or "")
    assert "core.fsmonitor" in (git_hazard(repo / "README.md") or "")
