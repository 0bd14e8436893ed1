"""The scheduler against the real SQLite store with a clock the test moves: fires, missed
one-shots, deletes, the lease between two schedulers, invalid expressions, full queues."""

from __future__ import annotations

import asyncio
import sqlite3
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
import pytest

from tether.errors import UsageError
from tether.runtime.cron.scheduler import Scheduler, SubmitResult
from tether.runtime.cron.store import MAX_ACTIVE_PER_AGENT, CronStore
from tether.runtime.cron.tasks import new_task

T0 = int(datetime(2026, 3, 10, 14, 7, 30, tzinfo=UTC).timestamp() * 1000)
MIN = 60_000


@dataclass
class Clock:
    now: int = T0

    def now_ms(self) -> int:
        return self.now


@dataclass
class Inbox:
    """The seam's other side: a bounded queue per conversation, like the App Server's, with
    its idempotency keys, its transcript (the prompts whose turn began) and new conversations."""

    capacity: int = 100
    received: list[tuple[str, str, str]] = field(default_factory=list)
    keys: list[str] = field(default_factory=list)
    transcript: list[tuple[str, str, str]] = field(default_factory=list)
    finished: dict[str, Any] = field(default_factory=dict)
    opened: int = 0
    fail: str | None = None

    async def open_conversation(self, agent_id: str, conversation: str) -> str:
        if conversation != "new":
            return conversation
        self.opened += 1
        return f"conv-new-{self.opened}"

    async def submit(
        self, agent_id: str, conversation: str, text: str, key: str, on_finished: Any = None
    ) -> SubmitResult:
        if self.fail == "raise":
            raise RuntimeError("runtime exploded")
        if key in self.keys:
            return SubmitResult("queued", conversation, "q-dup", duplicate=True)
        if len(self.received) >= self.capacity:
            return SubmitResult("queue_full", conversation_id=conversation, error="queue is full")
        self.received.append((agent_id, conversation, text))
        self.keys.append(key)
        self.finished[key] = on_finished
        return SubmitResult(
            "queued", conversation_id=conversation, queue_item_id=f"q-{len(self.received)}"
        )

    def landed(self, agent_id: str, conversation: str, text: str) -> bool:
        return (agent_id, conversation, text) in self.transcript


def add(store: CronStore, now: int = T0, **kw: Any) -> dict[str, Any]:
    args: dict[str, Any] = {
        "agent_id": "agent-local-a",
        "conversation_id": "default",
        "name": "job",
        "description": "",
        "prompt": "do the thing",
        "every": None,
        "at": None,
        "cron": None,
        "timezone": "UTC",
        "now_ms": now,
    }
    args.update(kw)
    task, first = new_task(**args)
    return store.add(task, now, first)


def tick(s: Scheduler) -> list[dict[str, Any]]:
    return asyncio.run(s.tick())


@pytest.fixture
def store(tmp_path: Path) -> CronStore:
    return CronStore(tmp_path / "home")


def test_every_minute_fires_each_minute_once_with_the_wrapped_prompt(store: CronStore) -> None:
    clock, inbox = Clock(), Inbox()
    task = add(store, every="1m", name="heartbeat")
    s = Scheduler(store, inbox, clock)
    assert tick(s) == []
    first_slot = T0 - 30_000 + MIN  # 14:08:00
    clock.now = first_slot + task["jitter_offset_ms"] - 1
    assert tick(s) == [] and inbox.received == []
    clock.now += 1
    [record] = tick(s)
    assert record["outcome"] == "queued" and record["reason"] == "scheduled_time_matched"
    assert record["scheduledFor"] == "2026-03-10T14:08:00+00:00"
    [(agent, conversation, text)] = inbox.received
    assert (agent, conversation) == ("agent-local-a", "default")
    assert text.startswith('Scheduled task "heartbeat" is firing.\n')
    assert text.endswith("Prompt: do the thing") and "(fire #1)" in text
    assert tick(s) == []  # the same slot never fires twice
    clock.now += MIN
    [second] = tick(s)
    assert "(fire #2)" in inbox.received[1][2]
    got = store.get(task["id"])
    assert got["fire_count"] == 2 and got["status"] == "active"
    assert got["last_run_outcome"] == "queued"
    assert [r["outcome"] for r in store.runs(task["id"])] == ["queued", "queued"]
    assert second["queueItemId"] == "q-2"


