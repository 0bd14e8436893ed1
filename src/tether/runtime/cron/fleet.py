"""The schedule store of a fleet (`tether server --store postgresql://…`): everything the local
`CronStore` keeps in `$TETHER_HOME/cron.db` lives in the PostgreSQL store instead — the task
definitions, their run logs and manual triggers (`backends/postgres/cron_tasks.py` `CronTasks`),
a fire's row, the scheduler lease and each scheduler's presence (`backends/postgres/fires.py`
`CronFires`) — so workers with separate homes share the schedules, and when one dies another
fires them. No cron.db is opened.

A slot is claimed in one database transaction: the task's row is locked, checked still active
and not yet settled for that slot, and the fire's row, the settled slot and the task's update
commit together (a key claimed before delivers nothing). A fire is submitted with the task's
row share-locked on a connection of its own and no other transaction open (the input's
idempotency key, the fire's key, makes a second submission a duplicate), so a delete from any
worker waits for it and, once returned, lets no fire of the task through; afterwards its new
state, the fields of the task the delivery changed (applied to the row as it is then, under its
lock) and its run record commit together, written only while this worker still owns the fire.
"""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

from tether.errors import NotFound, StoreError, UsageError
from tether.runtime.cron.fires import Delivery, Fire, FireClaim, fire_claim
from tether.runtime.cron.store import MAX_ACTIVE_PER_AGENT, RUN_LOG_KEEP, TERMINAL, CronStore


def _missing(task_id: str) -> NotFound:
    return NotFound(f"no scheduled task {task_id!r}; `tether cron list` shows the tasks")


