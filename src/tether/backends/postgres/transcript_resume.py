"""Resuming a transcript on the PostgreSQL store from its last compaction (what the resume index
is to a file, `backends/local/resume_index.py`): the rows up to the last compaction are replayed
by their ids only — type, id, parentId and the ids an entry names, read from the `entry` column
in the database — which says which messages the view held right after it and which row holds
each one's latest snapshot; only those rows are read in full. A new reader of a long,
compacted conversation (a worker taking it over) so reads little more than what came after.

The id replay applies the view's rules (`backends/local/view.py`) to ids and finds the same
damage the full read does in what it sees (an unknown type, an entry without an id, the same
record twice, a compaction or rollback naming nothing); what it does not read (a message body
the compaction evicted) is not checked, as with the local index."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, NoReturn

import orjson

from tether.errors import ProtocolError
from tether.protocol.messages import Message, message_from_dict


@dataclass(frozen=True, slots=True)
class Seed:
    """The view right after the last compaction (row `seq`, entry `entry_id`)."""

    seq: int
    entry_id: str
    view: list[tuple[str, str, int, Message]]  # (message id, latest entry id, its row, message)
    entry_message: dict[str, str | None]  # every entry id up to it -> the message it carried
    parents: dict[str, Any]  # entry id -> parentId


def read_seed(cur: Any, key: str, corrupt: Callable[[int, str], NoReturn]) -> Seed | None:
    """The seed of transcript `key`, or None when it was never compacted. `corrupt(line, why)`
    raises for damage (line = row + 1, the header being line 1)."""
    found = cur.execute(
        "SELECT max(seq) FROM transcript WHERE conversation = %s"
        " AND entry->>'type' = 'compaction'", (key,),
    ).fetchone()
    if found is None or found[0] is None:
        return None
    last = int(found[0])
    rows = cur.execute(
        "SELECT seq, entry->>'type', entry->>'id', entry->'parentId', entry->'message'->>'id',"
        " entry->>'firstKeptEntryId', entry->>'messageId' FROM transcript"
        " WHERE conversation = %s AND seq <= %s ORDER BY seq", (key, last),
    ).fetchall()
    view: dict[str, tuple[str, int]] = {}  # message id -> (latest entry id, its row), in order
    carried: dict[str, str | None] = {}
    parents: dict[str, Any] = {}
    expected = 1
    for seq, kind, eid, parent, mid, first_kept, rolled in rows:
        line = int(seq) + 1
        if seq != expected:
            corrupt(line, f"row {expected} is missing (the next is {seq})")
        expected += 1
        if not isinstance(eid, str):
            corrupt(line, f"{kind} entry lacks a string id")
        if eid in parents and parents[eid] == parent:
            corrupt(line, f"entry id {eid!r} is recorded twice with the same parentId"
                          " (the same record written twice)")
        parents[eid] = parent
        if kind == "message":
            if not isinstance(mid, str):
                corrupt(line, "message entry lacks a message id")
            view[mid] = (eid, int(seq))  # a message in view keeps its place
            carried[eid] = mid
        elif kind == "compaction":
            if not isinstance(mid, str):
                corrupt(line, "compaction entry lacks a message id")
            kept_from = carried.get(first_kept) if first_kept is not None else None
            if first_kept is not None and kept_from not in view:
                corrupt(line, f"compaction firstKeptEntryId {first_kept!r} names no message in view")
            ids = list(view)
            kept = ids[ids.index(kept_from):] if kept_from is not None else []
            view = {mid: (eid, int(seq)), **{k: view[k] for k in kept if k != mid}}
            carried[eid] = mid
        elif kind == "rollback":
            if not isinstance(rolled, str):
                corrupt(line, "rollback entry lacks a string messageId")
            view.pop(rolled, None)
            carried[eid] = None
        else:
            corrupt(line, f"unknown entry type {kind!r}")
    wanted = sorted({seq for _eid, seq in view.values()})
    lines = dict(cur.execute(
        "SELECT seq, COALESCE(line, convert_to(entry::text || E'\\n', 'UTF8')) FROM transcript"
        " WHERE conversation = %s AND seq = ANY(%s)", (key, wanted),
    ).fetchall())
    seeded = []
    for mid, (eid, seq) in view.items():
        entry = orjson.loads(bytes(lines[seq]))
        what = "compaction entry" if entry.get("type") == "compaction" else "message entry"
        try:
            message = message_from_dict(entry.get("message"), what)
        except ProtocolError as exc:
            corrupt(seq + 1, str(exc))
        seeded.append((mid, eid, seq, message))
    return Seed(last, rows[-1][2], seeded, carried, parents)
