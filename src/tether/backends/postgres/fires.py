"""A schedule's due time fired once across the fleet, by the database. `CronFires` is what
`tether server --store` uses: the scheduler's fire rows (`cron_fires`, one per
`cron:<task>:<due ms>` key, claimed → queued → started → done | failed), its lease and each
scheduler's presence (`cron_leases`), so a due time is claimed by exactly one worker and a
dead worker's open fires are finished by exactly one other. `ScheduleFires` is the smaller
primitive: the (schedule, due time) row and the input it becomes commit in one transaction."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Generic

from tether.backends.postgres import logs
from tether.backends.postgres.connection import PgSession
from tether.backends.postgres.input_queue import PgInputQueue, T
from tether.backends.postgres.presence import ALIVE


class ScheduleFires(Generic[T]):
    """Fires of the worker behind `queue` (its session)."""

    def __init__(self, queue: PgInputQueue[T]) -> None:
        self.queue = queue

    def fire_once(self, schedule_id: str, due_at: datetime, item: T) -> bool:
        """Claim `schedule_id`'s `due_at` and enqueue `item` for it; False (nothing written)
        when some worker already fired it. `due_at` must carry a time zone."""
        if due_at.tzinfo is None:
            raise ValueError(f"due time {due_at.isoformat()} of schedule {schedule_id} has no time zone")
        session = self.queue.session
        with session.transaction("fire a schedule") as cur:
            cur.execute(
                "INSERT INTO schedule_fires (schedule_id, due_at, fired_by) VALUES (%s, %s, %s)"
                " ON CONFLICT DO NOTHING", (schedule_id, due_at, session.worker),
            )
            if cur.rowcount != 1:
                return False
            self.queue.accept_in(cur, [item])
        logs.event("schedule_fired", f"{session.worker} fired {schedule_id} due {due_at.isoformat()}",
                   schedule=schedule_id, due_at=due_at.isoformat(), worker=session.worker,
                   conversation=item.conversation, item=item.item_id)
        return True

    def fired_by(self, schedule_id: str, due_at: datetime) -> str | None:
        with self.queue.session.transaction("read a schedule's fire") as cur:
            row = cur.execute(
                "SELECT fired_by FROM schedule_fires WHERE schedule_id = %s AND due_at = %s",
                (schedule_id, due_at),
            ).fetchone()
        return None if row is None else str(row[0])


FIRE_COLUMNS = "key, task_id, slot_ms, state, owner, conversation_id, text, reason, missed"
OPEN = ("claimed", "queued")
SCHEDULER_LEASE = "scheduler"
PRESENCE = "presence:"  # + owner: a scheduler that said it is alive until expires_ms


class CronFires:
    """The scheduler's fires (`cron_fires`), its lease and each scheduler's presence
    (`cron_leases`) in the store, for the fleet's schedulers (`runtime/cron/fleet.py`): a fire's
    row is claimed once (its key, `cron:<task>:<due ms>`, is the primary key), and moved on
    (claimed → queued → started → done | failed, or cancelled) only by its owner, or taken from
    an owner that is gone (its database session ended, or it stopped renewing its presence).
    Rows are handed out as tuples in `FIRE_COLUMNS` order (the runtime decodes them)."""

    def __init__(self, session: PgSession) -> None:
        self.session = session

    # --- fires ----------------------------------------------------------------------------------

    def claim(self, row: tuple[Any, ...], now_ms: int) -> bool:
        """Insert a claimed fire (`FIRE_COLUMNS` values, state `claimed`); False when its key
        was claimed before (by any worker: nothing written)."""
        key, task_id, slot_ms, _state, owner, conversation, text, reason, missed = row
        with self.session.transaction("claim a schedule's fire") as cur:
            cur.execute(
                f"INSERT INTO cron_fires ({FIRE_COLUMNS}, updated_ms) VALUES"
                " (%s, %s, %s, 'claimed', %s, %s, %s, %s, %s, %s) ON CONFLICT (key) DO NOTHING",
                (key, task_id, slot_ms, owner, conversation, text.encode(), reason, missed, now_ms),
            )
            claimed = cur.rowcount == 1
        if claimed:
            logs.event("fire_claimed", f"{owner} claimed {key}", key=key, task=task_id,
                       slot_ms=slot_ms, worker=owner, conversation=conversation)
        return claimed

    def open_fires(self) -> list[tuple[Any, ...]]:
        with self.session.transaction("read the open fires") as cur:
            rows = cur.execute(
                f"SELECT {FIRE_COLUMNS} FROM cron_fires WHERE state = ANY(%s)"
                " ORDER BY updated_ms, key", (list(OPEN),),
            ).fetchall()
        return [tuple(r) for r in rows]

    def fire(self, key: str) -> tuple[Any, ...] | None:
        with self.session.transaction("read a fire") as cur:
            row = cur.execute(
                f"SELECT {FIRE_COLUMNS} FROM cron_fires WHERE key = %s", (key,)
            ).fetchone()
        return None if row is None else tuple(row)

    def states(self, keys: list[str]) -> dict[str, str]:
        with self.session.transaction("read fires' states") as cur:
            rows = cur.execute(
                "SELECT key, state FROM cron_fires WHERE key = ANY(%s)", (keys,)
            ).fetchall()
        return {str(k): str(s) for k, s in rows}

    def move(
        self, key: str, state: str, now_ms: int, *, owner: str | None = None,
        conversation_id: str | None = None, only_from: tuple[str, ...] = (),
    ) -> bool:
        """Set a fire's state (and owner / conversation); with `only_from`, only from one of
        those states. False when nothing moved."""
        sql = "UPDATE cron_fires SET state = %s, updated_ms = %s"
        args: list[Any] = [state, now_ms]
        if owner is not None:
            sql, args = sql + ", owner = %s", [*args, owner]
        if conversation_id is not None:
            sql, args = sql + ", conversation_id = %s", [*args, conversation_id]
        sql, args = sql + " WHERE key = %s", [*args, key]
        if only_from:
            sql, args = sql + " AND state = ANY(%s)", [*args, list(only_from)]
        with self.session.transaction("move a fire") as cur:
            cur.execute(sql, args)
            moved = cur.rowcount == 1
        if moved:
            logs.event("fire_moved", f"{key} is {state}", key=key, state=state,
                       worker=self.session.worker)
        return moved

    def take(
        self, key: str, owner: str, now_ms: int, takeover_from: str | None = None
    ) -> tuple[Any, ...] | None:
        """The open fire `key` for `owner` to submit: its own, or (`takeover_from`) one whose
        owner is still `takeover_from` and gone, which becomes `owner`'s in the same commit, so
        of two workers taking one fire over only one gets it. None otherwise."""
        with self.session.transaction("take a fire") as cur:
            row = cur.execute(
                f"SELECT {FIRE_COLUMNS} FROM cron_fires WHERE key = %s AND state = ANY(%s)"
                " FOR UPDATE", (key, list(OPEN)),
            ).fetchone()
            if row is None:
                return None
            holder = str(row[4])
            if holder != owner:
                if takeover_from is None or holder != takeover_from or self._present(
                    cur, holder, now_ms
                ):
                    return None
                cur.execute(
                    "UPDATE cron_fires SET owner = %s, updated_ms = %s WHERE key = %s",
                    (owner, now_ms, key),
                )
        if holder != owner:
            logs.event("fire_taken_over", f"{owner} took {key} ({row[3]}) from {holder}: it is"
                       " gone", key=key, state=str(row[3]), worker=owner, previous=holder)
        return (*row[:4], owner, *row[5:])

    def settle(self, key: str, owner: str, state: str, now_ms: int) -> bool:
        """A submitted fire's new state, written only while `owner` still owns it."""
        with self.session.transaction("settle a fire") as cur:
            cur.execute(
                "UPDATE cron_fires SET state = %s, updated_ms = %s WHERE key = %s AND owner = %s"
                " AND state = ANY(%s)", (state, now_ms, key, owner, list(OPEN)),
            )
            settled = cur.rowcount == 1
        if settled:
            logs.event("fire_moved", f"{key} is {state}", key=key, state=state, worker=owner)
        return settled

    # --- schedulers' presence and the scheduler lease ---------------------------------------------

    def renew_presence(self, owner: str, now_ms: int, ttl_ms: int) -> None:
        with self.session.transaction("renew a scheduler's presence") as cur:
            cur.execute(
                "INSERT INTO cron_leases (name, owner, expires_ms) VALUES (%s, %s, %s)"
                " ON CONFLICT (name) DO UPDATE SET expires_ms = EXCLUDED.expires_ms",
                (PRESENCE + owner, owner, now_ms + ttl_ms),
            )

    def present(self, owner: str, now_ms: int) -> bool:
        with self.session.transaction("read a scheduler's presence") as cur:
            return self._present(cur, owner, now_ms)

    @staticmethod
    def _present(cur: Any, owner: str, now_ms: int) -> bool:
        """Alive: its database session is (`presence.py`) and its presence is unexpired (a
        stopped scheduler keeps its session, not its presence)."""
        row = cur.execute(
            "SELECT EXISTS (SELECT 1 FROM cron_leases WHERE name = %s AND expires_ms > %s) AND "
            + ALIVE.format(w="%s"), (PRESENCE + owner, now_ms, owner),
        ).fetchone()
        return bool(row and row[0])

    def claim_lease(self, owner: str, now_ms: int, ttl_ms: int) -> bool:
        """Take or renew the scheduler lease: free, expired, or its holder's session gone."""
        with self.session.transaction("claim the scheduler lease") as cur:
            before = cur.execute(
                "SELECT owner FROM cron_leases WHERE name = %s", (SCHEDULER_LEASE,)
            ).fetchone()
            cur.execute(
                "INSERT INTO cron_leases (name, owner, expires_ms) VALUES (%s, %s, %s)"
                " ON CONFLICT (name) DO UPDATE SET owner = EXCLUDED.owner,"
                " expires_ms = EXCLUDED.expires_ms WHERE cron_leases.owner = EXCLUDED.owner"
                " OR cron_leases.expires_ms <= %s OR NOT " + ALIVE.format(w="cron_leases.owner"),
                (SCHEDULER_LEASE, owner, now_ms + ttl_ms, now_ms),
            )
            taken = cur.rowcount == 1
        if taken and (before is None or before[0] != owner):
            logs.event("scheduler_lease_taken", f"{owner} runs the schedules"
                       + ("" if before is None else f" (after {before[0]})"),
                       worker=owner, previous=None if before is None else str(before[0]))
        return taken

    def lease_holder(self, now_ms: int) -> str | None:
        with self.session.transaction("read the scheduler lease") as cur:
            row = cur.execute(
                "SELECT owner FROM cron_leases WHERE name = %s AND expires_ms > %s AND "
                + ALIVE.format(w="cron_leases.owner"), (SCHEDULER_LEASE, now_ms),
            ).fetchone()
        return None if row is None else str(row[0])

    def release_lease(self, owner: str) -> None:
        with self.session.transaction("release the scheduler lease") as cur:
            cur.execute(
                "DELETE FROM cron_leases WHERE name = ANY(%s) AND owner = %s",
                ([SCHEDULER_LEASE, PRESENCE + owner], owner),
            )

    def gc(self, now_ms: int, older_than_ms: int) -> None:
        with self.session.transaction("forget settled fires") as cur:
            cur.execute(
                "DELETE FROM cron_fires WHERE state <> ALL(%s) AND updated_ms < %s",
                (list(OPEN), now_ms - older_than_ms),
            )
            cur.execute(
                "DELETE FROM cron_leases WHERE name LIKE 'presence:%%' AND expires_ms < %s",
                (now_ms - older_than_ms,),
            )
