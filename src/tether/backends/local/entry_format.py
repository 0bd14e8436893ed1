"""The bytes of a transcript line as tether writes them (reference §4.3): the session header and
the common keys every entry opens with."""

from __future__ import annotations

import os
import uuid
from datetime import UTC, datetime

import orjson

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
