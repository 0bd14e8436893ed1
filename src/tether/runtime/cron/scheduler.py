"""The scheduler: one loop (inside `tether server`) that holds the store's lease, fires due tasks
and manual triggers into conversation queues through a `Submitter`, and logs each outcome.

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
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Protocol

from tether.errors import TetherError
from tether.runtime.cron import schedule
from tether.runtime.cron.store import CronStore, Fire

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


@dataclass(frozen=True, slots=True)
class SubmitResult:
    outcome: str  # "queued" | "queue_full" | "unavailable"
    conversation_id: str | None = None
    queue_item_id: str | None = None
    error: str | None = None


class Submitter(Protocol):
    """Where fired prompts go: the conversation's bounded input queue. `conversation` is `new`
    (a fresh conversation tagged origin:schedule), `default` or an id."""

    async def submit(self, agent_id: str, conversation: str, text: str) -> SubmitResult: ...


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
    ) -> None:
        self.store = store
        self.submitter = submitter
        self.clock = clock or SystemClock()
        self.owner = owner or f"scheduler-{os.getpid()}-{uuid.uuid4().hex[:8]}"
        self.poll_s = poll_s
        self.on_change = on_change
        self._lease_until = 0
        self._last_gc = 0
        # One store connection, one transaction at a time: a fire holds its write transaction
        # across the submit's awaits, so every use of the store in this process goes through
        # this lock (a second connection here would block the event loop on SQLite's lock).
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
                self.store.release_lease(self.owner)

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
            record = await self._fire(task_id, None, self.clock.now_ms(), manual=True)
        if record is not None and self.on_change is not None:
            self.on_change()
        return record

    async def _tick(self) -> list[dict[str, Any]]:
        now = self.clock.now_ms()
        if not self.holds_lease(now):
            return []
        written: list[dict[str, Any]] = []
        for seq, task_id in self.store.pending_triggers():
            record = await self._fire(task_id, None, now, manual=True)
            result = record or {"outcome": "skipped", "reason": "task_cancelled"}
            self.store.finish_trigger(seq, now, result)
            if record is not None:
                written.append(record)
        for task, last_slot in self.store.active():
            record = await self._evaluate(task, last_slot, now)
            if record is not None:
                written.append(record)
        if now - self._last_gc >= GC_EVERY_MS:
            self._last_gc = now
            self.store.gc(now)
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
        async with self.store.firing(task_id, None) as fire:
            if fire is None:
                return None
            fire.now_ms = now
            task = fire.task
            task["failed_count"] = int(task.get("failed_count") or 0) + 1
            _note_run(task, now, "failed", "invalid_cron", error)
            fire.record = _record(task, now, "error", "failed", "invalid_cron", error=error)
            return fire.record

    async def _fire(
        self, task_id: str, slot: int | None, now: int, *, manual: bool = False, missed: int = 0
    ) -> dict[str, Any] | None:
        async with self.store.firing(task_id, slot) as fire:
            if fire is None:
                return None
            fire.now_ms = now
            self._apply(fire, slot if slot is not None else now, now, manual, missed)
            if fire.record is not None and fire.record["outcome"] == "pending":
                await self._submit(fire, slot if slot is not None else now, now)
            return fire.record

    def _apply(self, fire: Fire, slot: int, now: int, manual: bool, missed: int) -> None:
        """Decide missed vs due; a due fire gets a `pending` record that `_submit` completes."""
        task = fire.task
        late = now - slot
        if not task["recurring"] and not manual and late > schedule.MISSED_AFTER_MS:
            task.update(
                status="missed", missed_at=schedule.iso(now), last_missed_at=schedule.iso(now)
            )
            task["missed_count"] = int(task.get("missed_count") or 0) + 1
            _note_run(task, now, "missed", "started_too_late", None)
            fire.record = _record(
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
        fire.record = _record(
            task, now, "ok", "pending", reason, scheduled_for=slot, missed_count=missed or None
        )

    async def _submit(self, fire: Fire, slot: int, now: int) -> None:
        task, record = fire.task, fire.record
        assert record is not None
        number = int(task.get("fire_count") or 0) + 1
        text = schedule.wrap_prompt(task, slot, now, number)
        try:
            result = await self.submitter.submit(task["agent_id"], task["conversation_id"], text)
        except TetherError as exc:
            result = SubmitResult("unavailable", error=str(exc))
        except Exception as exc:
            result = SubmitResult("error", error=f"{type(exc).__name__}: {exc}")
        record["conversationId"] = result.conversation_id
        if result.outcome == "queued":
            task["fire_count"] = number
            task["last_fired_at"] = task["fired_at"] = schedule.iso(now)
            if not task["recurring"]:
                task["status"] = "fired"
            record.update(outcome="queued", queueItemId=result.queue_item_id)
            _note_run(task, now, "queued", record["reason"], None)
            return
        reason = {"queue_full": "queue_full", "unavailable": "runtime_unavailable"}.get(
            result.outcome, "scheduler_error"
        )
        task["failed_count"] = int(task.get("failed_count") or 0) + 1
        if not task["recurring"]:
            task.update(status="missed", missed_at=schedule.iso(now))
        record.update(status="error", outcome="failed", reason=reason, error=result.error)
        _note_run(task, now, "failed", reason, result.error)


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


def _note_run(task: dict[str, Any], now: int, outcome: str, reason: str, error: str | None) -> None:
    task.update(
        last_run_at=schedule.iso(now),
        last_run_outcome=outcome,
        last_run_reason=reason,
        last_run_error=error,
    )


def _record(
    task: Mapping[str, Any],
    now: int,
    status: str,
    outcome: str,
    reason: str,
    *,
    error: str | None = None,
    scheduled_for: int | None = None,
    missed_count: int | None = None,
) -> dict[str, Any]:
    record: dict[str, Any] = {
        "ts": schedule.iso(now),
        "jobId": task["id"],
        "action": "finished",
        "status": status,
        "outcome": outcome,
        "reason": reason,
        "agentId": task["agent_id"],
        "conversationId": None,
        "runAtMs": now,
        "firedAt": schedule.iso(now),
    }
    if scheduled_for is not None:
        record["scheduledFor"] = schedule.iso(scheduled_for)
    if error is not None:
        record["error"] = error
    if missed_count:
        record["missedCount"] = missed_count
    return record
