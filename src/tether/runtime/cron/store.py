"""The schedule store, `$TETHER_HOME/cron.db` (SQLite, WAL): tasks, each task's run log, the
fires on their way into a conversation, manual trigger requests, the scheduler lease and each
scheduler's presence, so several processes (the CLI, two App Servers) share one consistent view.

A fire is claimed inside one write transaction (`firing`): the task is re-read, checked still
active and not yet fired for that slot, and the slot, with a `fires` row saying `claimed` (its
key, its conversation and the exact prompt), commits. It is then submitted inside a second write
transaction (`delivering`) that re-reads the task, so a `delete` from another process waits for
it, and once a delete returns the task can never reach a conversation again; the task update,
the run record and the fire's new state (`queued`, or `failed`) commit together. A fire's states:
claimed -> queued -> started (found in the conversation after a takeover) -> done | failed, or
cancelled (its task deleted before it was submitted). Two schedulers never fire one slot twice,
and the holder that outlives a dead one finishes the dead one's `claimed`/`queued` fires.
"""

from __future__ import annotations

import contextlib
import os
import sqlite3
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import orjson

from tether.backends.local import sqlite_full
from tether.errors import NotFound, StoreError, UsageError
from tether.runtime.cron.fires import FIRE_COLUMNS, Delivery, Fire, FireClaim, fire_claim

MAX_ACTIVE_PER_AGENT = 50
RUN_LOG_KEEP = 2000  # records kept per task (the reference trims its JSONL to 2000 lines)
TERMINAL = ("fired", "missed", "cancelled")
LEASE = "scheduler"
_PRESENCE = "presence:"  # + owner: a scheduler that is alive (its fires are left to it)

_SCHEMA = """
CREATE TABLE IF NOT EXISTS tasks (
    id TEXT PRIMARY KEY,
    agent_id TEXT NOT NULL,
    status TEXT NOT NULL,
    created_ms INTEGER NOT NULL,
    last_slot_ms INTEGER NOT NULL,    -- the latest slot fired or settled (no slot fires twice)
    terminal_ms INTEGER,               -- when it became fired/missed/cancelled (for the GC)
    data BLOB NOT NULL                 -- the task's JSON, the reference's field names
);
CREATE INDEX IF NOT EXISTS tasks_agent ON tasks (agent_id, status);
CREATE TABLE IF NOT EXISTS runs (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    task_id TEXT NOT NULL,
    ts_ms INTEGER NOT NULL,
    record BLOB NOT NULL
);
CREATE INDEX IF NOT EXISTS runs_task ON runs (task_id, seq);
CREATE TABLE IF NOT EXISTS triggers (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    task_id TEXT NOT NULL,
    requested_ms INTEGER NOT NULL,
    done_ms INTEGER,
    result BLOB
);
CREATE TABLE IF NOT EXISTS fires (
    key TEXT PRIMARY KEY,              -- cron:<task>:<slot ms> (manual: cron:<task>:manual:<ms>)
    task_id TEXT NOT NULL,
    slot_ms INTEGER NOT NULL,
    state TEXT NOT NULL,               -- claimed, queued, started, done, failed, cancelled
    owner TEXT NOT NULL,               -- the scheduler that moves it on
    conversation_id TEXT NOT NULL,     -- as the task says, then the one a `new` task was given
    text BLOB NOT NULL,                -- the prompt, fixed at the claim (a re-fire sends it again)
    reason TEXT NOT NULL,
    missed INTEGER NOT NULL,
    updated_ms INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS fires_open ON fires (state);
CREATE TABLE IF NOT EXISTS leases (
    name TEXT PRIMARY KEY,
    owner TEXT NOT NULL,
    expires_ms INTEGER NOT NULL
);
"""


