"""Detects Landlock (the kernel's unprivileged filesystem access control) and its ABI version.

Detection only: tether's filesystem confinement comes from bwrap mounts; the ABI is reported by
`tether sandbox status` so a future Landlock layer (e.g. abstract-unix-socket scoping, ABI ≥ 6)
can be turned on where the kernel has it.
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import sys
from dataclasses import dataclass

# landlock_create_ruleset is 444 on every architecture (it postdates the unified numbering).
_SYS_LANDLOCK_CREATE_RULESET = 444
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
