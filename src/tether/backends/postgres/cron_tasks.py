"""The schedules' definitions on the store: the scheduled tasks (`cron_tasks`), each task's run
log (`cron_runs`) and the manual trigger requests (`cron_triggers`), for a fleet whose workers do
not share a TETHER_HOME (`runtime/cron/fleet.py` uses it; `CronFires` keeps the fires).

The rows are laid out as `tether store migrate` copies a home's `cron.db` (`migrate_home.py`):
a task's `data` and a run's `record` are the JSON bytes the local store writes, so a migrated
home's schedules are served as they are, and copied back unchanged. Every change to a task is
made under its row lock (`SELECT … FOR UPDATE`): a fire holds it from the slot's check to the
commit of the settled slot, and a delivery's changes are applied to the row as it is at commit
(only the fields the delivery changed), so two workers changing one task lose neither change.
The run and trigger tables number their rows themselves (their `seq` has no default): the next
number is taken under a transaction-scoped advisory lock, so two workers never pick the same."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import orjson

from tether.backends.postgres.connection import PgSession, connect, store_errors
from tether.errors import StoreError, UsageError

_RUNS_LOCK = 0x7E7C_0001  # advisory lock keys: the next cron_runs / cron_triggers seq
_TRIGGERS_LOCK = 0x7E7C_0002
_AGENT_LOCKS = 0x7E7C  # (this, hashtext(agent)): one agent's adds, in the two-key space


def _task(data: Any) -> dict[str, Any]:
    return dict(orjson.loads(bytes(data)))


def _state(value: Any) -> str | None:
    return None if value is None else str(value)


@dataclass(slots=True)
class LockedTask:
    """A task row held under its row lock inside one transaction: `task` None when the task is
    gone. What is written through it commits with the transaction."""

    cur: Any
    task_id: str
    task: dict[str, Any] | None
    status: str
    last_slot_ms: int

    def settle(self, task: dict[str, Any], last_slot_ms: int, terminal_ms: int | None) -> None:
        """The task as the fire left it, its settled slot never moved back."""
        self.cur.execute(
            "UPDATE cron_tasks SET status = %s, last_slot_ms = GREATEST(last_slot_ms, %s),"
            " terminal_ms = %s, data = %s WHERE id = %s",
            (task["status"], last_slot_ms, terminal_ms, orjson.dumps(task), self.task_id),
        )

    def merge(
        self, before: dict[str, Any], after: dict[str, Any], now_ms: int, terminal: tuple[str, ...]
    ) -> dict[str, Any] | None:
        """Apply to the row as it is now only the fields `after` changed from `before` (what a
        delivery saw when it started): a change made meanwhile by another worker stays."""
        if self.task is None:
            return None
        merged = dict(self.task)
        merged.update({k: v for k, v in after.items() if before.get(k) != v})
        status = str(merged["status"])
        self.cur.execute(
            "UPDATE cron_tasks SET status = %s, terminal_ms = %s, data = %s WHERE id = %s",
            (status, now_ms if status in terminal else None, orjson.dumps(merged), self.task_id),
        )
        self.task = merged
        return merged

    def append_run(self, ts_ms: int, record: dict[str, Any], keep: int) -> None:
        """One run record, the oldest beyond `keep` of this task dropped."""
        append_run(self.cur, self.task_id, ts_ms, record, keep)


class TaskHold:
    """A task row share-locked on a connection of its own (`CronTasks.hold`); `task` None when
    the task is gone. `release` once, from any thread."""

    def __init__(self, conn: Any, task: dict[str, Any] | None) -> None:
        self._conn, self.task = conn, task

    def release(self) -> None:
        """End the hold: the connection closed (nothing was written), the lock with it."""
        conn, self._conn = self._conn, None
        if conn is not None:
            conn.close()


def append_run(cur: Any, task_id: str, ts_ms: int, record: dict[str, Any], keep: int) -> None:
    seq = _next_seq(cur, "cron_runs", _RUNS_LOCK)
    cur.execute(
        "INSERT INTO cron_runs (seq, task_id, ts_ms, record) VALUES (%s, %s, %s, %s)",
        (seq, task_id, ts_ms, orjson.dumps(record)),
    )
    cur.execute(
        "DELETE FROM cron_runs WHERE task_id = %s AND seq <= (SELECT seq FROM cron_runs"
        " WHERE task_id = %s ORDER BY seq DESC LIMIT 1 OFFSET %s)",
        (task_id, task_id, keep),
    )


def _next_seq(cur: Any, table: str, lock: int) -> int:
    """The next row number of `table`, held until the transaction ends (no other can take it)."""
    cur.execute("SELECT pg_advisory_xact_lock(%s)", (lock,))
    row = cur.execute(f"SELECT COALESCE(MAX(seq), 0) + 1 FROM {table}").fetchone()
    return int(row[0])


class CronTasks:
    """The scheduled tasks, their run logs and the trigger requests of the store behind
    `session`; tasks go in and come out as dicts (the reference's field names)."""

    def __init__(self, session: PgSession) -> None:
        self.session = session

    # --- tasks --------------------------------------------------------------------------------

    def add(self, task: dict[str, Any], created_ms: int, first_slot_ms: int, limit: int) -> None:
        """Insert a task; refuses one more active task for an agent that has `limit`, and an
        id taken. Adds for one agent are serialised, so two workers cannot both add the last."""
        agent = str(task["agent_id"])
        with self.session.transaction("add a scheduled task") as cur:
            cur.execute("SELECT pg_advisory_xact_lock(%s, hashtext(%s))", (_AGENT_LOCKS, agent))
            row = cur.execute(
                "SELECT COUNT(*) FROM cron_tasks WHERE agent_id = %s AND status = 'active'",
                (agent,),
            ).fetchone()
            active = int(row[0]) if row else 0
            if active >= limit:
                raise UsageError(
                    f"agent {agent} already has {active} active scheduled tasks (the limit is "
                    f"{limit}); delete one with `tether cron delete <id>`"
                )
            cur.execute(
                "INSERT INTO cron_tasks (id, agent_id, status, created_ms, last_slot_ms, data)"
                " VALUES (%s, %s, %s, %s, %s, %s) ON CONFLICT (id) DO NOTHING",
                (task["id"], agent, task["status"], created_ms, first_slot_ms, orjson.dumps(task)),
            )
            if cur.rowcount != 1:
                raise StoreError(f"a scheduled task {task['id']} already exists")

    def get(self, task_id: str) -> dict[str, Any] | None:
        with self.session.transaction("read a scheduled task") as cur:
            row = cur.execute("SELECT data FROM cron_tasks WHERE id = %s", (task_id,)).fetchone()
        return None if row is None else _task(row[0])

    def tasks(self, agent_id: str | None = None, status: str | None = None) -> list[dict[str, Any]]:
        sql, args = "SELECT data FROM cron_tasks WHERE TRUE", list[str]()
        if agent_id is not None:
            sql, args = sql + " AND agent_id = %s", [*args, agent_id]
        if status is not None:
            sql, args = sql + " AND status = %s", [*args, status]
        with self.session.transaction("list the scheduled tasks") as cur:
            rows = cur.execute(sql + " ORDER BY created_ms, id", args).fetchall()
        return [_task(r[0]) for r in rows]

    def active(self) -> list[tuple[dict[str, Any], int]]:
        with self.session.transaction("read the active scheduled tasks") as cur:
            rows = cur.execute(
                "SELECT data, last_slot_ms FROM cron_tasks WHERE status = 'active'"
                " ORDER BY created_ms, id"
            ).fetchall()
        return [(_task(data), int(slot)) for data, slot in rows]

    def delete(self, task_id: str) -> dict[str, Any] | None:
        """Remove a task (waiting for a fire holding its row) and cancel its pending triggers;
        its run log stays until the GC. None when there was no such task."""
        with self.session.transaction("delete a scheduled task") as cur:
            row = cur.execute(
                "DELETE FROM cron_tasks WHERE id = %s RETURNING data", (task_id,)
            ).fetchone()
            if row is None:
                return None
            cur.execute(
                "UPDATE cron_triggers SET done_ms = -1 WHERE task_id = %s AND done_ms IS NULL",
                (task_id,),
            )
        return _task(row[0])

    def update(
        self, task_id: str, build: Callable[[dict[str, Any]], dict[str, Any]],
        settled_ms: int | None,
    ) -> dict[str, Any] | None:
        """Replace a task by `build(current)`, read under its row lock; `settled_ms` marks the
        slots up to it settled. None when there is no such task."""
        with self.session.transaction("update a scheduled task") as cur:
            row = cur.execute(
                "SELECT data FROM cron_tasks WHERE id = %s FOR UPDATE", (task_id,)
            ).fetchone()
            if row is None:
                return None
            task = build(_task(row[0]))
            cur.execute(
                "UPDATE cron_tasks SET data = %s, status = %s,"
                " last_slot_ms = GREATEST(last_slot_ms, %s) WHERE id = %s",
                (orjson.dumps(task), task["status"], settled_ms or 0, task_id),
            )
        return task

    @contextlib.contextmanager
    def locked(self, task_id: str) -> Iterator[LockedTask]:
        """The task under its row lock for one transaction (held while the caller runs: it
        must not wait on anything else that needs this store)."""
        with self.session.transaction("hold a scheduled task") as cur:
            row = cur.execute(
                "SELECT data, status, last_slot_ms FROM cron_tasks WHERE id = %s FOR UPDATE",
                (task_id,),
            ).fetchone()
            if row is None:
                yield LockedTask(cur, task_id, None, "", 0)
            else:
                yield LockedTask(cur, task_id, _task(row[0]), str(row[1]), int(row[2]))

    def hold(self, task_id: str) -> TaskHold:
        """The task read under a share lock on a connection of its own, kept until `release`:
        while a fire of it is submitted (no transaction of the session open meanwhile), a
        delete or update from any worker waits, so once a delete returns the task reaches no
        conversation again. A worker that dies mid-submit drops its connection, and the lock."""
        conn = self._checkout()
        try:
            with store_errors(self.session.url, "hold a scheduled task"):
                conn.execute("BEGIN")
                row = conn.execute(
                    "SELECT data FROM cron_tasks WHERE id = %s FOR SHARE", (task_id,)
                ).fetchone()
        except BaseException:
            conn.close()
            raise
        return TaskHold(conn, None if row is None else _task(row[0]))

    def _checkout(self) -> Any:
        """A connection of its own (a fire is rare: opened for it, closed after, none left
        open when the store is dropped)."""
        conn = connect(self.session.url)
        try:
            with store_errors(self.session.url, "set up a connection to hold a task"):
                conn.execute("SET idle_in_transaction_session_timeout = "
                             f"{int(self.session.idle_in_transaction_ms)}")
        except BaseException:
            conn.close()
            raise
        return conn

    def gc(self, now_ms: int, older_than_ms: int) -> int:
        """Drop tasks that ended (fired, missed, cancelled) over `older_than_ms` ago, and their
        run logs; how many."""
        with self.session.transaction("forget ended scheduled tasks") as cur:
            gone = [str(r[0]) for r in cur.execute(
                "DELETE FROM cron_tasks WHERE terminal_ms IS NOT NULL AND terminal_ms < %s"
                " RETURNING id", (now_ms - older_than_ms,),
            ).fetchall()]
            if gone:
                cur.execute("DELETE FROM cron_runs WHERE task_id = ANY(%s)", (gone,))
        return len(gone)

    # --- run logs -------------------------------------------------------------------------------

    def runs(self, task_id: str, limit: int) -> list[tuple[dict[str, Any], str | None]]:
        """The task's latest run records, oldest first, each with its fire's state (None when
        the record names no fire, or the fire is forgotten). The fire keys are read here, not
        by the database: a record may hold a NUL, which PostgreSQL's JSON types refuse."""
        with self.session.transaction("read a task's run log") as cur:
            rows = cur.execute(
                "SELECT record FROM cron_runs WHERE task_id = %s ORDER BY seq DESC LIMIT %s",
                (task_id, limit),
            ).fetchall()
            records = [_task(r[0]) for r in reversed(rows)]
            keys = [str(r["fireKey"]) for r in records if r.get("fireKey")]
            states = dict(cur.execute(
                "SELECT key, state FROM cron_fires WHERE key = ANY(%s)", (keys,)
            ).fetchall()) if keys else {}
        return [(r, _state(states.get(str(r.get("fireKey"))))) for r in records]

    # --- manual triggers ------------------------------------------------------------------------

    def request_trigger(self, task_id: str, now_ms: int) -> tuple[int, str | None]:
        """A trigger request of an active task: its seq, and None; or 0 and the task's status
        (`""` when there is no such task), nothing written."""
        with self.session.transaction("request a task's trigger") as cur:
            row = cur.execute(
                "SELECT status FROM cron_tasks WHERE id = %s FOR SHARE", (task_id,)
            ).fetchone()
            if row is None or row[0] != "active":
                return 0, "" if row is None else str(row[0])
            seq = _next_seq(cur, "cron_triggers", _TRIGGERS_LOCK)
            cur.execute(
                "INSERT INTO cron_triggers (seq, task_id, requested_ms) VALUES (%s, %s, %s)",
                (seq, task_id, now_ms),
            )
        return seq, None

    def pending_triggers(self) -> list[tuple[int, str]]:
        with self.session.transaction("read the pending triggers") as cur:
            rows = cur.execute(
                "SELECT seq, task_id FROM cron_triggers WHERE done_ms IS NULL ORDER BY seq"
            ).fetchall()
        return [(int(s), str(t)) for s, t in rows]

    def finish_trigger(self, seq: int, now_ms: int, result: dict[str, Any]) -> None:
        with self.session.transaction("finish a trigger") as cur:
            cur.execute(
                "UPDATE cron_triggers SET done_ms = %s, result = %s WHERE seq = %s",
                (now_ms, orjson.dumps(result), seq),
            )

    def trigger_result(self, seq: int) -> tuple[bool, dict[str, Any] | None]:
        """(done, its result): result None for a trigger its task's deletion cancelled."""
        with self.session.transaction("read a trigger's result") as cur:
            row = cur.execute(
                "SELECT done_ms, result FROM cron_triggers WHERE seq = %s", (seq,)
            ).fetchone()
        if row is None or row[0] is None:
            return False, None
        return True, None if row[1] is None else _task(row[1])