class CronStore:
    # Whether the scheduler calls this store off the event loop (in a thread): False here, as a
    # SQLite connection stays in the thread that opened it (and a local call does not wait on
    # a network); the fleet's store, whose every call is a database round trip, says True.
    offloop = False

    def __init__(self, home: Path) -> None:
        self.path = Path(home) / "cron.db"
        self._conn: sqlite3.Connection | None = None

    @property
    def db(self) -> sqlite3.Connection:
        if self._conn is None:
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise StoreError(
                    f"cannot open the schedule store {self.path}: {exc.strerror or exc}"
                ) from None
            fresh = not self.path.exists()
            try:
                conn = sqlite_full.connect(  # a full disk is DiskFull, naming it
                    self.path, "write the schedule store", isolation_level=None, timeout=15
                )
                conn.execute("PRAGMA journal_mode=WAL")
                conn.execute("PRAGMA synchronous=FULL")
                conn.executescript(_SCHEMA)
            except sqlite3.Error as exc:
                raise StoreError(f"cannot open the schedule store {self.path}: {exc}") from None
            if fresh:
                with contextlib.suppress(OSError):
                    os.chmod(self.path, 0o600)  # prompts may be private
            self._conn = conn
        return self._conn

    def exists(self) -> bool:
        """Whether the store holds anything yet (a reader need not create cron.db)."""
        return self.path.exists()

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None

    @contextlib.contextmanager
    def _write(self) -> Iterator[sqlite3.Connection]:
        db = self.db
        try:
            db.execute("BEGIN IMMEDIATE")
        except sqlite3.OperationalError as exc:
            raise StoreError(f"the schedule store {self.path} is busy ({exc}); try again") from None
        try:
            yield db
        except BaseException:
            db.execute("ROLLBACK")
            raise
        db.execute("COMMIT")

    # --- tasks --------------------------------------------------------------------------------

    def add(self, task: dict[str, Any], created_ms: int, first_slot_ms: int) -> dict[str, Any]:
        """Insert a task; refuses a 51st active task for one agent."""
        with self._write() as db:
            (active,) = db.execute(
                "SELECT COUNT(*) FROM tasks WHERE agent_id = ? AND status = 'active'",
                (task["agent_id"],),
            ).fetchone()
            if active >= MAX_ACTIVE_PER_AGENT:
                raise UsageError(
                    f"agent {task['agent_id']} already has {active} active scheduled tasks (the "
                    f"limit is {MAX_ACTIVE_PER_AGENT}); delete one with `tether cron delete <id>`"
                )
            try:
                db.execute(
                    "INSERT INTO tasks (id, agent_id, status, created_ms, last_slot_ms, data)"
                    " VALUES (?, ?, ?, ?, ?, ?)",
                    (
                        task["id"],
                        task["agent_id"],
                        task["status"],
                        created_ms,
                        first_slot_ms,
                        orjson.dumps(task),
                    ),
                )
            except sqlite3.IntegrityError:
                raise StoreError(f"a scheduled task {task['id']} already exists") from None
        return task

    def get(self, task_id: str) -> dict[str, Any]:
        row = self.db.execute("SELECT data FROM tasks WHERE id = ?", (task_id,)).fetchone()
        if row is None:
            raise NotFound(f"no scheduled task {task_id!r}; `tether cron list` shows the tasks")
        return dict(orjson.loads(row[0]))

    def tasks(self, agent_id: str | None = None, status: str | None = None) -> list[dict[str, Any]]:
        sql, args = "SELECT data FROM tasks WHERE 1=1", list[str]()
        if agent_id is not None:
            sql, args = sql + " AND agent_id = ?", [*args, agent_id]
        if status is not None:
            sql, args = sql + " AND status = ?", [*args, status]
        rows = self.db.execute(sql + " ORDER BY created_ms, id", args).fetchall()
        return [dict(orjson.loads(r[0])) for r in rows]

    def active(self) -> list[tuple[dict[str, Any], int]]:
        """Every active task with its last settled slot (ms)."""
        rows = self.db.execute(
            "SELECT data, last_slot_ms FROM tasks WHERE status = 'active' ORDER BY created_ms, id"
        ).fetchall()
        return [(dict(orjson.loads(data)), slot) for data, slot in rows]

    def delete(self, task_id: str) -> dict[str, Any]:
        """Remove a task (waiting for a fire in progress); its run log stays until GC."""
        with self._write() as db:
            row = db.execute("SELECT data FROM tasks WHERE id = ?", (task_id,)).fetchone()
            if row is None:
                raise NotFound(f"no scheduled task {task_id!r}; `tether cron list` shows the tasks")
            db.execute("DELETE FROM tasks WHERE id = ?", (task_id,))
            db.execute(
                "UPDATE triggers SET done_ms = -1 WHERE task_id = ? AND done_ms IS NULL", (task_id,)
            )
        return dict(orjson.loads(row[0]))

    def update(
        self, task_id: str, build: Callable[[dict[str, Any]], dict[str, Any]],
        settled_ms: int | None = None,
    ) -> dict[str, Any]:
        """Replace a task by `build(current)`, re-read in the write transaction (so a fire being
        claimed or delivered finishes first); `settled_ms` (a changed schedule) marks every slot
        up to it settled, so the new schedule fires nothing from before the change."""
        with self._write() as db:
            row = db.execute("SELECT data FROM tasks WHERE id = ?", (task_id,)).fetchone()
            if row is None:
                raise NotFound(f"no scheduled task {task_id!r}; `tether cron list` shows the tasks")
            current = dict(orjson.loads(row[0]))
            task = build(dict(current))
            if task["id"] != task_id or task["agent_id"] != current["agent_id"]:
                raise UsageError("a scheduled task keeps its id and agent; add a new task instead")
            db.execute(
                "UPDATE tasks SET data = ?, status = ?, last_slot_ms = MAX(last_slot_ms, ?)"
                " WHERE id = ?",
                (orjson.dumps(task), task["status"], settled_ms or 0, task_id),
            )
        return task

    def gc(self, now_ms: int, older_than_ms: int = 24 * 3_600_000) -> int:
        """Drop terminal tasks that ended over a day ago (and their run logs)."""
        with self._write() as db:
            gone = [
                r[0]
                for r in db.execute(
                    "SELECT id FROM tasks WHERE terminal_ms IS NOT NULL AND terminal_ms < ?",
                    (now_ms - older_than_ms,),
                )
            ]
            for task_id in gone:
                db.execute("DELETE FROM tasks WHERE id = ?", (task_id,))
                db.execute("DELETE FROM runs WHERE task_id = ?", (task_id,))
            db.execute(
                "DELETE FROM fires WHERE state NOT IN ('claimed', 'queued') AND updated_ms < ?",
                (now_ms - older_than_ms,),
            )
            db.execute(
                "DELETE FROM leases WHERE name LIKE 'presence:%' AND expires_ms < ?",
                (now_ms - older_than_ms,),
            )
        return len(gone)

    # --- firing -------------------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def firing(self, task_id: str, slot_ms: int | None) -> AsyncIterator[Fire | None]:
        """Claim `slot_ms` of an active task (None: a manual trigger, any time) and hold the
        write lock while the caller decides; yields None when the task is gone, no longer
        active, or that slot was already settled. The caller sets `fire.task`/`fire.record`
        (and must not await: `claim_slot` is the same in one call)."""
        with self._firing(task_id, slot_ms) as fire:
            yield fire

    def claim_slot(
        self, task_id: str, slot_ms: int | None, decide: Callable[[Fire], None]
    ) -> Fire | None:
        """`firing` in one synchronous call: `decide(fire)` sets what commits (the scheduler
        runs it off the event loop on a store whose calls may wait on the network)."""
        with self._firing(task_id, slot_ms) as fire:
            if fire is not None:
                decide(fire)
        return fire

    @contextlib.contextmanager
    def _firing(self, task_id: str, slot_ms: int | None) -> Iterator[Fire | None]:
        with self._write() as db:
            row = db.execute(
                "SELECT data, status, last_slot_ms FROM tasks WHERE id = ?", (task_id,)
            ).fetchone()
            if row is None or row[1] != "active" or (slot_ms is not None and row[2] >= slot_ms):
                yield None
                return
            fire = Fire(dict(orjson.loads(row[0])), row[2])
            yield fire
            task = fire.task
            terminal = fire.now_ms if task["status"] in TERMINAL else None
            new_slot = max(row[2], slot_ms if slot_ms is not None else row[2])
            db.execute(
                "UPDATE tasks SET status = ?, last_slot_ms = ?, terminal_ms = ?, data = ?"
                " WHERE id = ?",
                (task["status"], new_slot, terminal, orjson.dumps(task), task_id),
            )
            if fire.record is not None:
                self._append_run(db, task_id, fire.now_ms, fire.record)
            if fire.claim is not None:
                c = fire.claim
                db.execute(
                    "INSERT INTO fires (key, task_id, slot_ms, state, owner, conversation_id,"
                    " text, reason, missed, updated_ms) VALUES (?, ?, ?, 'claimed', ?, ?, ?, ?, ?, ?)"
                    " ON CONFLICT(key) DO NOTHING",
                    (
                        c.key,
                        task_id,
                        c.slot_ms,
                        c.owner,
                        c.conversation_id,
                        c.text.encode(),
                        c.reason,
                        c.missed,
                        fire.now_ms,
                    ),
                )

    # --- fires on their way into a conversation ------------------------------------------------

    def open_fires(self) -> list[FireClaim]:
        """Fires not yet known to be in their conversation (claimed or queued), oldest first."""
        rows = self.db.execute(
            f"SELECT {FIRE_COLUMNS} FROM fires WHERE state IN ('claimed', 'queued')"
            " ORDER BY updated_ms, key"
        ).fetchall()
        return [fire_claim(row) for row in rows]

    def fire(self, key: str) -> FireClaim | None:
        row = self.db.execute(f"SELECT {FIRE_COLUMNS} FROM fires WHERE key = ?", (key,)).fetchone()
        return None if row is None else fire_claim(row)

    def move_fire(
        self,
        key: str,
        state: str,
        now_ms: int,
        *,
        owner: str | None = None,
        conversation_id: str | None = None,
        only_from: tuple[str, ...] = (),
    ) -> bool:
        """Set a fire's state (and owner / conversation); with `only_from`, only a fire in one
        of those states moves. False when nothing moved."""
        with self._write() as db:
            sql = "UPDATE fires SET state = ?, updated_ms = ?"
            args: list[Any] = [state, now_ms]
            if owner is not None:
                sql, args = sql + ", owner = ?", [*args, owner]
            if conversation_id is not None:
                sql, args = sql + ", conversation_id = ?", [*args, conversation_id]
            sql, args = sql + " WHERE key = ?", [*args, key]
            if only_from:
                sql += f" AND state IN ({', '.join('?' * len(only_from))})"
                args.extend(only_from)
            return db.execute(sql, args).rowcount == 1

    @contextlib.asynccontextmanager
    async def delivering(
        self, key: str, owner: str, now_ms: int, *, takeover_from: str | None = None
    ) -> AsyncIterator[Delivery | None]:
        """Hold the write lock while the caller submits a claimed or queued fire; yields None
        when the fire is no longer open, or (`takeover_from`) when it is no longer that owner's
        or that owner has come back. The task is re-read (None once deleted: the caller must
        not submit). What the caller sets on the `Delivery` commits together, owner included."""
        with self._write() as db:
            row = db.execute(
                f"SELECT {FIRE_COLUMNS} FROM fires WHERE key = ? AND state IN"
                " ('claimed', 'queued')",
                (key,),
            ).fetchone()
            claim = None if row is None else fire_claim(row)
            if claim is None or (
                takeover_from is not None
                and takeover_from != owner
                and (claim.owner != takeover_from or self.present(takeover_from, now_ms))
            ):
                yield None
                return
            task_row = db.execute(
                "SELECT data FROM tasks WHERE id = ?", (claim.task_id,)
            ).fetchone()
            task = None if task_row is None else dict(orjson.loads(task_row[0]))
            delivery = Delivery(claim, task)
            yield delivery
            if delivery.task is not None and delivery.task_changed:
                status = delivery.task["status"]
                db.execute(
                    "UPDATE tasks SET status = ?, terminal_ms = ?, data = ? WHERE id = ?",
                    (
                        status,
                        delivery.now_ms if status in TERMINAL else None,
                        orjson.dumps(delivery.task),
                        claim.task_id,
                    ),
                )
            if delivery.record is not None:
                self._append_run(db, claim.task_id, delivery.now_ms, delivery.record)
            if delivery.state is not None:  # else untouched: a later pass tries again
                db.execute(
                    "UPDATE fires SET state = ?, owner = ?, updated_ms = ? WHERE key = ?",
                    (delivery.state, owner, delivery.now_ms, key),
                )

    # --- schedulers' presence -------------------------------------------------------------------

    def renew_presence(self, owner: str, now_ms: int, ttl_ms: int) -> None:
        """Say this scheduler is alive until now + ttl (its fires are left alone until then)."""
        with self._write() as db:
            db.execute(
                "INSERT INTO leases (name, owner, expires_ms) VALUES (?, ?, ?) ON CONFLICT(name)"
                " DO UPDATE SET expires_ms = excluded.expires_ms",
                (_PRESENCE + owner, owner, now_ms + ttl_ms),
            )

    def present(self, owner: str, now_ms: int) -> bool:
        row = self.db.execute(
            "SELECT 1 FROM leases WHERE name = ? AND expires_ms > ?", (_PRESENCE + owner, now_ms)
        ).fetchone()
        return row is not None

    def _append_run(
        self, db: sqlite3.Connection, task_id: str, ts_ms: int, record: dict[str, Any]
    ) -> None:
        db.execute(
            "INSERT INTO runs (task_id, ts_ms, record) VALUES (?, ?, ?)",
            (task_id, ts_ms, orjson.dumps(record)),
        )
        db.execute(
            "DELETE FROM runs WHERE task_id = ? AND seq <= (SELECT seq FROM runs WHERE task_id = ?"
            " ORDER BY seq DESC LIMIT 1 OFFSET ?)",
            (task_id, task_id, RUN_LOG_KEEP),
        )

    def runs(self, task_id: str, limit: int = 20) -> list[dict[str, Any]]:
        """The task's latest run records, oldest first; a submitted fire's record says how far
        its prompt got (`fireState`: queued, started, done, failed)."""
        rows = self.db.execute(
            "SELECT r.record, f.state FROM runs r LEFT JOIN fires f"
            " ON f.key = json_extract(CAST(r.record AS TEXT), '$.fireKey')"
            " WHERE r.task_id = ? ORDER BY r.seq DESC LIMIT ?",
            (task_id, limit),
        ).fetchall()
        out = []
        for record, state in reversed(rows):
            run = dict(orjson.loads(record))
            if state is not None:
                run["fireState"] = state
            out.append(run)
        return out

    # --- manual triggers ------------------------------------------------------------------------

    def request_trigger(self, task_id: str, now_ms: int) -> int:
        with self._write() as db:
            row = db.execute("SELECT status FROM tasks WHERE id = ?", (task_id,)).fetchone()
            if row is None:
                raise NotFound(f"no scheduled task {task_id!r}; `tether cron list` shows the tasks")
            if row[0] != "active":
                raise UsageError(f"scheduled task {task_id} is {row[0]}, not active: it cannot run")
            cur = db.execute(
                "INSERT INTO triggers (task_id, requested_ms) VALUES (?, ?)", (task_id, now_ms)
            )
            return int(cur.lastrowid or 0)

    def pending_triggers(self) -> list[tuple[int, str]]:
        return [
            (int(s), str(t))
            for s, t in self.db.execute(
                "SELECT seq, task_id FROM triggers WHERE done_ms IS NULL ORDER BY seq"
            )
        ]

    def finish_trigger(self, seq: int, now_ms: int, result: dict[str, Any]) -> None:
        with self._write() as db:
            db.execute(
                "UPDATE triggers SET done_ms = ?, result = ? WHERE seq = ?",
                (now_ms, orjson.dumps(result), seq),
            )

    def trigger_result(self, seq: int) -> dict[str, Any] | None:
        row = self.db.execute(
            "SELECT done_ms, result FROM triggers WHERE seq = ?", (seq,)
        ).fetchone()
        if row is None or row[0] is None:
            return None
        if row[1] is None:
            return {"outcome": "skipped", "reason": "task_cancelled"}
        return dict(orjson.loads(row[1]))

    # --- the scheduler lease --------------------------------------------------------------------

    def claim_lease(self, owner: str, now_ms: int, ttl_ms: int) -> bool:
        """Take or renew the scheduler lease; False while another owner's is unexpired."""
        with self._write() as db:
            row = db.execute(
                "SELECT owner, expires_ms FROM leases WHERE name = ?", (LEASE,)
            ).fetchone()
            if row is not None and row[0] != owner and row[1] > now_ms:
                return False
            db.execute(
                "INSERT INTO leases (name, owner, expires_ms) VALUES (?, ?, ?) ON CONFLICT(name)"
                " DO UPDATE SET owner = excluded.owner, expires_ms = excluded.expires_ms",
                (LEASE, owner, now_ms + ttl_ms),
            )
            return True

    def release_lease(self, owner: str) -> None:
        """Give up the lease and this scheduler's presence (its open fires pass on at once)."""
        with self._write() as db:
            db.execute(
                "DELETE FROM leases WHERE name IN (?, ?) AND owner = ?",
                (LEASE, _PRESENCE + owner, owner),
            )

    def lease_holder(self, now_ms: int) -> str | None:
        row = self.db.execute(
            "SELECT owner FROM leases WHERE name = ? AND expires_ms > ?", (LEASE, now_ms)
        ).fetchone()
        return None if row is None else str(row[0])
