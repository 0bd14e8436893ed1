"""Which workers are alive: a worker is its database session. It registers the pid and start
time of its backend; it is alive while that backend is (`pg_stat_activity`), so `kill -9` of a
worker ends its presence as soon as the server sees the socket close, with no clock involved.
A stopped (SIGSTOP) worker stays present: conversation leases expire for that case.

What this needs of a deployment: every worker connects as the same role (or one granted
`pg_read_all_stats`), since PostgreSQL hides other roles' `backend_start`; and directly or
through a session-mode pooler, never a transaction-mode one (a session must be one worker's,
for presence and for LISTEN)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import psycopg

# SQL true when worker `w` (a column or parameter) has a live session. The pid alone could be
# reused by a later backend; the pair with its start time cannot.
ALIVE = (
    "EXISTS (SELECT 1 FROM workers w JOIN pg_stat_activity a ON a.pid = w.backend_pid"
    " AND a.backend_start = w.backend_start WHERE w.worker = {w})"
)


def register(conn: psycopg.Connection[Any], worker: str) -> None:
    """Record `conn`'s backend as `worker`'s presence (a restart under the same name replaces
    the dead session's row). Rows of dead workers are dropped on the way: a missing row means
    dead too, so the table holds about as many rows as there are live workers."""
    conn.execute("DELETE FROM workers o WHERE NOT " + ALIVE.format(w="o.worker"))
    conn.execute(
        "INSERT INTO workers (worker, backend_pid, backend_start, seen_at)"
        " SELECT %s, pid, backend_start, clock_timestamp() FROM pg_stat_activity"
        " WHERE pid = pg_backend_pid()"
        " ON CONFLICT (worker) DO UPDATE SET backend_pid = EXCLUDED.backend_pid,"
        " backend_start = EXCLUDED.backend_start, seen_at = EXCLUDED.seen_at",
        (worker,),
    )


def alive(conn: psycopg.Connection[Any], worker: str) -> bool:
    row = conn.execute("SELECT " + ALIVE.format(w="%s"), (worker,)).fetchone()
    return bool(row and row[0])
