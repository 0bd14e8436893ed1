"""Turns a SandboxPolicy into a bubblewrap (`bwrap`) command line.

Rendering is pure given a view of the filesystem (`path_kind`, the only thing it asks the disk,
injectable for tests): bwrap can only mount onto paths that exist, so what a root looks like
decides how it is expressed.

The mount plan, in order (later mounts cover earlier ones, see `policy.ordered_rules`):

- `--ro-bind / /` (or `--bind / /` when writes are not restricted), fresh `/dev` and `/proc`;
- denied directory → `--tmpfs` (remounted read-only once everything beneath it is mounted),
  denied file → `--ro-bind /dev/null`; a denied path that does not exist is skipped (nothing to
  hide);
- writable → `--bind`; read-only → `--ro-bind`;
- a read-only path that does not exist yet but whose parent is writable (`.git`, `.tether` in a
  fresh workspace) gets an empty read-only tmpfs, so `mkdir .tether` fails with EEXIST and
  `touch .tether/x` with EROFS. bwrap has to create the mount point, so an empty directory is left
  behind on the host; it is inert (git skips an empty `.git`, tether treats an empty `.tether` as
  no settings) and is reused by the next run. It is deliberately never removed afterwards:
  deleting a mount point detaches it in every other live sandbox using it.

Process flags: a new user namespace (`--disable-userns` inside it when bwrap ≥ 0.8), all
capabilities dropped (bwrap keeps them when started by root), new PID and IPC namespaces, a new
network namespace unless the policy allows network, and `--die-with-parent`. `--new-session` is
not used: the caller already starts the child in its own session/process group and kills that
group on timeout; the PID namespace guarantees nothing outlives bwrap.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Literal

from tether.sandbox.policy import Access, SandboxError, SandboxPolicy, ordered_rules

PathKind = Literal["dir", "file", "missing"]
SANDBOX_ENV = "TETHER_SANDBOX"


def path_kind_on_disk(path: Path) -> PathKind:
    """What bwrap will find at `path` (symlinks followed, as bwrap follows them)."""
    try:
        st = os.stat(path)
    except OSError:
        return "missing"
    return "dir" if stat.S_ISDIR(st.st_mode) else "file"


def render_bwrap(
    policy: SandboxPolicy,
    argv: Sequence[str],
    *,
    cwd: Path | str,
    env: Mapping[str, str],
    seccomp_fd: int | None = None,
    disable_userns: bool = True,
    bwrap: str = "bwrap",
    path_kind: Callable[[Path], PathKind] = path_kind_on_disk,
) -> list[str]:
    """The full argv running `argv` inside bwrap under `policy`, starting in `cwd`.

    `env` is the child's environment; it is passed to the process as is (never on the command
    line, where other users could read it) and only checked here: a command that would run
    inside a tether sandbox already is refused rather than nested.
    """
    if not argv:
        raise SandboxError("nothing to run: the sandboxed command line is empty")
    if SANDBOX_ENV in env:
        raise SandboxError(
            f"refusing to nest sandboxes: {SANDBOX_ENV}={env[SANDBOX_ENV]} says this command "
            "already runs inside one (use wrap_command, which leaves it as is)"
        )
    cwd_path = Path(cwd)
    if not cwd_path.is_absolute():
        raise SandboxError(f"sandbox working directory {str(cwd)!r} must be an absolute path")

    args = [bwrap, "--unshare-user"]
    if disable_userns:
        args.append("--disable-userns")
    args += ["--unshare-pid", "--unshare-ipc"]
    if not policy.network:
        args.append("--unshare-net")
    args += ["--die-with-parent", "--cap-drop", "ALL"]
    args += ["--ro-bind" if policy.restrict_writes else "--bind", "/", "/"]
    args += ["--dev", "/dev", "--proc", "/proc"]

    mounts, remounts = _render_rules(policy, path_kind)
    args += mounts
    for path in remounts:
        args += ["--remount-ro", path]

    args += ["--setenv", SANDBOX_ENV, "bwrap"]
    if seccomp_fd is not None:
        args += ["--seccomp", str(seccomp_fd)]
    args += ["--chdir", str(cwd_path), "--", *argv]
    return args


def _render_rules(
    policy: SandboxPolicy, path_kind: Callable[[Path], PathKind]
) -> tuple[list[str], list[str]]:
    rules = ordered_rules(policy)
    mounts: list[str] = []
    remounts: list[str] = []
    for index, (path, access) in enumerate(rules):
        kind = path_kind(path)
        p = str(path)
        if access == "deny":
            if kind == "dir":
                mounts += ["--tmpfs", p]
                remounts.append(p)
            elif kind == "file":
                mounts += ["--ro-bind", "/dev/null", p]
        elif access == "write":
            if kind != "missing":
                mounts += ["--bind", p, p]
        elif kind != "missing":
            mounts += ["--ro-bind", p, p]
        elif _parent_access(policy, rules[:index], path) == "write":
            # Not there yet but creatable: occupy the name with an empty read-only directory.
            mounts += ["--tmpfs", p]
            remounts.append(p)
    return mounts, remounts


def _parent_access(
    policy: SandboxPolicy, earlier: Sequence[tuple[Path, Access]], path: Path
) -> Access:
    """The access the sandbox will have to `path`'s parent, from the rules applied before it."""
    best: tuple[int, Access] | None = None
    for root, access in earlier:
        if path != root and path.is_relative_to(root):
            depth = len(root.parts)
            if best is None or depth >= best[0]:
                best = (depth, access)
    if best is not None:
        return best[1]
    return "read" if policy.restrict_writes else "write"
