"""The scheduler: one loop (inside `tether server`) that holds the store's lease, claims due
slots and manual triggers, has `delivery.Deliveries` carry each into its conversation through a
`Submitter` (and finish the fires a dead scheduler left open), and logs each outcome.

A schedule is one more principal submitting input: it never runs a turn itself. `queued` in
the run log means the prompt entered the conversation's queue, not that the turn finished.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import time
import uuid
from collections.abc import Callable, Mapping
from datetime import datetime
from pathlib import Path
from typing import Any, Protocol

from tether.errors import TetherError
from tether.runtime.cron import schedule
from tether.runtime.cron.delivery import (
    Deliveries,
    SubmitResult,
    Submitter,
    call_store,
    note_run,
    run_record,
)
from tether.runtime.cron.fires import Fire, FireClaim
from tether.runtime.cron.store import CronStore

__all__ = ["Clock", "FileClock", "Scheduler", "SubmitResult", "Submitter", "SystemClock"]

LEASE_TTL_MS = 90_000
LEASE_RENEW_MS = 30_000  # renew when less than TTL - this remains
GC_EVERY_MS = 3_600_000
FAILED_PASS_RETRY_S = 15.0
_MAX_COALESCE = 10_000  # slots walked when catching up after downtime


class Clock(Protocol):
    def now_ms(self) -> int: ...


class SystemClock:
    def now_ms(self) -> int:
        return int(time.time() * 1000)


class FileClock:
    """Test clock: the time is the epoch milliseconds written in a file, moved by the test
    (set `TETHER_CRON_CLOCK_FILE`); the real clock is never consulted."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def now_ms(self) -> int:
        try:
            return int(self.path.read_text().strip())
        except (OSError, ValueError) as exc:
            raise TetherError(
                f"TETHER_CRON_CLOCK_FILE {self.path}: no epoch-ms time ({exc})"
            ) from None


def clock_from_env(env: Mapping[str, str]) -> Clock:
    path = env.get("TETHER_CRON_CLOCK_FILE")
    return FileClock(Path(path)) if path else SystemClock()