def test_downtime_coalesces_into_one_fire(store: CronStore) -> None:
    clock, inbox = Clock(), Inbox()
    task = add(store, every="5m")
    s = Scheduler(store, inbox, clock)
    clock.now = T0 + 60 * MIN
    [record] = tick(s)
    assert len(inbox.received) == 1 and record["missedCount"] == 11
    assert store.get(task["id"])["fire_count"] == 1


def test_one_shot_fires_once_then_is_fired(store: CronStore) -> None:
    clock, inbox = Clock(), Inbox()
    task = add(store, at="in 10m")
    s = Scheduler(store, inbox, clock)
    clock.now = T0 + 10 * MIN - 1
    assert tick(s) == []
    clock.now += 1
    [record] = tick(s)
    assert record["reason"] == "one_off_due" and record["outcome"] == "queued"
    assert "Recurrence: one-off" in inbox.received[0][2]
    for _ in range(3):
        clock.now += MIN
        assert tick(s) == []
    assert len(inbox.received) == 1
    assert store.get(task["id"])["status"] == "fired"


def test_one_shot_more_than_five_minutes_late_is_missed(store: CronStore) -> None:
    clock, inbox = Clock(), Inbox()
    task = add(store, at="in 10m")
    clock.now = T0 + 15 * MIN + 1
    [record] = tick(Scheduler(store, inbox, clock))
    assert inbox.received == []
    assert (record["outcome"], record["reason"], record["status"]) == (
        "missed",
        "started_too_late",
        "skipped",
    )
    got = store.get(task["id"])
    assert got["status"] == "missed" and got["missed_count"] == 1


def test_one_shot_five_minutes_late_still_fires(store: CronStore) -> None:
    clock, inbox = Clock(), Inbox()
    add(store, at="in 10m")
    clock.now = T0 + 15 * MIN
    [record] = tick(Scheduler(store, inbox, clock))
    assert record["outcome"] == "queued" and len(inbox.received) == 1


def test_deleted_task_never_fires(store: CronStore) -> None:
    clock, inbox = Clock(), Inbox()
    task = add(store, every="1m")
    s = Scheduler(store, inbox, clock)
    tick(s)
    CronStore(store.path.parent).delete(task["id"])  # another process's connection
    clock.now += 10 * MIN
    assert tick(s) == [] and inbox.received == []


def test_delete_waits_for_a_fire_in_progress(store: CronStore) -> None:
    """A delete that starts while a fire holds the claim returns after it: never a fire after."""
    clock = Clock(T0 + 2 * MIN)
    task = add(store, every="1m")
    order: list[str] = []

    class SlowInbox(Inbox):
        async def submit(
            self, agent_id: str, conversation: str, text: str, key: str, on_finished: Any = None
        ) -> SubmitResult:
            other = sqlite3.connect(store.path, timeout=0.05)
            with pytest.raises(sqlite3.OperationalError, match="locked"):
                other.execute("BEGIN IMMEDIATE")  # what `cron delete` would wait on
            other.close()
            order.append("submitted")
            return await super().submit(agent_id, conversation, text, key, on_finished)

    tick(Scheduler(store, SlowInbox(), clock))
    CronStore(store.path.parent).delete(task["id"])
    order.append("deleted")
    assert order == ["submitted", "deleted"]


def test_two_schedulers_on_one_home_fire_a_slot_once(tmp_path: Path) -> None:
    clock, inbox = Clock(), Inbox()
    home = tmp_path / "home"
    add(CronStore(home), every="1m")
    a = Scheduler(CronStore(home), inbox, clock, owner="a")
    b = Scheduler(CronStore(home), inbox, clock, owner="b")
    assert tick(a) == [] and a.holds_lease(clock.now) and not b.holds_lease(clock.now)
    for _ in range(5):
        clock.now += MIN
        tick(b)
        tick(a)
    assert len(inbox.received) == 5
    assert {r["outcome"] for r in CronStore(home).runs(CronStore(home).tasks()[0]["id"])} == {
        "queued"
    }


