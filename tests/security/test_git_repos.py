"""Hostile git repositories, built for real: each layout makes an inspect command run a program.

Every layout is proven live first (plain `git <command>` runs the repository's program: its
marker appears), then judged: `git_hazard` names it, and for the layouts an environment can
close, the same command under `git_safe_env` runs nothing. The tether end-to-end attempts over
the same layouts are in test_git_tether.py.
"""

from __future__ import annotations

import os
import pty
import select
import subprocess
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.security.support import MARKER, World
from tether.core.permissions.gitconfig import git_hazard
from tether.tools.git_safety import git_safe_env

IDENTITY = ("-c", "user.name=t", "-c", "user.email=t@t")


def git(cwd: Path, *args: str, home: Path) -> str:
    done = subprocess.run(["git", *IDENTITY, *args], cwd=cwd, check=True, capture_output=True,
                          text=True, env={**os.environ, "HOME": str(home), "GIT_CONFIG_NOSYSTEM": "1"})
    return done.stdout.strip()


def evil_program(world: World) -> Path:
    """The program a hostile repository names: it leaves MARKER outside the workspace."""
    path = world.project / ".evil" / "run.sh"
    path.parent.mkdir(exist_ok=True)
    # inside tether's read-only confinement only $TMPDIR (the private tmp) is writable
    path.write_text(f"#!/bin/sh\ntouch '{world.outside / MARKER}' \"$TMPDIR/{MARKER}\"\nexit 0\n")
    path.chmod(0o755)
    return path


def benign_repo(world: World, where: Path | None = None) -> Path:
    """A committed repository (the canary .env ignored, as real projects do)."""
    repo = where or world.project
    repo.mkdir(parents=True, exist_ok=True)
    git(repo, "init", "-q", home=world.home)
    (repo / ".gitignore").write_text(".env\n.evil/\n")
    if repo == world.project:
        git(repo, "add", ".gitignore", "README.md", "notes.md", home=world.home)
    else:
        (repo / "file.txt").write_text("content\n")
        git(repo, "add", "-A", home=world.home)
    git(repo, "commit", "-qm", "init", home=world.home)
    return repo


def dirty(world: World) -> None:
    """A change to diff, and a tracked file whose stat no longer matches the index (so `git
    status` / `git diff` rewrite the index and re-read content through filters)."""
    (world.project / "README.md").write_text("# demo\nchanged\n")
    notes = world.project / "notes.md"
    later = time.time() + 5
    os.utime(notes, (later, later))


def signed_commit(world: World, repo: Path, kind: str = "PGP") -> None:
    """A commit carrying a signature header, so showing it runs the signature program."""
    head = git(repo, "rev-parse", "HEAD", home=world.home)
    tree = git(repo, "rev-parse", "HEAD^{tree}", home=world.home)
    body = (f"tree {tree}\nparent {head}\nauthor t <t@t> 1700000000 +0000\n"
            f"committer t <t@t> 1700000000 +0000\ngpgsig -----BEGIN {kind} SIGNATURE-----\n"
            f" U1NIU0lH\n -----END {kind} SIGNATURE-----\n\nsigned\n")
    sig = world.root / "commit.txt"
    sig.write_text(body)
    sha = git(repo, "hash-object", "-t", "commit", "-w", str(sig), home=world.home)
    git(repo, "update-ref", "HEAD", sha, home=world.home)


def bare_with_signed_commit(world: World, where: Path) -> None:
    """`where` becomes a bare layout (HEAD, objects/, refs/, config) holding a signed commit."""
    seed = benign_repo(world, world.root / "seed")
    signed_commit(world, seed)
    git(world.root, "clone", "-q", "--bare", str(seed), str(where / "bare.tmp"), home=world.home)
    for entry in (where / "bare.tmp").iterdir():
        entry.rename(where / entry.name)
    (where / "bare.tmp").rmdir()


@dataclass(frozen=True)
class Layout:
    name: str
    build: Callable[[World, Path], str]  # (world, evil program) -> directory (relative) it runs in
    names: str  # what git_hazard's answer must contain
    commands: tuple[str, ...]  # inspect commands that run the program
    env_closes: bool  # git_safe_env alone keeps the program from running
    tty: bool = False  # the program runs only when stdout is a terminal (pagers)


def _fsmonitor_section_line(w: World, evil: Path) -> str:
    benign_repo(w)
    with (w.project / ".git" / "config").open("a") as f:
        f.write(f"[core] fsmonitor = {evil}\n")
    dirty(w)
    return "."


