"""What in a transcript is damage rather than a torn write: a torn write is a prefix of one
entry, so a line that holds a whole entry plus more bytes (records fused by a lost newline) was
committed data, and must be reported, never cut off."""

from __future__ import annotations

import json

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
