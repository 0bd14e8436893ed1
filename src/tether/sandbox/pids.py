"""How a sandbox's process count is bounded: a shared pids cgroup, else RLIMIT_NPROC.

Where a pids cgroup is writable (root, or a delegated cgroup v2 subtree) every sandbox with the
same limit joins one shared, persistent cgroup `tether-sandbox-pids-<N>` (created on first use,
never removed, so nothing leaks per run). Otherwise `prlimit --nproc` is set to N plus the
processes already running, because RLIMIT_NPROC counts the user's processes system-wide; it does
not bind root.
"""

from __future__ import annotations

import functools
import os
import shutil
from pathlib import Path
from typing import Literal

from tether.sandbox.policy import SandboxError

PidsMethod = Literal["cgroup", "rlimit"]
CGROUP_PREFIX = "tether-sandbox-pids-"


@functools.cache
def ensure_cgroup(root: str, limit: int) -> Path:
    """The shared cgroup `<root>/tether-sandbox-pids-<limit>` (created once, never removed)."""
    group = Path(root) / f"{CGROUP_PREFIX}{limit}"
    try:
        group.mkdir(exist_ok=True)
        (group / "pids.max").write_text(f"{limit}\n")
    except OSError as exc:
        raise SandboxError(f"cannot set up the sandbox pids cgroup {group}: {exc}") from exc
    return group


def shell_prefix(
    limit: int | None, method: PidsMethod | None, root: str | None
) -> list[str]:
    """What to put in front of bwrap so everything it starts counts against `limit`."""
    if limit is None:
        return []
    if method == "cgroup" and root is not None:
        group = ensure_cgroup(root, limit)
        # Join the cgroup, then become bwrap: everything bwrap starts is counted.
        script = (
            '{ echo $$ > "$1"; } 2>/dev/null || '
            '{ echo "tether sandbox: cannot join pids cgroup $1" >&2; exit 125; }; '
            'shift; exec "$@"'
        )
        return ["/bin/sh", "-c", script, "tether-sandbox", str(group / "cgroup.procs")]
    prlimit = shutil.which("prlimit")
    if method == "rlimit" and prlimit is not None:
        bound = limit + running_processes()
        return [prlimit, f"--nproc={bound}:{bound}", "--"]
    return []


def pids_method() -> tuple[PidsMethod | None, str | None, str | None]:
    root = _writable_pids_hierarchy()
    if root is not None:
        return "cgroup", root, None
    if os.geteuid() == 0:
        why = (
            "pids limit not enforced: no writable pids cgroup, and RLIMIT_NPROC does not bind root"
        )
        return None, None, why
    if shutil.which("prlimit") is None:
        return None, None, "pids limit not enforced: no writable pids cgroup and no prlimit"
    return "rlimit", None, None


def _writable_pids_hierarchy() -> str | None:
    try:
        mountinfo = Path("/proc/self/mountinfo").read_text()
    except OSError:
        return None
    for line in mountinfo.splitlines():
        left, _, right = line.partition(" - ")
        fields, tail = left.split(), right.split()
        if len(fields) < 5 or len(tail) < 3:
            continue
        mount_point = fields[4].replace("\\040", " ")
        v1_pids = tail[0] == "cgroup" and "pids" in tail[2].split(",")
        v2_pids = tail[0] == "cgroup2" and _v2_has_pids(mount_point)
        if (v1_pids or v2_pids) and os.access(mount_point, os.W_OK):
            return mount_point
    return None


def _v2_has_pids(mount_point: str) -> bool:
    try:
        return "pids" in Path(mount_point, "cgroup.subtree_control").read_text().split()
    except OSError:
        return False


def running_processes() -> int:
    try:
        return sum(1 for name in os.listdir("/proc") if name.isdigit())
    except OSError:
        return 0