def _config(**settings: str) -> Callable[[World, Path], str]:
    def build(w: World, evil: Path) -> str:
        benign_repo(w)
        for key, value in settings.items():
            git(w.project, "config", key.replace("__", "."), value.format(evil=evil), home=w.home)
        dirty(w)
        return "."
    return build


def _attributes(line: str, **settings: str) -> Callable[[World, Path], str]:
    def build(w: World, evil: Path) -> str:
        benign_repo(w)
        (w.project / ".gitattributes").write_text(line + "\n")
        git(w.project, "add", ".gitattributes", home=w.home)
        git(w.project, "commit", "-qm", "attributes", home=w.home)
        for key, value in settings.items():
            git(w.project, "config", key.replace("__", "."), value.format(evil=evil), home=w.home)
        dirty(w)
        return "."
    return build


def _gpg(kind: str, **settings: str) -> Callable[[World, Path], str]:
    def build(w: World, evil: Path) -> str:
        benign_repo(w)
        signed_commit(w, w.project, kind)
        (w.project / ".evil" / "allowed_signers").write_text("")
        for key, value in settings.items():
            git(w.project, "config", key.replace("__", "."),
                value.format(evil=evil, signers=w.project / ".evil" / "allowed_signers"), home=w.home)
        return "."
    return build


def _config_worktree(w: World, evil: Path) -> str:
    benign_repo(w)
    git(w.project, "config", "core.repositoryformatversion", "1", home=w.home)
    git(w.project, "config", "extensions.worktreeConfig", "true", home=w.home)
    (w.project / ".git" / "config.worktree").write_text(f"[core]\n\tfsmonitor = {evil}\n")
    dirty(w)
    return "."


def _linked_worktree(w: World, evil: Path) -> str:
    benign_repo(w)
    main = benign_repo(w, w.project / ".vendor" / "main")
    git(main, "worktree", "add", "-q", str(w.project / "wt"), home=w.home)
    git(main, "config", "core.fsmonitor", str(evil), home=w.home)
    return "wt"


def _gitdir_file(w: World, evil: Path) -> str:
    """The workspace's `.git` is a file naming a git dir outside it (GIT_DIR-style)."""
    elsewhere = benign_repo(w, w.root / "elsewhere")
    git(elsewhere, "config", "core.fsmonitor", str(evil), home=w.home)
    (w.project / ".git").write_text(f"gitdir: {elsewhere / '.git'}\n")
    return "."


def _bare_subfolder(w: World, evil: Path) -> str:
    benign_repo(w)
    sub = w.project / "sub"
    sub.mkdir()
    git(sub, "init", "-q", "--bare", home=w.home)
    (sub / "config").write_text("[core]\n\trepositoryformatversion = 0\n"
                                f"\tbare = false\n\tworktree = ..\n\tfsmonitor = {evil}\n")
    return "sub"


def _bare_root(w: World, evil: Path) -> str:
    bare_with_signed_commit(w, w.project)
    git(w.project, "config", "gpg.program", str(evil), home=w.home)
    git(w.project, "config", "log.showSignature", "true", home=w.home)
    return "."


def _include_path(w: World, evil: Path) -> str:
    benign_repo(w)
    (w.project / "tools").mkdir()
    (w.project / "tools" / "git.cfg").write_text(f"[core]\n\tfsmonitor = {evil}\n")
    with (w.project / ".git" / "config").open("a") as f:
        f.write("[include]\n\tpath = ../tools/git.cfg\n")
    dirty(w)
    return "."


def _submodule(w: World, evil: Path) -> str:
    upstream = benign_repo(w, w.root / "upstream")
    benign_repo(w)
    git(w.project, "-c", "protocol.file.allow=always", "submodule", "add", "-q", str(upstream),
        "sub", home=w.home)
    git(w.project, "commit", "-qm", "submodule", home=w.home)
    git(w.project / "sub", "config", "core.fsmonitor", str(evil), home=w.home)
    return "."


def _promisor(url: str, **settings: str) -> Callable[[World, Path], str]:
    """A partial clone missing README.md's blob: showing it fetches from the promisor remote,
    through whatever transport the repository names."""
    def build(w: World, evil: Path) -> str:
        benign_repo(w)
        blob = git(w.project, "rev-parse", "HEAD:README.md", home=w.home)
        (w.project / ".git" / "objects" / blob[:2] / blob[2:]).unlink()
        for key, value in {"core.repositoryformatversion": "1",
                           "extensions.partialClone": "origin", "remote.origin.promisor": "true",
                           "remote.origin.partialCloneFilter": "blob:none",
                           "remote.origin.url": url.format(evil=evil), **settings}.items():
            git(w.project, "config", key.replace("__", "."), value.format(evil=evil), home=w.home)
        return "."
    return build


