"""The fleet's schedule store on a real PostgreSQL (`runtime/cron/fleet.py` over
`backends/postgres/fires.py` and `cron_tasks.py`): the database, not a shared file, holds the
tasks and decides which worker claims a due time, which one runs the schedules, and which one
finishes a dead worker's fire."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from pathlib import Path
from typing import Any

import pytest

from tether.runtime.cron import tasks
from tether.runtime.cron.delivery import SubmitResult
from tether.runtime.cron.scheduler import Scheduler

T0 = 1_900_000_000_000 - (1_900_000_000_000 % 3_600_000)  # a whole hour
HOUR = 3_600_000


class Clock:
    def __init__(self, now: int) -> None:
        self.now = now

    def now_ms(self) -> int:
        return self.now


class Recorder:
    """A `Submitter` that records what it was given; the queue's key deduplication as in the
    runtime (a key seen before is a duplicate)."""

    def __init__(self, seen: list[str]) -> None:
        self.seen = seen

    async def open_conversation(self, agent_id: str, conversation: str) -> str:
        return conversation

    async def submit(
        self, agent_id: str, conversation_id: str, text: str, key: str, on_finished: Any
    ) -> SubmitResult:
        duplicate = key in self.seen
        self.seen.append(key)
        return SubmitResult("queued", conversation_id, f"item-{len(self.seen)}", duplicate=duplicate)

    def landed(self, agent_id: str, conversation_id: str, text: str) -> bool:
        return False


def _store(url: str, home: Path, worker: str) -> Any:
    from tether.backends.postgres.connection import PgSession
    from tether.backends.postgres.cron_tasks import CronTasks
    from tether.backends.postgres.fires import CronFires
    from tether.runtime.cron.fleet import FleetCronStore

    session = PgSession(url, worker)
    session.open()
    return FleetCronStore(home, CronFires(session), CronTasks(session))


def _hourly(store: Any, task_id: str = "task-1") -> dict[str, Any]:
    task, first_slot = tasks.new_task(
        agent_id="agent-1", conversation_id="default", name="tick", description="",
        prompt="tick once", every=None, at=None, cron="0 * * * *", timezone="UTC",
        now_ms=T0 - HOUR,
    )
    task.update(id=task_id, jitter_offset_ms=0)  # the same task in every home, due on the hour
    return dict(store.add(task, T0 - HOUR, first_slot))


def _pg_rows(url: str, sql: str) -> list[tuple[Any, ...]]:
    import psycopg

    with psycopg.connect(url) as conn:
        return [tuple(r) for r in conn.execute(sql).fetchall()]


def test_two_homes_firing_one_due_time_claim_it_once_in_the_database(
    pg_url: str, tmp_path: Path
) -> None:
    """Two schedulers with separate homes see the one task the database holds, and fire a due
    time once: the task's row lock and the fire's key are the database's."""
    seen: list[str] = []
    stores = [_store(pg_url, tmp_path / f"home-{n}", f"worker-{n}") for n in range(2)]
    _hourly(stores[0])
    assert [t["id"] for t in stores[1].tasks()] == ["task-1"]
    clock = Clock(T0 + 5_000)
    schedulers = [Scheduler(s, Recorder(seen), clock, owner=s.fires.session.worker)
                  for s in stores]

    async def both() -> list[list[dict[str, Any]]]:
        out = []
        for scheduler in schedulers:
            scheduler.holds_lease = lambda now: True  # type: ignore[method-assign]
            out.append(await scheduler.tick())
        return out

    first, second = asyncio.run(both())
    assert seen == [f"cron:task-1:{T0}"]
    assert [r["outcome"] for r in first] == ["queued"] and second == []
    assert _pg_rows(pg_url, "SELECT key, state, owner FROM cron_fires") == [
        (f"cron:task-1:{T0}", "queued", "worker-0")]
    assert [(r["outcome"], r["fireState"]) for r in stores[1].runs("task-1")] == [
        ("queued", "queued")]  # one run, seen from either worker
    assert not (tmp_path / "home-0" / "cron.db").exists()
    for store in stores:
        store.fires.session.close()
        store.close()


def test_one_scheduler_lease_and_a_dead_workers_fire_finished_by_one_other(
    pg_url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from tether.backends.postgres.logs import JsonLogFormatter

    caplog.set_level(logging.INFO, logger="tether.fleet")
    home = tmp_path / "home"
    dead, alive, third = (_store(pg_url, home, f"worker-{n}") for n in range(3))
    task = _hourly(dead)
    clock = Clock(T0 + 5_000)
    assert dead.claim_lease("worker-0", clock.now, 90_000)
    assert not alive.claim_lease("worker-1", clock.now, 90_000)  # held, its holder alive
    assert alive.lease_holder(clock.now) == "worker-0"

    async def claim_only() -> None:  # worker-0 claims the slot and dies before submitting
        async with dead.firing(task["id"], T0) as fire:
            assert fire is not None
            fire.now_ms = clock.now
            Scheduler(dead, Recorder([]), clock, owner="worker-0")._apply(
                fire, T0, clock.now, False, 0)
        assert fire.claim is not None

    asyncio.run(claim_only())
    dead.renew_presence("worker-0", clock.now, 90_000)
    dead.fires.session.close()  # its database session ends: as kill -9 does
    dead.close()
    deadline = time.monotonic() + 30  # its server process ends a moment after the hang-up
    while alive.present("worker-0", clock.now) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert alive.present("worker-0", clock.now) is False
    seen: list[str] = []
    schedulers = [Scheduler(s, Recorder(seen), clock, owner=s.fires.session.worker)
                  for s in (alive, third)]

    async def both_tick() -> list[list[dict[str, Any]]]:
        return [await s.tick() for s in schedulers]

    first, second = asyncio.run(both_tick())
    assert seen == [f"cron:task-1:{T0}"]  # submitted once, by the new lease holder
    assert [r["outcome"] for r in first] == ["queued"] and second == []
    assert alive.lease_holder(clock.now) == "worker-1"
    assert _pg_rows(pg_url, "SELECT state, owner FROM cron_fires") == [("queued", "worker-1")]
    assert [r.get("fireState") for r in alive.runs(task["id"])] == ["queued"]
    events = [json.loads(JsonLogFormatter().format(r)) for r in caplog.records]
    names = [e["event"] for e in events]
    assert names.count("fire_claimed") == 1 and names.count("fire_taken_over") == 1
    taken = next(e for e in events if e["event"] == "fire_taken_over")
    assert (taken["worker"], taken["previous"]) == ("worker-1", "worker-0")
    lease = [e for e in events if e["event"] == "scheduler_lease_taken"]
    assert [(e["worker"], e["previous"]) for e in lease] == [
        ("worker-0", None), ("worker-1", "worker-0")]
    for store in (alive, third):
        store.fires.session.close()
        store.close()
