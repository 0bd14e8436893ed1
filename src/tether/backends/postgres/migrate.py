"""Copying the SQLite-held stores of a TETHER_HOME to PostgreSQL and back (the first part of
`tether store migrate`, issue 31 item 3): the durable inputs (`inputs.db`) and the effect
checkpoints (`checkpoints.db`), row for row, order and sequence numbers kept, each table checked
after the copy by a digest of its rows on both sides. A target table must be empty: a migration
never merges into a live store. The rest of a home (agents, conversations, transcripts, memory
repositories, every other file) is `migrate_home.py`'s, which calls this for these two."""

from __future__ import annotations

import contextlib
import hashlib
import sqlite3
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from tether.backends.postgres.connection import PgSession
from tether.errors import StoreError


class MigrationRefused(StoreError):
    """The copy cannot start (a missing source, a non-empty target) or did not verify."""


@dataclass(frozen=True, slots=True)
class Table:
    name: str
    file: str  # its SQLite database under TETHER_HOME
    columns: tuple[str, ...]
    times: frozenset[str]  # REAL epoch seconds in SQLite, timestamptz in PostgreSQL
    order: str
    identity: str | None = None  # a PostgreSQL identity column whose values are kept
    local: str | None = None  # its SQLite name, when the store's differs

    @property
    def sqlite(self) -> str:
        return self.local or self.name


TABLES = (
    Table(
        "inputs", "inputs.db",
        ("seq", "conversation", "item_id", "idempotency_key", "request_id", "source",
         "disposition", "state", "body", "owner", "user_message_id", "reason", "enqueued_at",
         "updated_at"),
        frozenset({"enqueued_at", "updated_at"}), "seq", identity="seq",
    ),
    Table(
        "effect_checkpoints", "checkpoints.db",
        ("conversation", "tool_call_id", "tool_name", "arguments", "phase", "result", "owner",
         "revision", "created_at", "updated_at"),
        frozenset({"created_at", "updated_at"}), "conversation, tool_call_id",
    ),
)



def _times(*names: str) -> frozenset[str]:
    return frozenset(names)


# The schedules (`cron.db`, runtime/cron/store.py) and the channel gateway's journal
# (`channels/gateway.db`, channels/journal.py), copied by `migrate_home.py`.
STATE_TABLES = (
    Table("cron_tasks", "cron.db", ("id", "agent_id", "status", "created_ms", "last_slot_ms",
          "terminal_ms", "data"), _times(), "id", local="tasks"),
    Table("cron_runs", "cron.db", ("seq", "task_id", "ts_ms", "record"), _times(), "seq",
          local="runs"),
    Table("cron_triggers", "cron.db", ("seq", "task_id", "requested_ms", "done_ms", "result"),
          _times(), "seq", local="triggers"),
    Table("cron_fires", "cron.db", ("key", "task_id", "slot_ms", "state", "owner",
          "conversation_id", "text", "reason", "missed", "updated_ms"), _times(), "key",
          local="fires"),
    Table("cron_leases", "cron.db", ("name", "owner", "expires_ms"), _times(), "name",
          local="leases"),
    Table("channel_inbox", "channels/gateway.db", ("seq", "channel", "account", "message_id",
          "body", "state", "received_at"), _times("received_at"), "seq", local="inbox"),
    Table("channel_outbox", "channels/gateway.db", ("tool_call_id", "channel", "account",
          "chat_id", "state", "result", "updated_at"), _times("updated_at"), "tool_call_id",
          local="outbox"),
    Table("channel_paused", "channels/gateway.db", ("chat",), _times(), "chat", local="paused"),
    Table("channel_runtimes", "channels/gateway.db", ("route", "agent_id", "conversation_id"),
          _times(), "route", local="runtimes"),
)


@dataclass(frozen=True, slots=True)
class Copied:
    table: str
    rows: int
    digest: str  # sha256 of the rows, the same on both sides


def _micros(value: Any) -> int:
    if isinstance(value, datetime):
        return round(value.timestamp() * 1_000_000)
    return round(float(value) * 1_000_000)


def _digest(table: Table, rows: Sequence[Sequence[Any]]) -> str:
    """The rows in a form both databases give alike (times as whole microseconds, bytes as
    bytes, text as text), in no particular order: the two sides may collate text differently."""
    hashes = []
    for row in rows:
        h = hashlib.sha256()
        for name, value in zip(table.columns, row, strict=True):
            if value is None:
                h.update(b"\x00N")
            elif name in table.times:
                h.update(b"\x00T%d" % _micros(value))
            elif isinstance(value, bytes | bytearray | memoryview):
                h.update(b"\x00B%d:" % len(value) + bytes(value))
            else:
                text = str(value).encode()
                h.update(b"\x00S%d:" % len(text) + text)
        hashes.append(h.digest())
    return hashlib.sha256(b"".join(sorted(hashes))).hexdigest()


