"""The bytes of a transcript line as tether writes them (reference §4.3): the session header and
the common keys every entry opens with."""

from __future__ import annotations

import os
import uuid
from collections.abc import Callable, Mapping, Sequence
from datetime import UTC, datetime

import orjson

from tether.protocol.messages import Message, message_to_dict

SESSION_VERSION = 3


def entry_timestamp() -> str:
    # Milliseconds and `Z`, like the reference writer's `Date.toISOString()`.
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def session_header(cwd: str | None) -> bytes:
    """A new file's first line (`cwd` defaults to the process's)."""
    header = {
        "type": "session",
        "version": SESSION_VERSION,
        "id": str(uuid.uuid4()),
        "timestamp": entry_timestamp(),
        "cwd": cwd if cwd is not None else os.getcwd(),
    }
    return orjson.dumps(header) + b"\n"


def entry_bytes(kind: str, eid: str, parent: str | None, fields: bytes) -> bytes:
    """One LF-terminated entry: the common keys, then `fields` (JSON object members)."""
    head = orjson.dumps(
        {"type": kind, "id": eid, "parentId": parent, "timestamp": entry_timestamp()}
    )
    return head[:-1] + b"," + fields + b"}\n"


def message_entries(
    messages: Sequence[Message], view: Mapping[str, Message], parent: str | None,
    new_id: Callable[[set[str]], str],
) -> list[tuple[str, Message, bytes]]:
    """One step boundary's message entries, chained from `parent`: one per message whose
    snapshot differs from the active view's (an unchanged re-persist writes nothing; a message
    given twice is compared with its first snapshot here), as (entry id, message, line)."""
    snapshot: dict[str, bytes] = {}
    out: list[tuple[str, Message, bytes]] = []
    taken: set[str] = set()
    for message in messages:
        body = orjson.dumps(message_to_dict(message))
        if message.id in snapshot:
            before: bytes | None = snapshot[message.id]
        elif message.id in view:
            before = orjson.dumps(message_to_dict(view[message.id]))
        else:
            before = None
        if body == before:
            continue
        snapshot[message.id] = body
        eid = new_id(taken)
        out.append((eid, message, entry_bytes("message", eid, parent, b'"message":' + body)))
        parent = eid
    return out
