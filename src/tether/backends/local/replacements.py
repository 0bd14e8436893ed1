"""The replacement log beside a transcript (`messages.jsonl.replaced`): which message entries
replaced a message already in the active view, so a reader walking back from the end of the
file (`tail.py`) knows where each message took its place without replaying the history.

Why it is needed: a message entry either joins the end of the view or replaces a message that
is already there, in place (reference §4.3), and nothing in the entry says which. Read forwards
that is plain; read backwards, any entry could be a new snapshot of a message first written a
hundred thousand lines earlier, and only this log says it is not.

Format: a header line `{"v":1,"inode":<the transcript's>,"from":<offset>}`, then one record per
append, `[start,end,lastEntryId,offset,...]`: the transcript's bytes [start, end) are whole
entries, the one ending at `end` has id `lastEntryId`, and each `offset` starts a message entry
that replaced a message in view. Records are contiguous from `from` (the end of the header or of
the last compaction entry: before it, the resume index describes the view).

Derived data, written best effort after each transcript append: a reader trusts it only when its
records run without a gap from where the walk needs them to the transcript's last good entry
(whose id must match); anything else costs the full read the log would have saved.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import orjson

from tether.backends.local.backward import ShortRead, backward_lines, first_line_json
from tether.backends.local.locks import write_all, write_atomic

VERSION = 1
_HEAD_MAX = 4096


def log_path(transcript: Path) -> Path:
    return transcript.with_name(transcript.name + ".replaced")


def _header(fd: int) -> tuple[dict[str, Any], int] | None:
    """The log's header and where its records start, or None when it is not this version's."""
    found = first_line_json(fd, _HEAD_MAX)
    if found is None:
        return None
    doc, end = found
    if type(doc) is not dict or doc.get("v") != VERSION or type(doc.get("from")) is not int:
        return None
    return doc, end


def _record(line: bytes) -> tuple[int, int, str, list[int]] | None:
    try:
        row = orjson.loads(line)
    except orjson.JSONDecodeError:
        return None
    if type(row) is not list or len(row) < 3:
        return None
    start, end, eid, *offsets = row
    if type(start) is not int or type(end) is not int or type(eid) is not str or start > end:
        return None
    if any(type(o) is not int or not start <= o < end for o in offsets):
        return None
    return start, end, eid, offsets


class Coverage:
    """The log of one transcript, read back from its newest record as far as a walk needs."""

    def __init__(self, fd: int, lo: int, hi: int, cover_from: int) -> None:
        self._fd = fd
        self._lines = backward_lines(fd, lo, hi)
        self.cover_from = cover_from
        self.replaced: set[int] = set()
        self.end = -1
        self.last_entry_id = ""
        self.covered = -1  # records read so far cover [covered, end)
        self.broken = False

    @classmethod
    def open(cls, transcript: Path, inode: int) -> Coverage | None:
        """The log beside `transcript` with its newest record read, or None if there is no
        usable one. The log stays open for reading back (`close()`)."""
        try:
            fd = os.open(log_path(transcript), os.O_RDONLY | os.O_CLOEXEC)
        except OSError:
            return None
        try:
            size = os.fstat(fd).st_size
            header = _header(fd)
            if header is None or header[0].get("inode") != inode:
                raise ValueError
            doc, lo = header
            if size <= lo or os.pread(fd, 1, size - 1) != b"\n":
                raise ValueError  # no record, or a torn one: the writer stopped mid-line
            coverage = cls(fd, lo, size, doc["from"])
            newest = coverage._next()
            if newest is None:
                raise ValueError
            coverage.end, coverage.last_entry_id = newest[1], newest[2]
            return coverage
        except (OSError, ValueError, ShortRead):
            os.close(fd)
            return None

    def close(self) -> None:
        with contextlib.suppress(OSError):
            os.close(self._fd)

    def _next(self) -> tuple[int, int, str, list[int]] | None:
        """Take in the next older record; None when there is none or it does not fit."""
        try:
            _, line = next(self._lines)
        except (StopIteration, ShortRead):
            return None
        row = _record(line)
        if row is None or (self.covered >= 0 and row[1] != self.covered):
            return None  # damaged, or a gap: an append nobody logged
        self.covered = row[0]
        self.replaced.update(row[3])
        return row

    def covers(self, offset: int) -> bool:
        """Whether the log says, for every message entry from `offset` on, if it replaced one."""
        while not self.broken and self.covered > offset:
            if self._next() is None:
                self.broken = True
        return not self.broken and self.covered <= offset and offset >= self.cover_from


def _last_end(path: Path, inode: int) -> int | None:
    """The `end` of the log's newest record, if the log is for `inode` and ends with a whole one."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        size = os.fstat(fd).st_size
        header = _header(fd)
        if header is None or header[0].get("inode") != inode or size == 0:
            return None
        tail = os.pread(fd, min(size, _HEAD_MAX), max(0, size - _HEAD_MAX))
        if not tail.endswith(b"\n"):
            return None
        start = tail.rfind(b"\n", 0, len(tail) - 1) + 1
        row = _record(tail[start:-1])
        return row[1] if row is not None else None
    except OSError:
        return None
    finally:
        os.close(fd)


def record(
    transcript: Path,
    inode: int,
    *,
    known_end: int | None,
    start: int,
    end: int,
    last_entry_id: str,
    new: Sequence[int],
    cover_from: int,
    every: Sequence[int],
) -> int | None:
    """Log the append of [start, end) whose replacing entries are `new`; returns the end the
    log now covers (None if it could not be written). When the log does not end where this
    append starts (missing, another inode, an unlogged writer), it is rewritten whole from
    `cover_from` with `every` replacing entry the writer knows since then."""
    path = log_path(transcript)
    if known_end != start:
        known_end = _last_end(path, inode)
    try:
        if known_end == start and cover_from <= start:
            row = orjson.dumps([start, end, last_entry_id, *new]) + b"\n"
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC)
            try:
                write_all(fd, row)
            finally:
                os.close(fd)
        else:
            head = orjson.dumps({"v": VERSION, "inode": inode, "from": cover_from})
            row = orjson.dumps([cover_from, end, last_entry_id, *every])
            write_atomic(path, head + b"\n" + row + b"\n")
    except OSError:
        # A log that may hold part of a record must not be trusted; without it, reads are full.
        with contextlib.suppress(OSError):
            os.unlink(path)
        return None
    return end
