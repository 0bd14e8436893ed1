"""The last messages of a transcript's active view, read back from the end of the file (issue 20
item 3): `tether messages list --limit N` costs about N entries, not the conversation's length.

Walking back, the first entry met for a message id decides its fate: a rollback means it is not
in the view; a message entry is its latest snapshot. Its place in the view is where that life of
the message began: the first entry, walking back, that did not replace a message already in
view (the replacement log, `replacements.py`, says which did). Every message placed so far took
its place after the one being placed, so places come out in view order, last first, and the walk
stops after N. Meeting the last compaction, the rest of the view is `[summary] + kept` as the
resume index records it; meeting the header, there is no more.

Anything the walk cannot prove (no log or resume index, a log with a gap or ending elsewhere
than the file, an entry it cannot read) gives None, and the caller reads the whole file, which
also reports damage with its line number. Damage in the history the walk never reaches goes
unseen, as with the resume index.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any, BinaryIO

import orjson

from tether.backends.local import resume_index
from tether.backends.local.backward import ShortRead, backward_lines, first_line_json
from tether.backends.local.damage import fused_records, torn_tail_damage
from tether.backends.local.replacements import Coverage
from tether.errors import ProtocolError
from tether.protocol.messages import Message, message_from_dict

_HEADER_MAX = 1 << 20
_LAST_BLOCK = 1 << 16


class _Unproven(Exception):
    """The walk cannot show its answer equals the full read's."""


def read_tail(path: Path, limit: int) -> list[Message] | None:
    """The last `limit` (at least 1) messages of the active view, exactly as a full read gives
    them, or None when reading back cannot prove that."""
    try:
        f = open(path, "rb")  # noqa: SIM115 - closed below
    except OSError:
        return None
    with f:
        try:
            return _walk(path, f, limit)
        except (_Unproven, ShortRead, OSError):
            return None


def _walk(path: Path, f: BinaryIO, limit: int) -> list[Message]:
    fd = f.fileno()
    st = os.fstat(fd)
    size = st.st_size
    lo = _header_end(fd, size)
    good, may_drop_last = _good_end(fd, lo, size)
    if good == lo:
        return []  # a header and at most a torn write: no entries
    log = Coverage.open(path, st.st_ino)
    if log is None:
        raise _Unproven
    try:
        placed: list[Message] = []  # view order, last first
        pending: dict[str, Message] = {}  # in view, latest snapshot known, place not yet found
        done: set[str] = set()  # placed, or not in the view
        seen: set[str] = set()  # entry ids walked
        checked = False
        for offset, line in backward_lines(fd, lo, good):
            try:
                entry = orjson.loads(line)
            except orjson.JSONDecodeError:
                if checked or not may_drop_last or fused_records(line):
                    raise _Unproven from None
                may_drop_last = False  # an unparsable last line is a torn write: left out
                good = offset
                continue
            if type(entry) is not dict or type(entry.get("id")) is not str:
                raise _Unproven
            if entry["id"] in seen:
                raise _Unproven  # a record written twice, or colliding ids: the full read judges
            seen.add(entry["id"])
            if not checked:
                # The log must end exactly at the last good entry, and name it.
                if log.end != good or log.last_entry_id != entry["id"]:
                    raise _Unproven
                checked = True
            kind = entry.get("type")
            if kind == "message":
                message = _message(entry, "message entry")
                if not log.covers(offset):
                    raise _Unproven
                mid = message.id
                if mid in done:
                    continue
                if offset in log.replaced:
                    pending.setdefault(mid, message)
                    continue
                placed.append(pending.pop(mid, message))
                done.add(mid)
                if len(placed) == limit:
                    return placed[::-1]
            elif kind == "rollback":
                gone = entry.get("messageId")
                if type(gone) is not str or gone in pending:
                    raise _Unproven  # a replaced message its own rollback removed: no sense
                done.add(gone)
            elif kind == "compaction":
                rest = _view_at_compaction(path, f, size, (entry["id"], offset, len(line)))
                for m in reversed(rest):
                    if m.id not in done:
                        placed.append(pending.pop(m.id, m))
                        done.add(m.id)
                break
            else:
                raise _Unproven
        if pending:
            raise _Unproven  # a replacement of a message the walk never found
        return placed[:limit][::-1]
    finally:
        log.close()


def _header_end(fd: int, size: int) -> int:
    found = first_line_json(fd, min(_HEADER_MAX, size))
    if found is None or type(found[0]) is not dict or found[0].get("type") != "session":
        raise _Unproven
    return found[1]


def _good_end(fd: int, lo: int, size: int) -> tuple[int, bool]:
    """Where the last LF-terminated line ends, and whether that line may be a torn write to
    leave out (only when nothing follows it). Bytes after the last LF are a torn write, or
    damage when they hold a whole entry and more (`damage.py`)."""
    if size == lo:
        return lo, False
    n = min(_LAST_BLOCK, size - lo)
    block = os.pread(fd, n, size - n)
    cut = block.rfind(b"\n")
    if cut < 0 and n < size - lo:
        raise _Unproven  # a torn line longer than a block: let the full read judge it
    torn = block[cut + 1 :]
    if torn and torn_tail_damage(torn):
        raise _Unproven
    return (size - n + cut + 1 if cut >= 0 else lo), not torn


def _message(entry: dict[str, Any], what: str) -> Message:
    try:
        return message_from_dict(entry.get("message"), what)
    except ProtocolError:
        raise _Unproven from None


def _view_at_compaction(
    path: Path, f: BinaryIO, size: int, where: resume_index.Where
) -> list[Message]:
    """The view right after the compaction entry at `where`, from the resume index."""
    seed = resume_index.read(path, f, size, os.fstat(f.fileno()).st_ino)
    if seed is None or seed.compaction != where:
        raise _Unproven
    summary = seed.summary
    return [summary, *(m for _, m in seed.kept if m.id != summary.id)]
