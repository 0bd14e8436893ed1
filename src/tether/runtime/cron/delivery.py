"""A fire's way into its conversation once its slot is claimed: the conversation chosen (a `new`
task's created once, and remembered before anything is submitted), the prompt submitted under
the store's write lock with the fire's stable key as the input's idempotency key, and the
takeover of fires a dead scheduler left `claimed` or `queued` — confirmed when the conversation
already has the prompt (or the runtime already has that key), submitted again (same key, same
text, same conversation) when it does not. So a due time reaches its conversation exactly once
across kills of the scheduler that fired it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ParamSpec, Protocol, TypeVar

from tether.errors import NotFound, TetherError
from tether.runtime.cron import schedule
from tether.runtime.cron.fires import Delivery, FireClaim
from tether.runtime.cron.store import CronStore

OPEN = ("claimed", "queued")
_P = ParamSpec("_P")
_R = TypeVar("_R")


async def call_store(
    store: CronStore, fn: Callable[_P, _R], *args: _P.args, **kwargs: _P.kwargs
) -> _R:
    """`fn(*args)`, a call on `store`: in a thread when the store's calls are network round
    trips (`offloop`, the fleet's database), so the event loop never waits on them; here
    otherwise (a SQLite connection stays in its thread)."""
    if store.offloop:
        return await asyncio.to_thread(fn, *args, **kwargs)
    return fn(*args, **kwargs)


@dataclass(frozen=True, slots=True)
class SubmitResult:
    outcome: str  # "queued" | "queue_full" | "unavailable" | "error"
    conversation_id: str | None = None
    queue_item_id: str | None = None
    error: str | None = None
    duplicate: bool = False  # the runtime already had this key: it was submitted before


FireFinished = Callable[[str, bool], None]  # (fire key, ended well)


class Submitter(Protocol):
    """Where fired prompts go: the conversation's bounded input queue."""

    async def open_conversation(self, agent_id: str, conversation: str) -> str:
        """The conversation a fire goes to: `new` creates a fresh one (tagged origin:schedule),
        `default` or an id is returned as it is. Raises TetherError when it cannot."""
        ...

    async def submit(
        self, agent_id: str, conversation_id: str, text: str, key: str, on_finished: FireFinished
    ) -> SubmitResult:
        """Queue `text` with idempotency key `key`; `on_finished(key, ok)` when its turn ends."""
        ...

    def landed(self, agent_id: str, conversation_id: str, text: str) -> bool:
        """Whether the conversation's transcript already holds this prompt."""
        ...


class Deliveries:
    """One scheduler's side of the fires table (every call under the scheduler's lock)."""

    def __init__(self, store: CronStore, submitter: Submitter, owner: str) -> None:
        self.store = store
        self.submitter = submitter
        self.owner = owner
        self.finished: dict[str, bool] = {}  # turns that ended, settled on the next pass

    def turn_finished(self, key: str, ok: bool) -> None:
        self.finished[key] = ok

    async def settle_finished(self, now: int) -> None:
        finished, self.finished = self.finished, {}  # here: the turns end on the event loop
        if finished:
            await call_store(self.store, self._settle, finished, now)

    def _settle(self, finished: dict[str, bool], now: int) -> None:
        for key, ok in finished.items():
            self.store.move_fire(
                key, "done" if ok else "failed", now, only_from=("queued", "started")
            )

    async def take_over(self, now: int) -> list[dict[str, Any]]:
        """Finish the open fires of schedulers that are gone (and this one's own leftovers that
        never reached a submit); the run records written."""
        written: list[dict[str, Any]] = []
        for claim in await call_store(self.store, self.store.open_fires):
            mine = claim.owner == self.owner
            if mine and claim.state != "claimed":
                continue  # queued by this process: its turn is on its way
            if not mine and await call_store(self.store, self.store.present, claim.owner, now):
                continue  # its scheduler is alive and will finish it
            record = await self.deliver(claim, now, takeover=True)
            if record is not None:
                written.append(record)
        return written

    async def deliver(
        self, claim: FireClaim, now: int, *, takeover: bool = False
    ) -> dict[str, Any] | None:
        """Submit one open fire; the run record written (None when none was)."""
        conversation, problem = claim.conversation_id, None
        try:
            agent_id = (await call_store(self.store, self.store.get, claim.task_id))["agent_id"]
        except NotFound:
            agent_id = None  # deleted: `delivering` cancels it
        if agent_id is not None and conversation == "new":
            try:
                conversation = await self.submitter.open_conversation(agent_id, "new")
                await call_store(
                    self.store,
                    self.store.move_fire,
                    claim.key,
                    claim.state,
                    now,
                    conversation_id=conversation,
                    only_from=(claim.state,),
                )
            except (TetherError, OSError) as exc:
                problem = SubmitResult("unavailable", error=str(exc))
        async with self.store.delivering(
            claim.key, self.owner, now, takeover_from=claim.owner if takeover else None
        ) as d:
            if d is None:
                return None
            d.now_ms = now
            if d.task is None:
                d.state = "cancelled"  # deleted before its prompt was submitted
                return None
            conversation = d.claim.conversation_id
            if problem is not None:
                result = problem
            elif takeover and await call_store(  # the transcript is the store's in a fleet
                self.store, self._landed, d.task["agent_id"], conversation, claim.text
            ):
                result = SubmitResult("queued", conversation, duplicate=True)
            else:
                result = await self._submit(d.task["agent_id"], conversation, claim)
            if d.claim.state == "queued":  # a re-submission: the record and task said so already
                if result.outcome == "queued":
                    d.state = "started" if result.duplicate else "queued"
                return None
            _settle_first(d, result, now)
            return d.record

    def _landed(self, agent_id: str, conversation: str, text: str) -> bool:
        try:
            return self.submitter.landed(agent_id, conversation, text)
        except (TetherError, OSError):  # no such conversation, unreadable: the submit will say
            return False

    async def _submit(self, agent_id: str, conversation: str, claim: FireClaim) -> SubmitResult:
        try:
            return await self.submitter.submit(
                agent_id, conversation, claim.text, claim.key, self.turn_finished
            )
        except TetherError as exc:
            return SubmitResult("unavailable", error=str(exc))
        except Exception as exc:
            return SubmitResult("error", error=f"{type(exc).__name__}: {exc}")


def _settle_first(d: Delivery, result: SubmitResult, now: int) -> None:
    """The task update and run record of a fire's first submission (the reference's fields)."""
    task, claim = d.task, d.claim
    assert task is not None
    d.task_changed = True
    record = run_record(
        task,
        now,
        "ok",
        "queued",
        claim.reason,
        scheduled_for=claim.slot_ms,
        missed_count=claim.missed or None,
    )
    record["conversationId"] = result.conversation_id
    record["fireKey"] = claim.key  # `runs` adds the fire's state (started, done, ...) by it
    d.record = record
    if result.outcome == "queued":
        number = int(task.get("fire_count") or 0) + 1
        task["fire_count"] = number
        task["last_fired_at"] = task["fired_at"] = schedule.iso(now)
        if not task["recurring"]:
            task["status"] = "fired"
        record["queueItemId"] = result.queue_item_id
        note_run(task, now, "queued", claim.reason, None)
        d.state = "started" if result.duplicate else "queued"
        return
    reason = {"queue_full": "queue_full", "unavailable": "runtime_unavailable"}.get(
        result.outcome, "scheduler_error"
    )
    task["failed_count"] = int(task.get("failed_count") or 0) + 1
    if not task["recurring"]:
        task.update(status="missed", missed_at=schedule.iso(now))
    record.update(status="error", outcome="failed", reason=reason, error=result.error)
    note_run(task, now, "failed", reason, result.error)
    d.state = "failed"


def note_run(task: dict[str, Any], now: int, outcome: str, reason: str, error: str | None) -> None:
    task.update(
        last_run_at=schedule.iso(now),
        last_run_outcome=outcome,
        last_run_reason=reason,
        last_run_error=error,
    )


def run_record(
    task: dict[str, Any],
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