def test_slot_claim_holds_even_if_both_think_they_hold_the_lease(tmp_path: Path) -> None:
    clock, inbox = Clock(T0 + 3 * MIN), Inbox()
    home = tmp_path / "home"
    add(CronStore(home), every="1m")
    a = Scheduler(CronStore(home), inbox, clock, owner="a")
    b = Scheduler(CronStore(home), inbox, clock, owner="b")
    a._lease_until = b._lease_until = clock.now + 80_000  # a stale belief, as after a pause

    async def both() -> None:
        await asyncio.gather(a.tick(), b.tick())

    asyncio.run(both())
    assert len(inbox.received) == 1


def test_lease_passes_on_when_its_holder_stops_renewing(tmp_path: Path) -> None:
    clock, inbox = Clock(), Inbox()
    home = tmp_path / "home"
    a = Scheduler(CronStore(home), inbox, clock, owner="a")
    b = Scheduler(CronStore(home), inbox, clock, owner="b")
    assert a.holds_lease(clock.now) and not b.holds_lease(clock.now)
    clock.now += 89_000
    assert not b.holds_lease(clock.now)
    clock.now += 2_000
    assert b.holds_lease(clock.now) and not a.holds_lease(clock.now)


def test_invalid_stored_expression_logs_one_failure_and_keeps_the_task(store: CronStore) -> None:
    clock, inbox = Clock(), Inbox()
    task = add(store, every="1m")
    broken = {**task, "cron": "99 * * * *"}
    store.db.execute("UPDATE tasks SET data = ? WHERE id = ?", (orjson.dumps(broken), task["id"]))
    s = Scheduler(store, inbox, clock)
    for _ in range(3):
        clock.now += MIN
        tick(s)
    [record] = store.runs(task["id"])
    assert (record["outcome"], record["reason"]) == ("failed", "invalid_cron")
    got = store.get(task["id"])
    assert got["status"] == "active" and got["failed_count"] == 1 and inbox.received == []


def test_full_queue_is_recorded_and_the_task_kept(store: CronStore) -> None:
    clock, inbox = Clock(), Inbox(capacity=0)
    task = add(store, every="1m")
    clock.now += 2 * MIN
    [record] = tick(Scheduler(store, inbox, clock))
    assert (record["status"], record["outcome"], record["reason"]) == (
        "error",
        "failed",
        "queue_full",
    )
    got = store.get(task["id"])
    assert got["status"] == "active" and got["failed_count"] == 1 and got["fire_count"] == 0


def test_a_runtime_that_raises_is_runtime_unavailable_or_scheduler_error(store: CronStore) -> None:
    clock, inbox = Clock(), Inbox(fail="raise")
    task = add(store, at="in 1m")
    clock.now += MIN
    [record] = tick(Scheduler(store, inbox, clock))
    assert record["reason"] == "scheduler_error" and "runtime exploded" in record["error"]
    assert store.get(task["id"])["status"] == "missed"


def test_manual_trigger_runs_now_and_settles_the_request(store: CronStore) -> None:
    clock, inbox = Clock(), Inbox()
    task = add(store, cron="0 3 * * *")
    seq = store.request_trigger(task["id"], clock.now)
    [record] = tick(Scheduler(store, inbox, clock))
    assert record["reason"] == "manual_trigger" and len(inbox.received) == 1
    assert store.trigger_result(seq)["outcome"] == "queued"  # type: ignore[index]
    assert store.get(task["id"])["status"] == "active"


def test_trigger_of_a_deleted_task_is_skipped(store: CronStore) -> None:
    clock, inbox = Clock(), Inbox()
    task = add(store, every="1h")
    seq = store.request_trigger(task["id"], clock.now)
    store.delete(task["id"])
    tick(Scheduler(store, inbox, clock))
    assert inbox.received == []
    assert store.trigger_result(seq) == {"outcome": "skipped", "reason": "task_cancelled"}


