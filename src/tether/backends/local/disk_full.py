"""What a write that a full disk refuses becomes, for every store tether keeps (transcripts,
records, the checkpoint, cron and channel databases): `DiskFull` naming the file, the disk (the
mount point of its file system) and the space left there.

A full disk reaches tether as an OSError (ENOSPC; EDQUOT for a quota) or as a SQLite error:
SQLITE_FULL ("database or disk is full") when a write came up short, but an I/O error ("disk I/O
error", e.g. SQLITE_IOERR_SHMSIZE when the shared-memory file cannot grow) when the refusal
came elsewhere. SQLite does not pass the errno on, so an I/O error counts as a full disk when
the file system has next to no room left (`NEARLY_FULL`), which is what the errno would say.
"""

from __future__ import annotations

import errno
import os
from pathlib import Path

from tether.errors import DiskFull

# Less free space than this, and a SQLite I/O error is the disk being full: SQLite grows its
# files a page or a 32 KiB shared-memory chunk at a time, so a disk with this much left has
# refused such a write (or is about to).
NEARLY_FULL = 1 << 20
_SPACE_ERRNOS = (errno.ENOSPC, errno.EDQUOT)


def disk_full(
    path: Path | str, exc: BaseException, doing: str = "write", consequence: str = ""
) -> DiskFull | None:
    """The DiskFull for `exc`, a failed write of `path`, if a full disk (or quota) caused it;
    None for any other failure. Accepts OSErrors and sqlite3 errors alike."""
    if isinstance(exc, DiskFull):
        return exc
    where = os.fspath(path)
    if isinstance(exc, OSError):
        if exc.errno not in _SPACE_ERRNOS:
            return None
        if exc.filename:
            where = os.fspath(exc.filename)
        cause = exc.strerror or os.strerror(exc.errno or 0)
        return _full(where, doing, cause, exc.errno or errno.ENOSPC, consequence)
    name = getattr(exc, "sqlite_errorname", None)  # sqlite3.Error, without importing sqlite3
    if not isinstance(name, str):
        return None
    cause = f"SQLite: {exc}"
    if name == "SQLITE_FULL":
        return _full(where, doing, cause, errno.ENOSPC, consequence)
    if name.startswith("SQLITE_IOERR"):
        room = _room(where)
        if room is not None and (room[1] < NEARLY_FULL or not room[2]):
            return _full(where, doing, cause, errno.ENOSPC, consequence)
    return None


def _full(path: str, doing: str, cause: str, code: int, consequence: str) -> DiskFull:
    # A path that is no path ("TETHER_HOME" for an error that named no file) names no disk:
    # asking about the current folder's instead could name the wrong one.
    room = _room(path) if os.path.isabs(path) else None
    mount, free, inodes = room if room is not None else (None, None, True)
    return DiskFull(
        path, doing=doing, cause=cause, code=code, mount=mount, free_bytes=free,
        inodes_left=inodes, quota=code == errno.EDQUOT, consequence=consequence,
    )


def _room(path: str) -> tuple[str, int, bool] | None:
    """(mount point, bytes this user may still write, whether inodes are left) for the file
    system holding `path` (or its nearest existing folder); None when it cannot be asked."""
    here = Path(os.path.abspath(path))
    while not here.exists() and here != here.parent:
        here = here.parent
    try:
        st = os.statvfs(here)
        mount = _mount_point(here)
    except OSError:
        return None
    # root may write into the blocks reserved for it; anyone else only into the available ones
    root = os.geteuid() == 0
    blocks, inodes = (st.f_bfree, st.f_ffree) if root else (st.f_bavail, st.f_favail)
    return str(mount), blocks * st.f_frsize, inodes > 0 or st.f_files == 0


def _mount_point(path: Path) -> Path:
    """The top folder of the file system holding `path` (where the device changes above it)."""
    path = path.resolve()
    dev = path.stat().st_dev
    while path != path.parent and path.parent.stat().st_dev == dev:
        path = path.parent
    return path
