"""How the local store touches shared files safely across processes: exclusive flocks and
atomic, fsynced writes, and what a write that the disk refuses becomes (`StoreUnwritable`;
`DiskFull` from `disk_full.py` when there is no room).

Locks are `fcntl.flock` on a dedicated lock file. flock belongs to the open file description,
so two opens in one process exclude each other just as two processes do, and the kernel drops
the lock when the holder dies (even by SIGKILL). The descriptor is close-on-exec, so tools the
runtime spawns never inherit a turn lock; a bare `fork()` without exec would share it, which
tether never does while holding one.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import orjson

from tether.backends.local.disk_full import disk_full
from tether.errors import StoreUnwritable

# Polling starts fast (a counter lock is held for microseconds) and backs off so a long wait
# for a turn lock does not spin.
_FIRST_POLL_S = 0.005
_MAX_POLL_S = 0.05


_HINTS = {  # a full disk or quota: DiskFull (`disk_full.py`)
    errno.EFBIG: "the file is too large for its file system",
    errno.EROFS: "the file system is read-only: TETHER_HOME must be writable, or point it elsewhere",
    errno.EACCES: "permission denied: TETHER_HOME must be writable by this user",
    errno.EPERM: "permission denied: TETHER_HOME must be writable by this user",
    errno.EIO: "the disk reported an I/O error; what was being written may not be on disk",
}


def unwritable(path: Path | str, exc: OSError, doing: str = "write") -> StoreUnwritable | None:
    """The StoreUnwritable for `exc` when it is a disk-side refusal; None for other errors."""
    if isinstance(exc, StoreUnwritable):
        return exc
    full = disk_full(path, exc, doing)
    if full is not None:
        return full
    hint = _HINTS.get(exc.errno or 0)
    if hint is None:
        return None
    where = os.fspath(exc.filename) if exc.filename else os.fspath(path)
    why = exc.strerror or os.strerror(exc.errno or 0)
    return StoreUnwritable(f"cannot {doing} {where}: {why}; {hint}", exc.errno or 0, where)


def state_failure(exc: BaseException) -> str | None:
    """The message for a failure of tether's own state on disk (a full disk, a read-only
    TETHER_HOME, an I/O error, the effect store), naming the path and the cause; None for any
    other error, which its caller reports as before."""
    if isinstance(exc, StoreUnwritable):  # DiskFull, runtime/turns/checkpoints.EffectStoreUnavailable
        return str(exc)
    if isinstance(exc, OSError):
        converted = unwritable(exc.filename or "TETHER_HOME", exc)
        if converted is not None:
            return str(converted)
        where = f" ({exc.filename})" if exc.filename else ""
        return f"{exc.strerror or exc}{where}"
    return None



@contextlib.contextmanager
def writing(path: Path | str, doing: str = "write") -> Iterator[None]:
    """Turn a disk-side OSError in the body into StoreUnwritable naming `path` and the cause."""
    try:
        yield
    except OSError as exc:
        converted = unwritable(path, exc, doing)
        if converted is None or converted is exc:
            raise
        raise converted from exc


@contextlib.contextmanager
def exclusive_flock(path: Path, *, wait: float, busy: Callable[[], Exception]) -> Iterator[None]:
    """Hold an exclusive flock on `path` (created if absent) for the `with` body.

    If someone else holds it, poll for up to `wait` seconds, then raise `busy()`.
    """
    with writing(path, "open the lock file"):
        fd = _open_creating_parents(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC)
    try:
        deadline = time.monotonic() + max(0.0, wait)
        pause = _FIRST_POLL_S
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise busy() from None
                time.sleep(min(pause, left))
                pause = min(pause * 2, _MAX_POLL_S)
        try:
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
    finally:
        os.close(fd)


def _open_creating_parents(path: Path, flags: int) -> int:
    """`os.open(path, flags, 0o600)`, making the missing parent folders first only when the
    open says they are missing: a lock or state file is opened every turn, and a mkdir and a
    stat of its (nearly always existing) folder each time were as many syscalls as the open."""
    try:
        return os.open(path, flags, 0o600)
    except FileNotFoundError:
        path.parent.mkdir(parents=True, exist_ok=True)
        return os.open(path, flags, 0o600)


def fsync_dir(directory: Path) -> None:
    """Make a rename or create inside `directory` durable (the entry lives in the directory)."""
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _tmp_path(path: Path) -> Path:
    # Readers list `*.json` / open exact names, so a `.tmp-` sibling left by a crash is ignored.
    return path.with_name(f"{path.name}.tmp-{os.getpid()}-{os.urandom(4).hex()}")


def _write_tmp(path: Path, data: bytes) -> Path:
    with writing(path):
        return _write_tmp_unchecked(path, data)


def _write_tmp_unchecked(path: Path, data: bytes) -> Path:
    tmp = _tmp_path(path)
    fd = _open_creating_parents(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC)
    try:
        write_all(fd, data)
        os.fsync(fd)
    except BaseException:
        os.close(fd)
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    os.close(fd)
    return tmp


def write_json_atomic(path: Path, obj: Any) -> None:
    """`obj` as indented JSON in place of `path` (`write_atomic`), its directory made if needed."""
    write_atomic(path, orjson.dumps(obj, option=orjson.OPT_INDENT_2) + b"\n")


def write_atomic(path: Path, data: bytes) -> None:
    """Replace `path` with `data` so a reader (or a crash) sees the old bytes or the new, never
    a mix: temp file, fsync, rename, fsync the directory."""
    tmp = _write_tmp(path, data)
    with writing(path):
        try:
            os.replace(tmp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        fsync_dir(path.parent)


def create_exclusive(path: Path, data: bytes) -> bool:
    """Create `path` holding exactly `data` unless it already exists; True if this call made it.

    The file appears complete or not at all (hard link of a fsynced temp file), so two
    processes racing to create the same record or transcript header cannot leave half of one.
    """
    tmp = _write_tmp(path, data)
    with writing(path):
        return _link_into_place(tmp, path, data)


def _link_into_place(tmp: Path, path: Path, data: bytes) -> bool:
    try:
        try:
            os.link(tmp, path)
        except FileExistsError:
            return False
        except OSError:
            # Filesystems without hard links: O_EXCL still picks one winner; only a crash
            # between create and write could leave a short file there.
            try:
                fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
            except FileExistsError:
                return False
            try:
                write_all(fd, data)
                os.fsync(fd)
            finally:
                os.close(fd)
    finally:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
    fsync_dir(path.parent)
    return True


def write_all(fd: int, data: bytes) -> None:
    """os.write may write less than asked (signals, huge buffers); finish the job."""
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]
