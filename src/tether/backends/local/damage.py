"""What in a transcript is damage rather than a torn write, and how damage is described.

A torn write is a prefix of one entry, possibly followed by NUL bytes (a file system that
crashed after growing the file but before writing its data leaves the new blocks zero-filled).
So a line that holds a whole entry plus more bytes (records fused by a lost newline) was
committed data, and must be reported, never cut off; so must NUL bytes inside a committed line
and a record written twice (the same entry id and parentId as an earlier entry)."""

from __future__ import annotations

import json
from pathlib import Path

import orjson

_ENTRY_TYPES = ("session", "message", "compaction", "rollback")


def fused_records(line: bytes) -> str | None:
    """Why `line` is damage rather than a torn write, if it holds a complete entry followed or
    preceded by more bytes (two records fused by a lost newline); None otherwise. A line that is
    exactly one entry is not fused (a write cut just before its newline was never acknowledged).
    """
    text = line.decode("utf-8", errors="replace")
    decoder = json.JSONDecoder()
    start = text.find('{"type":')
    while start != -1:
        try:
            entry, stop = decoder.raw_decode(text, start)
        except ValueError:
            start = text.find('{"type":', start + 1)
            continue
        whole = start == 0 and not text[stop:].strip()
        # Only a whole entry counts: a torn entry's prefix holds complete content parts
        # ({"type":"text",...}), which are not records.
        is_entry = isinstance(entry, dict) and entry.get("type") in _ENTRY_TYPES
        if is_entry and isinstance(entry.get("id"), str) and not whole:
            where = f"column {stop + 1}" if start == 0 else f"column {start + 1}"
            return (
                f"two JSON documents on one line: a {entry.get('type')!r} entry and more bytes "
                f"meet at {where} (a lost newline?)"
            )
        start = text.find('{"type":', stop)
    return None


def torn_tail_damage(tail: bytes) -> str | None:
    """Why the bytes after the last newline are damage rather than a torn write (`fused_records`),
    after the NUL padding a zero-filled block leaves (where even the newline may have been)."""
    return fused_records(tail.rstrip(b"\0"))


def nul_run(line: bytes) -> str | None:
    """The first run of NUL bytes in a committed line, described; None when there is none.
    JSON never holds a raw NUL, so they are a block the file system zero-filled in a crash."""
    start = line.find(b"\0")
    if start < 0:
        return None
    stop = start
    while stop < len(line) and line[stop] == 0:
        stop += 1
    return (
        f"{stop - start} NUL byte{'s' if stop - start > 1 else ''} at column {start + 1} "
        "(a block the file system zero-filled after a crash?)"
    )


def duplicated_record(path: Path, entry: dict[str, object], offset: int) -> str | None:
    """Why the entry starting at byte `offset`, whose id an earlier entry already has, is
    damage: an earlier entry has the same parentId too, so the same record was written twice.
    None when every parentId differs: then the ids collided (8 random hex digits; a writer that
    resumed from the resume index cannot see every older id), and each entry stands.

    Only called on a repeated id, so it may read the file again to find the earlier entry."""
    eid = entry.get("id")
    needle = orjson.dumps(eid)
    with open(path, "rb") as f:
        head = f.read(offset)
    for number, raw in enumerate(head.split(b"\n")[:-1], start=1):
        if needle not in raw:
            continue
        try:
            earlier = orjson.loads(raw)
        except orjson.JSONDecodeError:
            continue
        if (
            type(earlier) is dict
            and earlier.get("type") != "session"
            and earlier.get("id") == eid
            and earlier.get("parentId") == entry.get("parentId")
        ):
            return (
                f"entry id {eid!r} is recorded twice, on line {number} and again here with the "
                "same parentId (a duplicated record)"
            )
    return None
