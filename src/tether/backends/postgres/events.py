"""Cross-worker turn events and commands (issue 31): every frame a conversation's lease holder
broadcasts is a row of `fleet_events` keyed by (conversation, event_seq), written fenced by the
holder's token and notified on `tether_events`, so a worker whose clients follow the conversation
reads what it has not relayed yet, in order, once; an approval answered or an abort asked on
another worker is a row of `fleet_commands` notified on `tether_commands`, taken once by the
holder. A notification carries names only (conversation, worker): frames of any size go through
the rows, which are pruned after `KEEP_S`; `fleet_events_pruned` keeps, per conversation, the
highest event_seq pruned, so a client resuming from an older seq is told its replay is
incomplete (`read_replay`, `server/fleet_events.py`)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import orjson

EVENTS_CHANNEL = "tether_events"
COMMANDS_CHANNEL = "tether_commands"
KEEP_S = 600.0  # a client that was away longer resubscribes from its state frames instead
_DDL_LOCK = 31_031  # the advisory lock serialising this DDL between workers starting at once

DDL = """
CREATE TABLE IF NOT EXISTS fleet_events (
    conversation TEXT NOT NULL,
    seq BIGINT NOT NULL,
    worker TEXT NOT NULL,
    frame BYTEA NOT NULL,
    written_at TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp(),
    PRIMARY KEY (conversation, seq)
);
CREATE INDEX IF NOT EXISTS fleet_events_age ON fleet_events (written_at);
CREATE TABLE IF NOT EXISTS fleet_commands (
    id BIGSERIAL PRIMARY KEY,
    conversation TEXT NOT NULL,
    worker TEXT NOT NULL,
    command BYTEA NOT NULL,
    written_at TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp()
);
CREATE INDEX IF NOT EXISTS fleet_commands_of ON fleet_commands (conversation, id);
CREATE TABLE IF NOT EXISTS fleet_events_pruned (
    conversation TEXT PRIMARY KEY,
    through_seq BIGINT NOT NULL
);
"""


def ensure_tables(conn: Any) -> None:
    """Create the two tables if missing (idempotent; safe when workers start together)."""
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (_DDL_LOCK,))
        conn.execute(DDL)


def last_seq(cur: Any, conversation: str) -> int:
    """The highest event_seq written for the conversation (0: none)."""
    row = cur.execute(
        "SELECT coalesce(max(seq), 0) FROM fleet_events WHERE conversation = %s", (conversation,)
    ).fetchone()
    return int(row[0]) if row else 0


def publish(
    conn: Any, worker: str, frames: Sequence[tuple[str, int, int, dict[str, Any]]]
) -> int:
    """Write `frames` ((conversation, lease token, event_seq, frame) each, in order) in one
    transaction and notify each conversation once; a frame whose token is no longer the
    conversation's current one (this worker lost it) is dropped. The number written."""
    conversations = sorted({c for c, _, _, _ in frames})
    with conn.transaction(), conn.cursor() as cur:
        current = dict(cur.execute(
            "SELECT conversation, token FROM conversation_leases WHERE conversation = ANY(%s)"
            " FOR SHARE", (conversations,),
        ).fetchall())
        rows = [(c, seq, worker, orjson.dumps(frame))
                for c, token, seq, frame in frames if current.get(c) == token]
        if not rows:
            return 0
        cur.executemany(
            "INSERT INTO fleet_events (conversation, seq, worker, frame) VALUES (%s, %s, %s, %s)"
            " ON CONFLICT DO NOTHING", rows,
        )
        for c in sorted({r[0] for r in rows}):
            cur.execute("SELECT pg_notify(%s, %s)", (EVENTS_CHANNEL, f"{c}\t{worker}"))
    return len(rows)


def read_after(conn: Any, conversation: str, after: int) -> list[tuple[int, str, dict[str, Any]]]:
    """(event_seq, worker, frame) of the conversation after `after`, in order."""
    rows = conn.execute(
        "SELECT seq, worker, frame FROM fleet_events WHERE conversation = %s AND seq > %s"
        " ORDER BY seq", (conversation, after),
    ).fetchall()
    return [(int(seq), str(worker), orjson.loads(bytes(frame))) for seq, worker, frame in rows]


def read_replay(
    conn: Any, conversation: str, after: int
) -> tuple[list[tuple[int, str, dict[str, Any]]], int]:
    """What a client that saw up to `after` can still be sent: the rows after it, in order, and
    the highest event_seq pruned (0: none), which is above `after` when some are gone."""
    with conn.transaction():  # one snapshot: a prune between the two reads cannot hide a gap
        row = conn.execute(
            "SELECT through_seq FROM fleet_events_pruned WHERE conversation = %s", (conversation,)
        ).fetchone()
        return read_after(conn, conversation, after), int(row[0]) if row else 0


def send_command(cur: Any, conversation: str, worker: str, command: dict[str, Any]) -> None:
    """Record a command for the conversation's holder and wake it at the commit of `cur`'s
    transaction."""
    cur.execute(
        "INSERT INTO fleet_commands (conversation, worker, command) VALUES (%s, %s, %s)",
        (conversation, worker, orjson.dumps(command)),
    )
    cur.execute("SELECT pg_notify(%s, %s)", (COMMANDS_CHANNEL, conversation))


def take_commands(conn: Any, conversation: str) -> list[dict[str, Any]]:
    """The conversation's waiting commands, oldest first, taken (deleted) once."""
    rows = conn.execute(
        "DELETE FROM fleet_commands WHERE conversation = %s RETURNING id, command",
        (conversation,),
    ).fetchall()
    return [orjson.loads(bytes(command)) for _, command in sorted(rows)]


def prune(conn: Any, keep_s: float = KEEP_S) -> int:
    """Drop events and commands older than `keep_s`, noting per conversation the highest event_seq
    dropped; the number of rows dropped."""
    with conn.transaction(), conn.cursor() as cur:
        row = cur.execute(
            "WITH gone AS (DELETE FROM fleet_events WHERE written_at < clock_timestamp()"
            " - make_interval(secs => %s) RETURNING conversation, seq),"
            " noted AS (INSERT INTO fleet_events_pruned (conversation, through_seq)"
            " SELECT conversation, max(seq) FROM gone GROUP BY conversation"
            " ON CONFLICT (conversation) DO UPDATE SET through_seq ="
            " greatest(fleet_events_pruned.through_seq, excluded.through_seq) RETURNING 1)"
            " SELECT count(*) FROM gone", (keep_s,),
        ).fetchone()
        dropped = int(row[0]) if row else 0
        cur.execute("DELETE FROM fleet_commands WHERE written_at < clock_timestamp()"
                    " - make_interval(secs => %s)", (keep_s,))
        return dropped + int(cur.rowcount)
