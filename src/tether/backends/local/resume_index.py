"""The resume index beside a transcript (`messages.jsonl.resume`): where the active view after the
last compaction lives in the file, so resuming reads those entries and the tail, not the history.

After a compaction the view is `[summary] + kept messages` (reference §4.3), and everything
before the compaction entry matters only through those kept messages' latest entries. The index
names them (message id, entry id, byte offset, length), plus the compaction entry itself, the
file's inode and the compaction's line number (for error messages). Resuming preads the header,
the compaction entry and each kept entry, checks every one is the whole line it claims to be
(ids match, LF-terminated, a LF before it), then replays the file from the end of the compaction
entry as usual.

The index is derived data: tether writes it after each compaction (and once after a full read
that found a compaction but no valid index), atomically and best effort. A missing, stale or
mismatching index only costs the full read it would have saved; it can never change the view.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import orjson

from tether.backends.local.locks import write_atomic
from tether.errors import ProtocolError
from tether.protocol.messages import Message, message_from_dict

VERSION = 1
_HEADER_MAX = 1 << 20  # a session header is a few hundred bytes

# (entry id, byte offset, length without the LF)
Where = tuple[str, int, int]


def index_path(transcript: Path) -> Path:
    return transcript.with_name(transcript.name + ".resume")


@dataclass(frozen=True, slots=True)
class Seed:
    """What the index lets a fresh reader start from, every part checked against the file."""

    header_line: bytes
    summary: Message
    compaction: Where
    compaction_line: int
    kept: list[tuple[Where, Message]]

    @property
    def end(self) -> int:
        """The offset just past the compaction entry's LF: replay continues there."""
        return self.compaction[1] + self.compaction[2] + 1


def write(
    transcript: Path, inode: int, compaction: Where, line: int, kept: list[tuple[str, Where]]
) -> None:
    """Record the view after the compaction at `compaction` (best effort: failing costs speed)."""
    doc = {
        "v": VERSION,
        "inode": inode,
        "compaction": [*compaction, line],
        "kept": [[mid, *where] for mid, where in kept],
    }
    with contextlib.suppress(OSError):
        write_atomic(index_path(transcript), orjson.dumps(doc))


def read(transcript: Path, f: BinaryIO, size: int, inode: int) -> Seed | None:
    """The seed for `f` (the open transcript, `size` bytes, `inode`), or None when there is no
    index or any part of it does not match the file."""
    try:
        doc = orjson.loads(index_path(transcript).read_bytes())
        if doc.get("v") != VERSION or doc.get("inode") != inode:
            return None
        ceid, coff, clen, cline = doc["compaction"]
        kept_rows = [(str(m), (str(e), int(o), int(n))) for m, e, o, n in doc["kept"]]
        compaction: Where = (str(ceid), int(coff), int(clen))
    except (OSError, orjson.JSONDecodeError, AttributeError, KeyError, TypeError, ValueError):
        return None
    if compaction[1] + compaction[2] + 1 > size:
        return None
    fd = f.fileno()
    head = os.pread(fd, min(_HEADER_MAX, size), 0)
    newline = head.find(b"\n")
    if newline < 0:
        return None
    entry = _entry_at(fd, compaction, "compaction")
    if entry is None:
        return None
    first_kept = entry.get("firstKeptEntryId")
    if first_kept != (kept_rows[0][1][0] if kept_rows else None):
        return None
    try:
        summary = message_from_dict(entry.get("message"), "compaction entry")
        kept: list[tuple[Where, Message]] = []
        for mid, where in kept_rows:
            if where[1] >= compaction[1]:
                return None
            # A kept message's latest entry is a message entry, or the compaction entry of an
            # earlier summary that this compaction kept.
            kept_entry = _entry_at(fd, where, "message", "compaction")
            if kept_entry is None:
                return None
            message = message_from_dict(kept_entry.get("message"), "message entry")
            if message.id != mid:
                return None
            kept.append((where, message))
    except ProtocolError:
        return None
    return Seed(head[:newline], summary, compaction, int(cline), kept)


def _entry_at(fd: int, where: Where, *kinds: str) -> dict[str, Any] | None:
    """The entry of one of `kinds` and id `where[0]` that is exactly one line at `where`."""
    eid, offset, length = where
    if offset <= 0 or length <= 0:
        return None
    raw = os.pread(fd, length + 2, offset - 1)
    if len(raw) != length + 2 or raw[0:1] != b"\n" or raw[-1:] != b"\n":
        return None
    try:
        entry = orjson.loads(raw[1:-1])
    except orjson.JSONDecodeError:
        return None
    if type(entry) is not dict or entry.get("type") not in kinds or entry.get("id") != eid:
        return None
    return entry