@contextlib.contextmanager
def _sqlite(home: Path, table: Table, *, must_exist: bool) -> Iterator[sqlite3.Connection | None]:
    path = home / table.file
    if not path.exists():
        if must_exist:
            raise MigrationRefused(
                f"{path} does not exist: open the home with this tether once (it creates its"
                " stores), then copy into it"
            )
        yield None
        return
    conn = sqlite3.connect(path, isolation_level=None, timeout=10)
    try:
        yield conn
    finally:
        conn.close()


def _sqlite_rows(conn: sqlite3.Connection, table: Table) -> list[tuple[Any, ...]]:
    """The table's rows; none when this file predates the table (an older tether's store)."""
    if not conn.execute(
        "SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (table.sqlite,)
    ).fetchone():
        return []
    cols = ", ".join(table.columns)
    return conn.execute(f"SELECT {cols} FROM {table.sqlite} ORDER BY {table.order}").fetchall()


def _pg_rows(cur: Any, table: Table) -> list[tuple[Any, ...]]:
    cols = ", ".join(table.columns)
    return [tuple(r) for r in cur.execute(
        f"SELECT {cols} FROM {table.name} ORDER BY {table.order}"
    ).fetchall()]


def home_to_postgres(home: Path, session: PgSession) -> list[Copied]:
    """Copy `home`'s inputs and checkpoints into the (empty) store; one transaction for all,
    so a failed check leaves the store as it was."""
    with session.transaction("copy a TETHER_HOME into the store") as cur:
        return copy_tables_in(cur, home, TABLES)


def copy_tables_in(cur: Any, home: Path, tables: Sequence[Table]) -> list[Copied]:
    """`tables` of `home`'s SQLite files into the store's (empty) ones, inside the caller's
    transaction, each verified by its rows' digest."""
    done: list[Copied] = []
    for table in tables:
        with _sqlite(home, table, must_exist=False) as db:
            rows = _sqlite_rows(db, table) if db is not None else []
        _refuse_filled_pg(cur, table)
        cols = ", ".join(table.columns)
        marks = ", ".join(["%s"] * len(table.columns))
        override = " OVERRIDING SYSTEM VALUE" if table.identity else ""
        cur.executemany(
            f"INSERT INTO {table.name} ({cols}){override} VALUES ({marks})",
            [_to_pg(table, r) for r in rows],
        )
        if table.identity and rows:
            cur.execute(
                f"SELECT setval(pg_get_serial_sequence('{table.name}', '{table.identity}'),"
                f" (SELECT max({table.identity}) FROM {table.name}))"
            )
        done.append(_verified(table, rows, _pg_rows(cur, table)))
    return done


def postgres_to_home(session: PgSession, home: Path) -> list[Copied]:
    """Copy the store's inputs and checkpoints into `home`'s (existing, empty) databases; every
    target is checked before any is written."""
    for table in TABLES:
        with _sqlite(home, table, must_exist=True) as db:
            assert db is not None
            (have,) = db.execute(f"SELECT count(*) FROM {table.name}").fetchone()
            if have:
                raise MigrationRefused(
                    f"{home / table.file} already holds {have} rows in {table.name}:"
                    " a migration copies into an empty store only"
                )
    done: list[Copied] = []
    with session.transaction("copy the store into a TETHER_HOME") as cur:
        for table in TABLES:
            rows = _pg_rows(cur, table)
            with _sqlite(home, table, must_exist=True) as db:
                assert db is not None
                marks = ", ".join(["?"] * len(table.columns))
                db.execute("BEGIN IMMEDIATE")
                try:
                    db.executemany(
                        f"INSERT INTO {table.name} ({', '.join(table.columns)}) VALUES ({marks})",
                        [_to_sqlite(table, r) for r in rows],
                    )
                    done.append(_verified(table, rows, _sqlite_rows(db, table)))
                    db.execute("COMMIT")
                except BaseException:
                    db.execute("ROLLBACK")
                    raise
    return done


def _refuse_filled_pg(cur: Any, table: Table) -> None:
    row = cur.execute(f"SELECT count(*) FROM {table.name}").fetchone()
    if row and row[0]:
        raise MigrationRefused(
            f"the store's {table.name} already holds {row[0]} rows: a migration copies into an"
            " empty store only"
        )


def _to_pg(table: Table, row: Sequence[Any]) -> tuple[Any, ...]:
    return tuple(
        datetime.fromtimestamp(_micros(v) / 1_000_000, UTC) if n in table.times and v is not None
        else v
        for n, v in zip(table.columns, row, strict=True)
    )


def _to_sqlite(table: Table, row: Sequence[Any]) -> tuple[Any, ...]:
    return tuple(
        _micros(v) / 1_000_000 if n in table.times and v is not None
        else bytes(v) if isinstance(v, memoryview) else v
        for n, v in zip(table.columns, row, strict=True)
    )


def _verified(table: Table, source: Sequence[Sequence[Any]], copied: Sequence[Sequence[Any]]) -> Copied:
    want, got = _digest(table, source), _digest(table, copied)
    if len(source) != len(copied) or want != got:
        raise MigrationRefused(
            f"the copy of {table.name} did not verify ({len(source)} rows read, {len(copied)}"
            " written, or their contents differ); nothing was committed"
        )
    return Copied(table.name, len(source), want)
