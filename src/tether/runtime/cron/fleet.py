"""The schedule store of a fleet (`tether server --store postgresql://…`): the task definitions
and run log stay in the shared `$TETHER_HOME/cron.db` (every worker of a fleet reads the same
home, and the CLI writes there), while a fire's row, the scheduler lease and each scheduler's
presence live in the PostgreSQL store (`backends/postgres/fires.py` `CronFires`), so the
database decides which worker claims a due time and which one finishes a dead worker's fire.

A slot is claimed in the database inside cron.db's write transaction (the task's settled slot
commits after the fire's row): a crash between the two leaves the row claimed and the slot not
yet settled, and the next pass finds the key taken, settles the slot and delivers nothing; the
open fire is finished by its owner or, once that owner is gone, by exactly one other worker.
A fire is submitted outside any database transaction (the input's idempotency key, the fire's
key, makes a second submission a duplicate), and its new state is written only by its owner.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import orjson

from tether.runtime.cron.fires import Delivery, Fire, FireClaim, fire_claim
from tether.runtime.cron.store import TERMINAL, CronStore


class FleetCronStore(CronStore):
    """`CronStore` with its fires, lease and presence in the store behind `fires` (a
    `CronFires`); the scheduler's owner must be the worker's name in that store."""

    def __init__(self, home: Path, fires: Any) -> None:
        super().__init__(home)
        self.fires = fires

    # --- fires ----------------------------------------------------------------------------------

    @contextlib.asynccontextmanager
    async def firing(self, task_id: str, slot_ms: int | None) -> AsyncIterator[Fire | None]:
        claim: FireClaim | None = None
        async with super().firing(task_id, slot_ms) as fire:
            yield fire
            if fire is not None and fire.claim is not None:
                # The row goes to the database, not cron.db; a key claimed before (this slot
                # fired by a worker that died before its settled slot committed) delivers nothing.
                claim, fire.claim = fire.claim, None
                if not self.fires.claim(_row(claim), fire.now_ms):
                    claim = None
        if fire is not None:
            fire.claim = claim

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
        owner's, atomically); the task update and run record commit in cron.db, the fire's new
        state in the database, written only while this owner still owns it."""
        row = self.fires.take(key, owner, now_ms, takeover_from)
        if row is None:
            yield None
            return
        claim = fire_claim(row)
        with self._write() as db:  # the task re-read: a delete from elsewhere waits for us
            task_row = db.execute(
                "SELECT data FROM tasks WHERE id = ?", (claim.task_id,)
            ).fetchone()
            task = None if task_row is None else dict(orjson.loads(task_row[0]))
            delivery = Delivery(claim, task)
            yield delivery
            if delivery.state is not None:  # first: the fire's state is what runs once
                self.fires.settle(key, owner, delivery.state, delivery.now_ms)
            if delivery.task is not None and delivery.task_changed:
                status = delivery.task["status"]
                db.execute(
                    "UPDATE tasks SET status = ?, terminal_ms = ?, data = ? WHERE id = ?",
                    (status, delivery.now_ms if status in TERMINAL else None,
                     orjson.dumps(delivery.task), claim.task_id),
                )
            if delivery.record is not None:
                self._append_run(db, claim.task_id, delivery.now_ms, delivery.record)

    def runs(self, task_id: str, limit: int = 20) -> list[dict[str, Any]]:
        out = super().runs(task_id, limit)
        keys = [str(r["fireKey"]) for r in out if r.get("fireKey")]
        states = self.fires.states(keys) if keys else {}
        for run in out:
            state = states.get(str(run.get("fireKey")))
            if state is not None:
                run["fireState"] = state
        return out

    def gc(self, now_ms: int, older_than_ms: int = 24 * 3_600_000) -> int:
        gone = super().gc(now_ms, older_than_ms)
        self.fires.gc(now_ms, older_than_ms)
        return gone

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
