"""SQLite connections for tether's small databases (the cron store, the channels journal) whose
statements, when the disk under the database is full, raise `DiskFull` naming the database,
the disk and the space left instead of SQLite's bare "database or disk is full" or "disk I/O
error" (`disk_full.py` says which errors those are). Every other error is SQLite's own, so
callers that catch `sqlite3.IntegrityError` or a busy `OperationalError` keep doing so."""

from __future__ import annotations

import sqlite3
from pathlib import Path
from typing import Any

from tether.backends.local.disk_full import disk_full


class _NamingConnection(sqlite3.Connection):
    doing = "write"

    def __init__(self, database: Any, *args: Any, **kwargs: Any) -> None:
        super().__init__(database, *args, **kwargs)
        self.database = str(database)

    def execute(self, sql: str, parameters: Any = (), /) -> sqlite3.Cursor:
        try:
            return super().execute(sql, parameters)
        except sqlite3.Error as exc:
            self._name_a_full_disk(exc)
            raise

    def executescript(self, sql_script: str, /) -> sqlite3.Cursor:
        try:
            return super().executescript(sql_script)
        except sqlite3.Error as exc:
            self._name_a_full_disk(exc)
            raise

    def _name_a_full_disk(self, exc: sqlite3.Error) -> None:
        full = disk_full(self.database, exc, self.doing)
        if full is not None:
            raise full from exc


def connect(path: Path, doing: str, **kwargs: Any) -> sqlite3.Connection:
    """`sqlite3.connect(path, **kwargs)` whose `execute`/`executescript` name a full disk;
    `doing` completes "cannot … <path>" in the message (e.g. "write the schedule store")."""
    conn = sqlite3.connect(path, factory=_NamingConnection, **kwargs)
    conn.doing = doing
    return conn