def test_at_most_fifty_active_tasks_per_agent(store: CronStore) -> None:
    for _ in range(MAX_ACTIVE_PER_AGENT):
        add(store, every="1h")
    with pytest.raises(UsageError, match="50 active"):
        add(store, every="1h")
    add(store, every="1h", agent_id="agent-local-other")


def test_gc_drops_terminal_tasks_after_a_day(store: CronStore) -> None:
    clock, inbox = Clock(), Inbox()
    done = add(store, at="in 1m")
    kept = add(store, every="1h")
    s = Scheduler(store, inbox, clock)
    clock.now += MIN
    tick(s)
    clock.now += 25 * 3_600_000
    tick(s)
    assert [t["id"] for t in store.tasks()] == [kept["id"]]
    assert store.runs(done["id"]) == []


def test_run_log_is_trimmed(store: CronStore, monkeypatch: pytest.MonkeyPatch) -> None:
    from tether.runtime.cron import store as store_module

    monkeypatch.setattr(store_module, "RUN_LOG_KEEP", 5)
    clock, inbox = Clock(), Inbox()
    task = add(store, every="1m")
    s = Scheduler(store, inbox, clock)
    for _ in range(9):
        clock.now += MIN
        tick(s)
    runs = store.runs(task["id"], limit=100)
    assert len(runs) == 5 and "(fire #9)" in inbox.received[-1][2]