def _hook(hooks_path: str | None) -> Callable[[World, Path], str]:
    def build(w: World, evil: Path) -> str:
        benign_repo(w)
        if hooks_path is not None:
            git(w.project, "config", "core.hooksPath", hooks_path, home=w.home)
        hooks = w.project / (hooks_path or ".git/hooks")
        hooks.mkdir(parents=True, exist_ok=True)
        (hooks / "post-index-change").write_text(f"#!/bin/sh\nexec '{evil}'\n")
        (hooks / "post-index-change").chmod(0o755)
        dirty(w)
        return "."
    return build


LAYOUTS = [
    Layout("fsmonitor-section-line", _fsmonitor_section_line, "core.fsmonitor",
           ("git status", "git diff", "git diff --stat"), True),
    Layout("fsmonitor-key", _config(core__fsmonitor="{evil}"), "core.fsmonitor",
           ("git status", "git grep demo", "git ls-files -m", "git describe --dirty --always",
            "git diff-files"), True),
    Layout("diff-external", _config(diff__external="{evil}"), "diff.external", ("git diff",), False),
    Layout("textconv", _attributes("*.md diff=conv", diff__conv__textconv="{evil}"),
           "diff.conv.textconv", ("git diff", "git log -p", "git show HEAD~1", "git blame README.md",
            "git cat-file --textconv HEAD:README.md"),
           False),
    Layout("filter", _attributes("*.md filter=f", filter__f__clean="{evil}",
                                 filter__f__smudge="{evil}"),
           "filter.f.clean", ("git status", "git diff", "git cat-file --filters HEAD:README.md"),
           False),
    Layout("gpg-program", _gpg("PGP", gpg__program="{evil}", log__showSignature="true"),
           "gpg.program", ("git log -1", "git show --show-signature HEAD",
                           "git log --format=%G? -1"), True),
    Layout("gpg-ssh-program", _gpg("SSH", gpg__ssh__program="{evil}",
                                   gpg__ssh__allowedSignersFile="{signers}"),
           "gpg.ssh.program", ("git log -1 --show-signature", "git log --format=%G? -1"), True),
    Layout("config-worktree", _config_worktree, "core.fsmonitor", ("git status",), True),
    Layout("linked-worktree", _linked_worktree, "core.fsmonitor", ("git status",), True),
    Layout("gitdir-file", _gitdir_file, "elsewhere/.git/config", ("git status",), True),
    Layout("bare-subfolder", _bare_subfolder, "core.fsmonitor", ("git status",), True),
    Layout("bare-root", _bare_root, "gpg.program", ("git log -1",), True),
    Layout("include-path", _include_path, "tools/git.cfg", ("git status",), True),
    Layout("submodule", _submodule, "in submodule sub", ("git status", "git diff"), True),
    Layout("core-pager", _config(core__pager="{evil}"), "core.pager", ("git log -1",), True, tty=True),
    Layout("pager-per-command", _config(pager__log="{evil}"), "pager.log", ("git log -1",), True,
           tty=True),
    Layout("promisor-ext-remote", _promisor("ext::{evil} %S", protocol__ext__allow="always"),
           "protocol.ext.allow", ("git show HEAD:README.md", "git log -p"), True),
    Layout("promisor-ssh-command", _promisor("ssh://h.example/r", core__sshCommand="{evil}"),
           "core.sshcommand", ("git show HEAD:README.md", "git blame README.md"), True),
    Layout("alias", _config(alias__st="!{evil}"), "alias.st", ("git st",), False),
    Layout("post-index-change-hook", _hook(None), "post-index-change", ("git status", "git diff"),
           True),
    Layout("hooks-path", _hook(".githooks"), "post-index-change", ("git status", "git diff"), True),
]
CASES = [pytest.param(layout, command, id=f"{layout.name}:{command}")
         for layout in LAYOUTS for command in layout.commands]
ENV_CLOSED = [pytest.param(layout, command, id=f"{layout.name}:{command}")
              for layout in LAYOUTS if layout.env_closes for command in layout.commands]


def build(root: Path, layout: Layout) -> tuple[World, Path]:
    world = World.build(root)
    run_in = layout.build(world, evil_program(world))
    return world, (world.project / run_in).resolve()