class Scheduler:
    def __init__(
        self,
        store: CronStore,
        submitter: Submitter,
        clock: Clock | None = None,
        *,
        owner: str | None = None,
        poll_s: float = 1.0,
        on_change: Callable[[], None] | None = None,
        hold: tuple[str, Path] | None = None,
    ) -> None:
        self.store = store
        self.submitter = submitter
        self.clock = clock or SystemClock()
        self.owner = owner or f"scheduler-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self.poll_s = poll_s
        self.on_change = on_change
        self.deliveries = Deliveries(store, submitter, self.owner)
        self.hold = hold  # tests: stop at a point (claimed, queued) after touching a file
        self._lease_until = 0
        self._present_until = 0
        self._last_gc = 0
        # One scheduler call on the store at a time: on cron.db (one connection) a fire holds
        # its write transaction across the submit's awaits, so every use of the store by this
        # scheduler goes through this lock (a second connection here would block the event loop
        # on SQLite's lock); on the fleet's store the calls run in threads (`call_store`).
        self._lock = asyncio.Lock()

    # --- the loop -----------------------------------------------------------------------------

    async def run(self, stop: asyncio.Event) -> None:
        last_error = ""
        try:
            while not stop.is_set():
                wait = self.poll_s
                try:
                    await self.tick()
                    last_error = ""
                except Exception as exc:  # a bad pass must not end scheduling for good
                    wait = max(self.poll_s, FAILED_PASS_RETRY_S)  # e.g. a read-only home
                    if repr(exc) != last_error:  # say it once, not once a second
                        last_error = repr(exc)
                        sys.stderr.write(f"tether: scheduler pass failed (retrying): {exc}\n")
                with contextlib.suppress(asyncio.TimeoutError):
                    await asyncio.wait_for(stop.wait(), wait)
        finally:
            with contextlib.suppress(TetherError):
                await call_store(self.store, self.store.release_lease, self.owner)

    def renew_presence(self, now: int) -> None:
        """Say this scheduler is alive (its open fires are left to it) — every lease period."""
        if now >= self._present_until - (LEASE_TTL_MS - LEASE_RENEW_MS):
            self.store.renew_presence(self.owner, now, LEASE_TTL_MS)
            self._present_until = now + LEASE_TTL_MS

    def holds_lease(self, now: int) -> bool:
        if now < self._lease_until - (LEASE_TTL_MS - LEASE_RENEW_MS):
            return True
        holder = self.store.lease_holder(now)
        if holder is not None and holder != self.owner:
            self._lease_until = 0
            return False
        if self.store.claim_lease(self.owner, now, LEASE_TTL_MS):
            self._lease_until = now + LEASE_TTL_MS
            return True
        self._lease_until = 0
        return False

    async def tick(self) -> list[dict[str, Any]]:
        """One pass: manual triggers, then due tasks; the run records written, in order."""
        async with self._lock:
            return await self._tick()

    async def trigger_now(self, task_id: str) -> dict[str, Any] | None:
        """Run one task now (a client's `cron_trigger`), lease or not: a manual run claims no
        slot, so it cannot collide with a scheduled fire. None when the task is not active."""
        async with self._lock:
            now = self.clock.now_ms()
            await call_store(self.store, self.renew_presence, now)  # before a fire of ours is in the table
            record = await self._fire(task_id, None, now, manual=True)
        if record is not None and self.on_change is not None:
            self.on_change()
        return record

    async def _tick(self) -> list[dict[str, Any]]:
        now = self.clock.now_ms()
        store = self.store  # each call off the event loop when it is a database round trip
        await call_store(store, self.renew_presence, now)
        await self.deliveries.settle_finished(now)
        if not await call_store(store, self.holds_lease, now):
            return []
        written = await self.deliveries.take_over(now)
        for seq, task_id in await call_store(store, store.pending_triggers):
            record = await self._fire(task_id, None, now, manual=True)
            result = record or {"outcome": "skipped", "reason": "task_cancelled"}
            await call_store(store, store.finish_trigger, seq, now, result)
            if record is not None:
                written.append(record)
        for task, last_slot in await call_store(store, store.active):
            record = await self._evaluate(task, last_slot, now)
            if record is not None:
                written.append(record)
        if now - self._last_gc >= GC_EVERY_MS:
            self._last_gc = now
            await call_store(store, store.gc, now)
        if written and self.on_change is not None:
            self.on_change()
        return written

    # --- one task -------------------------------------------------------------------------------

    async def _evaluate(
        self, task: dict[str, Any], last_slot: int, now: int
    ) -> dict[str, Any] | None:
        if not task["recurring"]:
            at = _ms(task["scheduled_for"])
            if now < at - int(task.get("jitter_offset_ms") or 0) or last_slot >= at:
                return None
            return await self._fire(task["id"], at, now)
        try:
            slot, skipped = _latest_slot(task, last_slot, now)
        except Exception as exc:  # the expression no longer parses: say so once, keep the task
            if task.get("last_run_reason") == "invalid_cron":
                return None
            return await self._settle_invalid(task["id"], now, f"{exc}")
        if slot is None:
            return None
        return await self._fire(task["id"], slot, now, missed=skipped)

    async def _settle_invalid(self, task_id: str, now: int, error: str) -> dict[str, Any] | None:
        def decide(fire: Fire) -> None:
            fire.now_ms = now
            task = fire.task
            task["failed_count"] = int(task.get("failed_count") or 0) + 1
            note_run(task, now, "failed", "invalid_cron", error)
            fire.record = run_record(task, now, "error", "failed", "invalid_cron", error=error)

        fire = await call_store(self.store, self.store.claim_slot, task_id, None, decide)
        return None if fire is None else fire.record

    async def _fire(
        self, task_id: str, slot: int | None, now: int, *, manual: bool = False, missed: int = 0
    ) -> dict[str, Any] | None:
        """Claim the slot (a missed one-shot is settled there), then deliver its prompt."""
        def decide(fire: Fire) -> None:
            fire.now_ms = now
            self._apply(fire, slot if slot is not None else now, now, manual, missed)

        fire = await call_store(self.store, self.store.claim_slot, task_id, slot, decide)
        if fire is None:
            return None
        if fire.claim is None:
            return fire.record
        await self._hold("claimed")
        record = await self.deliveries.deliver(fire.claim, now)
        await self._hold("queued")
        return record

    def _apply(self, fire: Fire, slot: int, now: int, manual: bool, missed: int) -> None:
        """Decide missed vs due: a missed one-shot gets its record, a due fire its claim."""
        task = fire.task
        late = now - slot
        if not task["recurring"] and not manual and late > schedule.MISSED_AFTER_MS:
            task.update(
                status="missed", missed_at=schedule.iso(now), last_missed_at=schedule.iso(now)
            )
            task["missed_count"] = int(task.get("missed_count") or 0) + 1
            note_run(task, now, "missed", "started_too_late", None)
            fire.record = run_record(
                task,
                now,
                "skipped",
                "missed",
                "started_too_late",
                scheduled_for=slot,
                missed_count=1,
            )
            return
        reason = (
            "manual_trigger"
            if manual
            else ("scheduled_time_matched" if task["recurring"] else "one_off_due")
        )
        number = int(task.get("fire_count") or 0) + 1
        key = (
            f"cron:{task['id']}:manual:{uuid.uuid4().hex[:12]}"
            if manual
            else (f"cron:{task['id']}:{slot}")
        )
        fire.claim = FireClaim(
            key,
            task["id"],
            slot,
            "claimed",
            self.owner,
            task["conversation_id"],
            schedule.wrap_prompt(task, slot, now, number),
            reason,
            missed,
        )

    async def _hold(self, point: str) -> None:
        """Tests only (`TETHER_CRON_HOLD=<point>:<file>`): touch the file, stop here for good,
        so a test can kill the process at a known point of a fire."""
        if self.hold is None or self.hold[0] != point:
            return
        self.hold[1].write_text(point)
        await asyncio.Event().wait()


def hold_from_env(env: Mapping[str, str]) -> tuple[str, Path] | None:
    value = env.get("TETHER_CRON_HOLD")
    if not value:
        return None
    point, _, path = value.partition(":")
    if point not in ("claimed", "queued") or not path:
        raise TetherError(f"TETHER_CRON_HOLD {value!r}: use claimed:<file> or queued:<file>")
    return point, Path(path)


def _latest_slot(task: Mapping[str, Any], last_slot: int, now: int) -> tuple[int | None, int]:
    """The latest slot due by `now` after `last_slot` (with the task's jitter), and how many
    earlier due slots it coalesces (a server that was down fires once, not once per slot)."""
    expr, tz = task["cron"], task["timezone"]
    jitter = int(task.get("jitter_offset_ms") or 0)
    slot = schedule.next_fire_ms(expr, tz, last_slot)
    if slot + jitter > now:
        return None, 0
    skipped = 0
    for _ in range(_MAX_COALESCE):
        following = schedule.next_fire_ms(expr, tz, slot)
        if following + jitter > now:
            break
        slot, skipped = following, skipped + 1
    return slot, skipped


def _ms(text: str) -> int:
    return int(datetime.fromisoformat(text).timestamp() * 1000)