class FleetCronStore(CronStore):
    """`CronStore` whose every table is the store's: `rows` (a `CronTasks`) holds the tasks,
    run logs and triggers, `fires` (a `CronFires`) the fires, lease and presence; the
    scheduler's owner must be the worker's name in that store. Safe to use from several
    threads (each call is its own transaction on the worker's session)."""

    offloop = True  # every call is a database round trip: the scheduler makes it in a thread

    def __init__(self, home: Path, fires: Any, rows: Any) -> None:
        super().__init__(home)
        self.fires = fires
        self.rows = rows

    @property
    def db(self) -> sqlite3.Connection:
        raise StoreError("a fleet's schedules are in the PostgreSQL store: it opens no cron.db")

    def exists(self) -> bool:
        return True

    # --- tasks ----------------------------------------------------------------------------------

    def add(self, task: dict[str, Any], created_ms: int, first_slot_ms: int) -> dict[str, Any]:
        self.rows.add(task, created_ms, first_slot_ms, MAX_ACTIVE_PER_AGENT)
        return task

    def get(self, task_id: str) -> dict[str, Any]:
        task = self.rows.get(task_id)
        if task is None:
            raise _missing(task_id)
        return dict(task)

    def tasks(self, agent_id: str | None = None, status: str | None = None) -> list[dict[str, Any]]:
        return list(self.rows.tasks(agent_id, status))

    def active(self) -> list[tuple[dict[str, Any], int]]:
        return list(self.rows.active())

    def delete(self, task_id: str) -> dict[str, Any]:
        task = self.rows.delete(task_id)
        if task is None:
            raise _missing(task_id)
        return dict(task)

    def update(
        self, task_id: str, build: Callable[[dict[str, Any]], dict[str, Any]],
        settled_ms: int | None = None,
    ) -> dict[str, Any]:
        def checked(current: dict[str, Any]) -> dict[str, Any]:
            task = build(dict(current))
            if task["id"] != task_id or task["agent_id"] != current["agent_id"]:
                raise UsageError("a scheduled task keeps its id and agent; add a new task instead")
            return task

        task = self.rows.update(task_id, checked, settled_ms)
        if task is None:
            raise _missing(task_id)
        return dict(task)

    def gc(self, now_ms: int, older_than_ms: int = 24 * 3_600_000) -> int:
        gone = int(self.rows.gc(now_ms, older_than_ms))
        self.fires.gc(now_ms, older_than_ms)
        return gone

    # --- fires ----------------------------------------------------------------------------------

    @contextlib.contextmanager
    def _firing(self, task_id: str, slot_ms: int | None) -> Iterator[Fire | None]:
        """As `CronStore._firing`, in one database transaction holding the task's row lock (the
        caller must not await inside: the transaction is this thread's)."""
        with self.rows.locked(task_id) as held:
            if held.task is None or held.status != "active" or (
                slot_ms is not None and held.last_slot_ms >= slot_ms
            ):
                yield None
                return
            fire = Fire(dict(held.task), held.last_slot_ms)
            yield fire
            claim, fire.claim = fire.claim, None
            # A key claimed before (by any worker) delivers nothing; the slot settles anyway.
            if claim is not None and self.fires.claim(_row(claim), fire.now_ms):
                fire.claim = claim
            task = fire.task
            held.settle(
                task,
                max(held.last_slot_ms, slot_ms if slot_ms is not None else held.last_slot_ms),
                fire.now_ms if task["status"] in TERMINAL else None,
            )
            if fire.record is not None:
                held.append_run(fire.now_ms, fire.record, RUN_LOG_KEEP)

    def open_fires(self) -> list[FireClaim]:
        return [fire_claim(row) for row in self.fires.open_fires()]

    def fire(self, key: str) -> FireClaim | None:
        row = self.fires.fire(key)
        return None if row is None else fire_claim(row)

    def move_fire(
        self, key: str, state: str, now_ms: int, *, owner: str | None = None,
        conversation_id: str | None = None, only_from: tuple[str, ...] = (),
    ) -> bool:
        return bool(self.fires.move(key, state, now_ms, owner=owner,
                                    conversation_id=conversation_id, only_from=only_from))

    @contextlib.asynccontextmanager
    async def delivering(
        self, key: str, owner: str, now_ms: int, *, takeover_from: str | None = None
    ) -> AsyncIterator[Delivery | None]:
        """As `CronStore.delivering`, the fire taken in the database first (its own, or a gone
        owner's, atomically) and no transaction held while the caller submits; then the fire's
        new state, the task's changed fields and the run record commit in one transaction."""
        taken = await asyncio.to_thread(self._take, key, owner, now_ms, takeover_from)
        if taken is None:
            yield None
            return
        claim, hold = taken
        before = hold.task
        delivery = Delivery(claim, None if before is None else dict(before))
        try:
            yield delivery
        finally:
            await asyncio.to_thread(hold.release)  # first: the commit locks the row itself
        await asyncio.to_thread(self._delivered, delivery, owner, before)

    def _take(
        self, key: str, owner: str, now_ms: int, takeover_from: str | None
    ) -> tuple[FireClaim, Any] | None:
        row = self.fires.take(key, owner, now_ms, takeover_from)
        if row is None:
            return None
        claim = fire_claim(row)
        return claim, self.rows.hold(claim.task_id)

    def _delivered(self, delivery: Delivery, owner: str, before: dict[str, Any] | None) -> None:
        claim = delivery.claim
        with self.rows.locked(claim.task_id) as held:
            if delivery.state is not None:  # else untouched: a later pass tries again
                self.fires.settle(claim.key, owner, delivery.state, delivery.now_ms)
            if before is not None and delivery.task is not None and delivery.task_changed:
                held.merge(before, delivery.task, delivery.now_ms, TERMINAL)
            if delivery.record is not None:
                held.append_run(delivery.now_ms, delivery.record, RUN_LOG_KEEP)

    def runs(self, task_id: str, limit: int = 20) -> list[dict[str, Any]]:
        out = []
        for record, state in self.rows.runs(task_id, limit):
            run = dict(record)
            if state is not None:
                run["fireState"] = state
            out.append(run)
        return out

    # --- manual triggers --------------------------------------------------------------------------

    def request_trigger(self, task_id: str, now_ms: int) -> int:
        seq, status = self.rows.request_trigger(task_id, now_ms)
        if status == "":
            raise _missing(task_id)
        if status is not None:
            raise UsageError(f"scheduled task {task_id} is {status}, not active: it cannot run")
        return int(seq)

    def pending_triggers(self) -> list[tuple[int, str]]:
        return list(self.rows.pending_triggers())

    def finish_trigger(self, seq: int, now_ms: int, result: dict[str, Any]) -> None:
        self.rows.finish_trigger(seq, now_ms, result)

    def trigger_result(self, seq: int) -> dict[str, Any] | None:
        done, result = self.rows.trigger_result(seq)
        if not done:
            return None
        return {"outcome": "skipped", "reason": "task_cancelled"} if result is None else result

    # --- presence and the scheduler lease ---------------------------------------------------------

    def renew_presence(self, owner: str, now_ms: int, ttl_ms: int) -> None:
        self.fires.renew_presence(owner, now_ms, ttl_ms)

    def present(self, owner: str, now_ms: int) -> bool:
        return bool(self.fires.present(owner, now_ms))

    def claim_lease(self, owner: str, now_ms: int, ttl_ms: int) -> bool:
        return bool(self.fires.claim_lease(owner, now_ms, ttl_ms))

    def release_lease(self, owner: str) -> None:
        self.fires.release_lease(owner)

    def lease_holder(self, now_ms: int) -> str | None:
        holder = self.fires.lease_holder(now_ms)
        return None if holder is None else str(holder)


def _row(claim: FireClaim) -> tuple[Any, ...]:
    return (claim.key, claim.task_id, claim.slot_ms, claim.state, claim.owner,
            claim.conversation_id, claim.text, claim.reason, claim.missed)
