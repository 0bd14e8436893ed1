"""Landlock (the kernel's unprivileged access control): detection, and the exec helper.

`landlock-exec` (landlock_exec.c, compiled with the system C compiler on first use into
`$TETHER_HOME/bin/`) has two uses. Beneath bwrap, after its mounts (a Landlock-restricted
process may not change mounts), it is a second, independent layer: writes are denied outside the
policy's writable roots and, with the network off, TCP bind/connect too (ABI ≥ 4); no compiler,
or `TETHER_LANDLOCK=0`, means bwrap + seccomp alone. Without bwrap it is the whole sandbox (see
`landlock_backend`): reads too, scopes, capabilities dropped, the strict seccomp filter, and
read-only/hidden mounts in a private user namespace where one is allowed (`userns_mounts_ok`).
`tether sandbox status` says which.
"""

from __future__ import annotations

import ctypes
import errno
import functools
import hashlib
import os
import platform
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

# landlock_create_ruleset is 444 on every architecture (it postdates the unified numbering).
_SYS_LANDLOCK_CREATE_RULESET = 444
BIN_DIR = "bin"  # under TETHER_HOME: the compiled helpers
_LANDLOCK_CREATE_RULESET_VERSION = 1 << 0
_MACHINES = frozenset({"x86_64", "aarch64", "arm64"})


@dataclass(frozen=True, slots=True)
class LandlockStatus:
    abi: int | None
    reason: str  # why `abi` is None, or a one-line description when it is not


def landlock_status() -> LandlockStatus:
    """Ask the kernel `landlock_create_ruleset(NULL, 0, LANDLOCK_CREATE_RULESET_VERSION)`."""
    if not sys.platform.startswith("linux"):
        return LandlockStatus(None, f"Landlock is Linux-only (this is {sys.platform})")
    machine = platform.machine()
    if machine not in _MACHINES:
        return LandlockStatus(None, f"Landlock detection not implemented for {machine}")
    libc = ctypes.CDLL(None, use_errno=True)
    result = libc.syscall(
        ctypes.c_long(_SYS_LANDLOCK_CREATE_RULESET),
        ctypes.c_void_p(None),
        ctypes.c_size_t(0),
        ctypes.c_uint32(_LANDLOCK_CREATE_RULESET_VERSION),
    )
    if result >= 0:
        return LandlockStatus(int(result), f"Landlock ABI {result}")
    err = ctypes.get_errno()
    if err == errno.ENOSYS:
        why = "the kernel has no Landlock (built without CONFIG_SECURITY_LANDLOCK or blocked)"
    elif err == errno.EOPNOTSUPP:
        why = "Landlock is built in but disabled at boot (add landlock to the lsm= list)"
    else:
        why = f"landlock_create_ruleset failed: {os.strerror(err)}"
    return LandlockStatus(None, why)


def helper_path(home: Path) -> tuple[Path | None, str]:
    """The compiled `landlock-exec` for this source (built once, cached), or None and why."""
    return _built(str(home), "landlock_exec.c", "landlock-exec")


def guard_path(home: Path) -> tuple[Path | None, str]:
    """The compiled armed-names guard (`armed_guard.c`, the C twin of `armed.py`), or None."""
    return _built(str(home), "armed_guard.c", "armed-guard")


@functools.cache
def _built(home: str, source_name: str, name: str) -> tuple[Path | None, str]:
    source_path = Path(__file__).with_name(source_name)
    try:
        source = source_path.read_bytes()
    except OSError as exc:
        return None, f"{name} source missing ({exc})"
    digest = hashlib.sha256(source).hexdigest()[:12]
    # Not in cache/: a memory subagent may write tether's home, but `bin` stays read-only for it
    # (policy.memory_subagent_policy): these programs run outside any sandbox.
    target = Path(home) / BIN_DIR / f"{name}-{digest}"
    if os.access(target, os.X_OK):
        return target, f"{name} at {target}"
    compiler = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if compiler is None:
        return None, f"no C compiler to build {name} (apt-get install gcc)"
    target.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{name}-")
    os.close(fd)
    try:
        done = subprocess.run(
            [compiler, "-O2", "-o", tmp, str(source_path)],
            capture_output=True,
            text=True,
            timeout=60,
        )
        if done.returncode != 0:
            return None, f"building {name} failed: {done.stderr.strip()[:300]}"
        os.chmod(tmp, 0o755)
        os.replace(tmp, target)  # atomic: a concurrent build just replaces it with the same
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return target, f"{name} built at {target}"


def landlock_argv(
    helper: Path, writable: list[Path], *, network: bool, abi: int
) -> list[str]:
    """The prefix that runs a command under Landlock: writes only beneath `writable` (and
    /dev, for /dev/null and the tty), TCP off unless `network`."""
    out = [str(helper)]
    for root in [*writable, Path("/dev")]:
        out += ["--rw", str(root)]
    if not network and abi >= 4:
        out.append("--no-net")
    return [*out, "--"]


@functools.cache
def userns_mounts_ok(helper: Path) -> bool:
    """Whether `landlock-exec --protect` works here (an unprivileged user + mount namespace):
    tried once per process on a throwaway directory."""
    with tempfile.TemporaryDirectory(prefix="tether-userns-probe-") as tmp:
        try:
            done = subprocess.run(
                [str(helper), "--protect", tmp, "--", "true"],
                capture_output=True,
                timeout=10,
                stdin=subprocess.DEVNULL,
            )
        except (OSError, subprocess.TimeoutExpired):
            return False
    return done.returncode == 0
