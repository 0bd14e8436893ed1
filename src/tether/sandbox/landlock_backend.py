"""The Landlock-only backend: a SandboxPolicy as `landlock-exec` rules, for machines without bwrap.

Landlock is an allow-list whose grants are inherited by everything beneath a path, and it can
never take a right away below a grant. A policy, though, narrows: a denied `~/.ssh` inside a
readable `/`, a read-only `.git` inside a writable workspace. So `landlock_grants` walks down
from `/` and, wherever a narrower rule lies beneath, grants the directory itself only the right
to be listed and descends into its entries (the siblings along the way to each narrower path)
instead; everything else gets one grant at the highest point it can. Enumeration happens at wrap
time, so it sees the tree as it is now; an entry created later directly in a split directory
(the home folder) gets no grant and cannot be read. Read-only names inside the workspace
(`.git`, `.tether`) would split the workspace root too, so nothing could be created at its top;
where unprivileged user namespaces work, `landlock-exec --protect` bind-mounts them read-only
in a private mount namespace instead and the workspace stays writable whole.

Symlinks among the entries get no grant of their own (a rule on a link would grant its target);
what they point to is granted, or not, where it lives. The private tmp dir is writable whole
(its protected names guard nothing: no later step runs from it). Of /dev only the harmless
devices are granted (null, zero, full, tty, ptmx, pts writable; random, urandom readable).

With the network off, TCP bind/connect are denied (ABI ≥ 4) and the strict seccomp filter refuses
every network socket family; ABI ≥ 6 scopes abstract Unix sockets and signals to the sandbox.
Every capability is dropped (a root user keeps none across exec): with CAP_SYS_PTRACE Landlock
would let the command read other processes' /proc/<pid>/environ.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Literal

from tether.sandbox.policy import PROTECTED_NAMES, SandboxError, SandboxPolicy, ordered_rules

Grant = Literal["list", "read", "write"]
_RANK = {"deny": 0, "read": 1, "write": 2}
# /dev is an allow-list too: a root-owned command would otherwise read /dev/loop*, /dev/sd*
# (raw disks, every hidden file's blocks) as the devices' owner. bwrap's --dev does the same.
DEVICES: tuple[Path, ...] = tuple(
    Path(p) for p in ("/dev/null", "/dev/zero", "/dev/full", "/dev/tty", "/dev/ptmx", "/dev/pts")
)
READ_DEVICES: tuple[Path, ...] = (Path("/dev/random"), Path("/dev/urandom"))
_FLAG: dict[Grant, str] = {"list": "--list", "read": "--ro", "write": "--rw"}


def _entries_on_disk(directory: str) -> list[tuple[str, bool]]:
    """(entry path, is not a symlink) for each entry of `directory`."""
    try:
        with os.scandir(directory) as it:
            return [(entry.path, not entry.is_symlink()) for entry in it]
    except OSError:
        return []


def mounted_read_only(policy: SandboxPolicy) -> list[Path]:
    """The read-only roots inside writable ones (`.git`, `.tether`, known armed names): what
    `--protect` mounts keep read-only when a user namespace is available."""
    writable = [w for w in policy.writable_roots if w != policy.tmp_dir]
    return [
        r for r in policy.readonly_roots if any(r != w and r.is_relative_to(w) for w in writable)
    ]


def mounted_hidden(policy: SandboxPolicy) -> list[Path]:
    """The denied roots inside writable ones (other agents' trees in a subagent's tether home):
    hidden by `--hide` mounts when a user namespace is available, so their writable parent is
    not split (and new entries can still be created beside them)."""
    return [
        d
        for d in policy.denied_roots
        if os.path.lexists(d)
        and any(d != w and d.is_relative_to(w) for w in policy.writable_roots)
    ]


def landlock_grants(
    policy: SandboxPolicy,
    entries: Callable[[str], Sequence[tuple[str, bool]]] = _entries_on_disk,
    exists: Callable[[str], bool] = os.path.lexists,
    mounted: Sequence[Path] = (),
    resolve: Callable[[str], str] | None = os.path.realpath,
) -> list[tuple[Path, Grant]]:
    """The (path, grant) rules that enforce `policy` with Landlock alone (see module doc);
    `mounted` paths are kept read-only by mounts instead, so they split nothing."""
    skip = {str(p) for p in mounted}
    rules: dict[str, str] = {str(p): a for p, a in ordered_rules(policy) if str(p) not in skip}
    tmp = str(policy.tmp_dir) if policy.tmp_dir is not None else None
    if tmp is not None:  # writable whole: drop the protected names beneath it
        rules = {p: a for p, a in rules.items() if not p.startswith(tmp + "/")}
    # A hidden path that is not there has nothing to hide (and nothing in a read-only sandbox
    # can create it); a read-only name that is missing stays, since a writable parent could.
    rules = {p: a for p, a in rules.items() if a != "deny" or exists(p)}
    # A hidden path that is a link (~/.netrc -> dotfiles/netrc), or lies under one, is hidden
    # where it really lives too: the link itself gets no grant, but its target would.
    for path, access in list(rules.items()):
        if access == "deny" and resolve is not None:
            real = resolve(path)
            if real != path:
                rules.setdefault(real, "deny")
    rules.setdefault("/dev", "deny")
    for device in DEVICES:
        rules.setdefault(str(device), "write")
    for device in READ_DEVICES:
        rules.setdefault(str(device), "read")
    # Every proper ancestor of a rule path: only those directories need a closer look.
    ancestors: set[str] = set()
    for path in rules:
        parent = os.path.dirname(path)
        while parent not in ancestors:
            ancestors.add(parent)
            if parent == "/":
                break
            parent = os.path.dirname(parent)
    default = "read" if policy.restrict_writes else "write"
    out: list[tuple[str, str]] = []

    def under(p: str, q: str) -> bool:
        return q != p and (p == "/" or q.startswith(p + "/"))

    def visit(p: str, access: str) -> None:
        if p not in ancestors:  # no rule beneath: one grant covers it all
            if access != "deny":
                out.append((p, access))
            return
        below = [(q, a) for q, a in rules.items() if under(p, q)]
        if any(_RANK[a] < _RANK[access] for _, a in below):
            # Split: `p` may only be listed; each entry gets what applies to it.
            if access != "deny":
                out.append((p, "list"))
            for child, real in entries(p):
                if real:
                    visit(child, rules.get(child, access))
            return
        if access != "deny":
            out.append((p, access))
        # Broader rules beneath (a writable root in a readable tree, a tmp dir in a hidden one)
        # get their own grants; only the topmost, since each visit handles what lies beneath.
        broader = [(q, a) for q, a in below if _RANK[a] > _RANK[access]]
        for q, a in broader:
            if not any(under(r, q) for r, _ in broader):
                visit(q, a)

    visit("/", rules.get("/", default))
    return _dedupe((Path(p), g) for p, g in out)  # type: ignore[misc]


def _dedupe(grants: Iterable[tuple[Path, Grant]]) -> list[tuple[Path, Grant]]:
    seen: dict[Path, Grant] = {}
    order = {"list": 0, "read": 1, "write": 2}
    for path, grant in grants:
        if path not in seen or order[grant] > order[seen[path]]:
            seen[path] = grant
    return list(seen.items())


def render_landlock(
    policy: SandboxPolicy,
    argv: Sequence[str],
    *,
    helper: Path,
    abi: int,
    seccomp_fd: int | None,
    mounts: bool = False,
) -> list[str]:
    """The argv running `argv` under `landlock-exec` alone, enforcing all of `policy`; with
    `mounts` (unprivileged user namespaces work here) read-only names inside writable roots are
    bind-mounted read-only instead of splitting their parent."""
    if not argv:
        raise SandboxError("nothing to run: the sandboxed command line is empty")
    if abi < 1:
        raise SandboxError("the Landlock-only sandbox needs Landlock (ABI >= 1)")
    args = [str(helper), "--restrict-reads"]
    mounted = mounted_read_only(policy) if mounts else []
    hidden = mounted_hidden(policy) if mounts else []
    # Mounts apply parents first; a writable root beneath a protected path is bound writable
    # again on top (the memory dir inside a read-only agent tree), as bwrap's later --bind does.
    reopened = [
        w for w in policy.writable_roots if any(w != m and w.is_relative_to(m) for m in mounted)
    ]
    ops = sorted(
        [(p, "ro") for p in mounted] + [(w, "rw") for w in reopened] + [(d, "hide") for d in hidden],
        key=lambda op: len(op[0].parts),
    )
    for path, kind in ops:
        if kind == "hide":
            args += ["--hide", str(path)]
        elif kind == "rw":
            args += ["--writable-mount", str(path)]
        elif os.path.lexists(path):
            args += ["--protect", str(path)]
        elif path.name in PROTECTED_NAMES:
            args += ["--protect-dir", str(path)]  # occupy the name, as bwrap does
    for path, grant in landlock_grants(policy, mounted=[*mounted, *hidden]):
        args += [_FLAG[grant], str(path)]
    if not policy.network:
        args.append("--no-net")
    args += ["--scope", "--drop-caps"]
    if seccomp_fd is not None:
        args += ["--seccomp-fd", str(seccomp_fd)]
    return [*args, "--", *argv]