def run_git(command: str, cwd: Path, env: Mapping[str, str], *, tty: bool) -> None:
    """Run `command` (a git command line, no shell syntax) as a command tether admits would."""
    argv = command.split()
    if not tty:
        subprocess.run(argv, cwd=cwd, env=dict(env), stdin=subprocess.DEVNULL,
                       capture_output=True, timeout=30, check=False)
        return
    main, child = pty.openpty()
    proc = subprocess.Popen(argv, cwd=cwd, env=dict(env), stdin=subprocess.DEVNULL,
                            stdout=child, stderr=child)
    os.close(child)
    deadline = time.monotonic() + 30
    while proc.poll() is None and time.monotonic() < deadline:
        if select.select([main], [], [], 0.1)[0]:
            try:
                os.read(main, 65536)
            except OSError:
                break
    proc.wait(timeout=5)
    os.close(main)


def plain_env(world: World) -> dict[str, str]:
    tmp = world.root / "tmp"
    tmp.mkdir(exist_ok=True)
    return {**os.environ, "HOME": str(world.home), "GIT_CONFIG_NOSYSTEM": "1", "TERM": "xterm",
            "TMPDIR": str(tmp)}


@pytest.mark.parametrize(("layout", "command"), CASES)
def test_the_layout_is_live(tmp_path: Path, layout: Layout, command: str) -> None:
    """Control: without safe mode the repository's program really runs (else the other tests
    prove nothing)."""
    world, run_in = build(tmp_path, layout)
    run_git(command, run_in, plain_env(world), tty=layout.tty)
    assert world.effects(), f"{layout.name}: `{command}` did not run the program"


@pytest.mark.parametrize("layout", LAYOUTS, ids=[layout.name for layout in LAYOUTS])
def test_git_hazard_names_the_layout(tmp_path: Path, layout: Layout) -> None:
    world, run_in = build(tmp_path, layout)
    hazard = git_hazard(run_in)
    assert hazard is not None and layout.names in hazard, hazard
    assert not world.effects(), "inspecting the repository ran its program"


@pytest.mark.parametrize(("layout", "command"), ENV_CLOSED)
def test_git_safe_env_runs_no_repository_program(tmp_path: Path, layout: Layout, command: str) -> None:
    world, run_in = build(tmp_path, layout)
    run_git(command, run_in, git_safe_env(plain_env(world)), tty=layout.tty)
    assert not world.effects(), f"{layout.name}: `{command}` ran the program under git_safe_env"


# Live inside the read-only confinement too (hooks need a writable index; pagers a terminal).
CONFINED = [pytest.param(layout, command, id=f"{layout.name}:{command}")
            for layout in LAYOUTS if layout.env_closes and not layout.tty
            and "hook" not in layout.name for command in layout.commands]


def _confined(tmp_path: Path, layout: Layout, command: str, *, safe_mode: bool) -> World:
    from tests.requirements import need_bwrap
    from tether.runtime.policy.confinement import Confinement
    from tether.runtime.policy.sandboxing import confinement_sandbox

    need_bwrap()
    world, run_in = build(tmp_path, layout)
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    env = plain_env(world)
    if safe_mode:  # as tether runs an auto-allowed command
        wrapped = Confinement(env, None, world.project, world.tether_home, scratch).wrap(
            command.split(), run_in, env)
    else:
        sandbox = confinement_sandbox(env, None, world.project, world.tether_home, scratch)
        assert sandbox is not None
        wrapped = sandbox.wrap(command.split(), run_in, env)
    with wrapped:
        subprocess.run(wrapped.argv, cwd=run_in, env=wrapped.env, pass_fds=wrapped.pass_fds,
                       stdin=subprocess.DEVNULL, capture_output=True, timeout=30, check=False)
    return world


@pytest.mark.parametrize(("layout", "command"), CONFINED)
def test_the_confinement_runs_no_repository_program(tmp_path: Path, layout: Layout, command: str) -> None:
    """Defence in depth: were the admission check to miss one of these, the read-only
    confinement with git safe mode still runs nothing. Control first: the same sandbox without
    safe mode does run the program (it leaves its marker in the private tmp)."""
    control = _confined(tmp_path / "control", layout, command, safe_mode=False)
    assert control.effects(), f"{layout.name}: `{command}` is not live in the sandbox"
    world = _confined(tmp_path / "safe", layout, command, safe_mode=True)
    assert not world.effects(), f"{layout.name}: `{command}` ran the program when confined"