def test_a_store_that_cannot_open_is_reported_once_and_retried(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from tether.runtime.cron import scheduler as scheduler_module

    monkeypatch.setattr(scheduler_module, "FAILED_PASS_RETRY_S", 0.01)
    home = tmp_path / "not-a-dir"
    home.write_text("a file where TETHER_HOME should be")
    s = Scheduler(CronStore(home), Inbox(), Clock(), poll_s=0.01)
    attempts = 0
    real_tick = s.tick

    async def counted() -> list[dict[str, Any]]:
        nonlocal attempts
        attempts += 1
        return await real_tick()

    s.tick = counted  # type: ignore[method-assign]

    async def go() -> None:
        stop = asyncio.Event()
        task = asyncio.ensure_future(s.run(stop))
        await asyncio.sleep(0.3)
        stop.set()
        await task

    asyncio.run(go())
    err = capsys.readouterr().err
    assert attempts > 3
    assert (
        err.count("scheduler pass failed (retrying)") == 1
        and "cannot open the schedule store" in err
    )


# --- exactly once across the death of the scheduler that fired ----------------------------------

TAKEOVER = 91_000  # past the dead holder's lease and presence


class Crash(BaseException):
    """The process dies inside the submit: nothing after it runs, the transaction never commits."""


@dataclass
class DyingInbox(Inbox):
    async def submit(
        self, agent_id: str, conversation: str, text: str, key: str, on_finished: Any = None
    ) -> SubmitResult:
        raise Crash


def crash_tick(s: Scheduler) -> None:
    with pytest.raises(Crash):
        tick(s)


def open_fires(home: Path) -> list[tuple[str, str]]:
    return [(f.state, f.owner) for f in CronStore(home).open_fires()]


def test_a_fire_claimed_by_a_holder_that_died_is_delivered_once_by_the_next(
    tmp_path: Path,
) -> None:
    clock, home = Clock(), tmp_path / "home"
    task = add(CronStore(home), every="1h")
    clock.now = T0 + 61 * MIN  # 15:07 and its jitter (under a minute) passed
    crash_tick(Scheduler(CronStore(home), DyingInbox(), clock, owner="a"))
    assert open_fires(home) == [("claimed", "a")]
    after = Inbox()
    b = Scheduler(CronStore(home), after, clock, owner="b")
    assert tick(b) == []  # a's lease and presence still hold
    clock.now += TAKEOVER
    [record] = tick(b)
    assert record["outcome"] == "queued" and record["scheduledFor"].endswith("15:07:00+00:00")
    assert len(after.received) == 1 and after.keys == [
        f"cron:{task['id']}:{T0 + 59 * MIN + 30_000}"
    ]
    assert open_fires(home) == [("queued", "b")]
    for _ in range(3):
        clock.now += MIN
        tick(b)
    assert len(after.received) == 1
    assert [r["outcome"] for r in CronStore(home).runs(task["id"])] == ["queued"]
    assert CronStore(home).get(task["id"])["fire_count"] == 1


def test_a_queued_fire_lost_with_its_holder_is_submitted_again_with_the_same_key_and_text(
    tmp_path: Path,
) -> None:
    clock, home = Clock(), tmp_path / "home"
    task = add(CronStore(home), every="1h")
    clock.now = T0 + 61 * MIN
    before = Inbox()  # the dead server's in-memory queue
    [record] = tick(Scheduler(CronStore(home), before, clock, owner="a"))
    assert record["outcome"] == "queued" and open_fires(home) == [("queued", "a")]
    after = Inbox()  # the restarted server: the prompt never reached the transcript
    clock.now += TAKEOVER
    assert tick(Scheduler(CronStore(home), after, clock, owner="b")) == []  # no second record
    assert after.received == before.received and after.keys == before.keys
    assert open_fires(home) == [("queued", "b")]
    assert [r["outcome"] for r in CronStore(home).runs(task["id"])] == ["queued"]
    assert CronStore(home).get(task["id"])["fire_count"] == 1


@pytest.mark.parametrize("where", ["transcript", "durable queue"])
def test_a_fire_that_reached_its_conversation_is_not_fired_again(
    tmp_path: Path, where: str
) -> None:
    clock, home = Clock(), tmp_path / "home"
    add(CronStore(home), every="1h")
    clock.now = T0 + 61 * MIN
    before = Inbox()
    tick(Scheduler(CronStore(home), before, clock, owner="a"))
    after = Inbox()
    if where == "transcript":
        after.transcript = list(before.received)
    else:
        after.keys = list(before.keys)  # the server kept the input and its key across the kill
    clock.now += TAKEOVER
    b = Scheduler(CronStore(home), after, clock, owner="b")
    tick(b)
    assert after.received == [] and CronStore(home).open_fires() == []
    assert CronStore(home).fire(before.keys[0]).state == "started"  # type: ignore[union-attr]
    [run] = CronStore(home).runs(CronStore(home).tasks()[0]["id"])
    assert (run["outcome"], run["fireState"]) == ("queued", "started")


def test_a_fire_claimed_then_found_in_the_conversation_is_recorded_once(tmp_path: Path) -> None:
    """The holder died after its submit but before its record committed (a durable queue)."""
    clock, home = Clock(), tmp_path / "home"
    task = add(CronStore(home), every="1h")
    clock.now = T0 + 61 * MIN
    crash_tick(Scheduler(CronStore(home), DyingInbox(), clock, owner="a"))
    [claim] = CronStore(home).open_fires()
    after = Inbox(keys=[claim.key])
    clock.now += TAKEOVER
    [record] = tick(Scheduler(CronStore(home), after, clock, owner="b"))
    assert record["outcome"] == "queued" and after.received == []
    assert CronStore(home).get(task["id"])["fire_count"] == 1


def test_a_new_conversation_fire_goes_again_to_the_conversation_it_was_given(
    tmp_path: Path,
) -> None:
    clock, home = Clock(), tmp_path / "home"
    add(CronStore(home), every="1h", conversation_id="new")
    clock.now = T0 + 61 * MIN
    dying = DyingInbox()
    crash_tick(Scheduler(CronStore(home), dying, clock, owner="a"))
    assert dying.opened == 1
    after = Inbox(opened=10)
    clock.now += TAKEOVER
    [record] = tick(Scheduler(CronStore(home), after, clock, owner="b"))
    assert record["conversationId"] == "conv-new-1" and after.opened == 10
    assert [c for _, c, _ in after.received] == ["conv-new-1"]


def test_a_live_schedulers_open_fires_are_left_to_it(tmp_path: Path) -> None:
    clock, home = Clock(), tmp_path / "home"
    task = add(CronStore(home), cron="0 3 * * *")
    holder_inbox, other_inbox = Inbox(), Inbox()
    holder = Scheduler(CronStore(home), holder_inbox, clock, owner="a")
    other = Scheduler(CronStore(home), other_inbox, clock, owner="b")
    assert tick(holder) == [] and tick(other) == []  # both present, "a" holds the lease
    record = asyncio.run(other.trigger_now(task["id"]))  # a client's cron_trigger on "b"
    assert record is not None and open_fires(home) == [("queued", "b")]
    for _ in range(5):
        clock.now += 20_000
        tick(holder)
        tick(other)  # alive: renews its presence
    assert holder_inbox.received == [] and len(other_inbox.received) == 1
    for _ in range(5):  # "b" is gone
        clock.now += 20_000
        tick(holder)
    assert len(holder_inbox.received) == 1 and open_fires(home) == [("queued", "a")]


def test_a_task_deleted_before_its_fire_was_submitted_is_cancelled(tmp_path: Path) -> None:
    clock, home = Clock(), tmp_path / "home"
    task = add(CronStore(home), every="1h")
    clock.now = T0 + 61 * MIN
    crash_tick(Scheduler(CronStore(home), DyingInbox(), clock, owner="a"))
    CronStore(home).delete(task["id"])
    after = Inbox()
    clock.now += TAKEOVER
    assert tick(Scheduler(CronStore(home), after, clock, owner="b")) == []
    assert after.received == [] and CronStore(home).open_fires() == []


def test_the_end_of_a_fires_turn_settles_it(store: CronStore) -> None:
    clock, inbox = Clock(), Inbox()
    add(store, every="1m")
    s = Scheduler(store, inbox, clock)
    clock.now += 2 * MIN
    tick(s)
    clock.now += MIN
    tick(s)
    first, second = inbox.keys
    inbox.finished[first](first, True)
    inbox.finished[second](second, False)
    tick(s)
    assert store.fire(first).state == "done"  # type: ignore[union-attr]
    assert store.fire(second).state == "failed"  # type: ignore[union-attr]
    assert store.open_fires() == []
    runs = store.runs(store.tasks()[0]["id"])
    assert [(r["outcome"], r["fireState"]) for r in runs] == [
        ("queued", "done"),
        ("queued", "failed"),
    ]


def test_a_transcript_that_cannot_be_read_at_a_takeover_is_not_taken_as_landed(
    tmp_path: Path,
) -> None:
    from tether.errors import NotFound

    class Unreadable(Inbox):
        def landed(self, agent_id: str, conversation: str, text: str) -> bool:
            raise NotFound("No conversation 'default'")

    clock, home = Clock(), tmp_path / "home"
    add(CronStore(home), every="1h")
    clock.now = T0 + 61 * MIN
    tick(Scheduler(CronStore(home), Inbox(), clock, owner="a"))
    after = Unreadable()
    clock.now += TAKEOVER
    tick(Scheduler(CronStore(home), after, clock, owner="b"))  # no failed pass: it submits
    assert len(after.received) == 1 and open_fires(home) == [("queued", "b")]


def test_a_takeover_whose_submit_is_refused_tries_again_on_a_later_pass(tmp_path: Path) -> None:
    clock, home = Clock(), tmp_path / "home"
    add(CronStore(home), every="1h")
    clock.now = T0 + 61 * MIN
    tick(Scheduler(CronStore(home), Inbox(), clock, owner="a"))
    after = Inbox(capacity=0)  # the restarted server's queue is full for now
    b = Scheduler(CronStore(home), after, clock, owner="b")
    clock.now += TAKEOVER
    tick(b)
    assert after.received == [] and open_fires(home) == [("queued", "a")]
    after.capacity = 10
    clock.now += 1_000
    tick(b)
    assert len(after.received) == 1 and open_fires(home) == [("queued", "b")]
