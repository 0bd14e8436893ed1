"""Appending to a transcript durably: cut a torn tail first, write, fsync, and on any failure
leave nothing of the write on disk."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from tether.backends.local.locks import write_all, writing


def append_durably(path: Path, payload: bytes, good_size: int, *, torn: bool) -> os.stat_result:
    """Append `payload` to `path`, whose good bytes end at `good_size` (`torn`: bytes of a
    write a crash cut short follow, and are cut off first); returns the file's stat after."""
    with writing(path, "append to"):
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC)
        try:
            if torn:
                os.ftruncate(fd, good_size)  # repair: cut the torn last line
            try:
                write_all(fd, payload)
                os.fsync(fd)
            except OSError:
                # A full disk or a failed fsync: nothing of this write counts, so none of it
                # may stay (a part could hold whole lines a later read would believe). The
                # fsync is never retried and assumed to have worked.
                with contextlib.suppress(OSError):
                    os.ftruncate(fd, good_size)
                raise
            return os.fstat(fd)
        finally:
            os.close(fd)
