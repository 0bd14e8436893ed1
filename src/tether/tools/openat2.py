"""Linux's `openat2(2)` through ctypes: open a directory with the kernel refusing every symlink.

`RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS` makes one system call do what a component-by-
component `O_NOFOLLOW` walk does, with the kernel as the judge. Where the kernel, the libc or a
seccomp filter does not offer it (before Linux 5.6, other systems, a sandbox that answers ENOSYS
or EPERM), `open_dir_no_symlinks` returns None and the caller walks instead. ctypes is loaded on
the first call only, so a run that never writes a file never pays for it.
"""

from __future__ import annotations

import errno
import os
import platform
from typing import Any

# The generic syscall table number (Linux 5.6+), the same on x86_64 and arm64.
_SYS_OPENAT2 = 437
_ARCHES = frozenset({"x86_64", "aarch64", "arm64"})
RESOLVE_NO_MAGICLINKS = 0x02
RESOLVE_NO_SYMLINKS = 0x04
# Answers meaning "this system cannot do it", as opposed to "this path is not right".
_UNAVAILABLE = frozenset({errno.ENOSYS, errno.EPERM, errno.E2BIG, errno.EINVAL})

_state: dict[str, Any] = {}  # "call": the bound syscall, or None once known unavailable


def _bind() -> Any:
    if "call" in _state:
        return _state["call"]
    call: Any = None
    if platform.system() == "Linux" and platform.machine() in _ARCHES:
        try:
            import ctypes

            class OpenHow(ctypes.Structure):
                _fields_ = [  # noqa: RUF012 - ctypes' own declaration style
                    ("flags", ctypes.c_uint64),
                    ("mode", ctypes.c_uint64),
                    ("resolve", ctypes.c_uint64),
                ]

            libc = ctypes.CDLL(None, use_errno=True)
            syscall = libc.syscall
            syscall.restype = ctypes.c_long

            def openat2(path: bytes, flags: int, resolve: int) -> int:
                how = OpenHow(flags, 0, resolve)
                fd = syscall(
                    ctypes.c_long(_SYS_OPENAT2),
                    ctypes.c_int(-100),  # AT_FDCWD; the path is absolute
                    ctypes.c_char_p(path),
                    ctypes.byref(how),
                    ctypes.c_size_t(ctypes.sizeof(how)),
                )
                if fd < 0:
                    code = ctypes.get_errno()
                    raise OSError(code, os.strerror(code), path.decode(errors="replace"))
                return int(fd)

            call = openat2
        except (OSError, AttributeError, ImportError):
            call = None
    _state["call"] = call
    return call


def open_dir_no_symlinks(real_dir: str, flags: int) -> int | None:
    """A descriptor of `real_dir` opened with no symlink anywhere on the way, or None when
    openat2 is not available here. Raises OSError: ELOOP when a component is a symlink,
    ENOENT / ENOTDIR as `open` would."""
    call = _bind()
    if call is None:
        return None
    try:
        return call(os.fsencode(real_dir), flags, RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS)
    except OSError as exc:
        if exc.errno in _UNAVAILABLE:
            _state["call"] = None  # e.g. a seccomp filter: it will answer the same next time
            return None
        raise
