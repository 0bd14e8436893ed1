"""The schedules' definitions on a real PostgreSQL (`backends/postgres/cron_tasks.py` behind
`runtime/cron/fleet.py`): two workers changing one task lose neither change, two workers firing
one due time at the same moment fire it once, and a home migrated by `tether store migrate` is
served as it is and copied back with what the fleet added."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path
from typing import Any

from tests.fleet.test_fleet_cron_store import HOUR, T0, Clock, Recorder, _hourly, _pg_rows, _store
from tether.runtime.cron.delivery import SubmitResult
from tether.runtime.cron.scheduler import Scheduler
from tether.runtime.cron.store import CronStore


class EditingRecorder(Recorder):
    """A submitter during whose submit another worker renames the task (the delivery holds no
    transaction meanwhile, so the other worker's update commits first)."""

    def __init__(self, seen: list[str], other: Any, task_id: str) -> None:
        super().__init__(seen)
        self.other, self.task_id = other, task_id

    async def submit(
        self, agent_id: str, conversation_id: str, text: str, key: str, on_finished: Any
    ) -> SubmitResult:
        renamed = await asyncio.to_thread(
            self.other.update, self.task_id, lambda t: {**t, "name": "renamed", "prompt": "new"})
        assert renamed["name"] == "renamed"
        return await super().submit(agent_id, conversation_id, text, key, on_finished)


def _always_lease(scheduler: Scheduler) -> Scheduler:
    scheduler.holds_lease = lambda now: True  # type: ignore[method-assign]
    return scheduler


def test_an_update_on_one_worker_during_a_fire_on_another_is_kept(
    pg_url: str, tmp_path: Path
) -> None:
    firing, editing = (_store(pg_url, tmp_path / f"home-{n}", f"worker-{n}") for n in range(2))
    task = _hourly(firing)
    seen: list[str] = []
    scheduler = _always_lease(Scheduler(firing, EditingRecorder(seen, editing, task["id"]),
                                        Clock(T0 + 5_000), owner="worker-0"))
    written = asyncio.run(scheduler.tick())
    assert [r["outcome"] for r in written] == ["queued"] and seen == [f"cron:task-1:{T0}"]
    after = editing.get(task["id"])
    assert (after["name"], after["prompt"]) == ("renamed", "new")  # the other worker's change
    assert after["fire_count"] == 1 and after["last_run_outcome"] == "queued"  # and the fire's
    assert _pg_rows(pg_url, "SELECT last_slot_ms FROM cron_tasks") == [(T0,)]
    for store in (firing, editing):
        store.fires.session.close()


def test_two_workers_firing_one_due_time_at_once_fire_it_once(
    pg_url: str, tmp_path: Path
) -> None:
    stores = [_store(pg_url, tmp_path / f"home-{n}", f"worker-{n}") for n in range(4)]
    _hourly(stores[0])
    seen: list[str] = []
    results: list[list[dict[str, Any]]] = []
    start = threading.Barrier(len(stores))

    def tick(store: Any) -> None:
        scheduler = _always_lease(Scheduler(store, Recorder(seen), Clock(T0 + 5_000),
                                            owner=store.fires.session.worker))
        start.wait()
        results.append(asyncio.run(scheduler.tick()))

    threads = [threading.Thread(target=tick, args=(s,)) for s in stores]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert seen == [f"cron:task-1:{T0}"]
    assert sorted(len(r) for r in results) == [0, 0, 0, 1]
    assert _pg_rows(pg_url, "SELECT count(*) FROM cron_runs") == [(1,)]
    assert stores[3].get("task-1")["fire_count"] == 1
    for store in stores:
        store.fires.session.close()


def test_a_migrated_homes_schedules_are_served_and_copied_back(
    pg_url: str, tmp_path: Path
) -> None:
    from tether.backends.postgres.connection import PgSession
    from tether.backends.postgres.migrate_home import home_to_store, store_to_home

    home = tmp_path / "home"
    local = CronStore(home)
    task = _hourly(local)
    local.request_trigger(task["id"], T0 - HOUR)  # a trigger request the fleet then serves
    local.close()
    session = PgSession(pg_url, "migrator")
    home_to_store(home, session)
    session.close()

    fleet = _store(pg_url, tmp_path / "other-home", "worker-0")
    assert fleet.get(task["id"]) == task and fleet.active() == [(task, T0 - HOUR)]
    seen: list[str] = []
    scheduler = _always_lease(Scheduler(fleet, Recorder(seen), Clock(T0 + 5_000), owner="worker-0"))
    written = asyncio.run(scheduler.tick())
    assert [r["reason"] for r in written] == ["manual_trigger", "scheduled_time_matched"]
    assert len(seen) == 2 and fleet.pending_triggers() == []
    fleet.fires.session.close()

    back = tmp_path / "back"
    session = PgSession(pg_url, "migrator-back")
    store_to_home(session, back)
    session.close()
    restored = CronStore(back)
    assert restored.get(task["id"])["fire_count"] == 2
    assert [r["reason"] for r in restored.runs(task["id"])] == [
        "manual_trigger", "scheduled_time_matched"]
    assert restored.trigger_result(1) == {**written[0]}
    restored.close()


def test_a_fleet_schedulers_pass_makes_no_database_call_on_the_event_loop(
    pg_url: str, tmp_path: Path
) -> None:
    """Every store call of a pass (presence, lease, triggers, tasks, the claim, the delivery's
    take and commit) runs in a thread: the loop's thread opens no transaction."""
    import contextlib

    from tether.backends.postgres.connection import PgSession
    from tether.backends.postgres.cron_tasks import CronTasks
    from tether.backends.postgres.fires import CronFires
    from tether.runtime.cron.fleet import FleetCronStore

    threads: list[str] = []

    class Watched(PgSession):
        @contextlib.contextmanager
        def transaction(self, doing: str) -> Any:
            threads.append(threading.current_thread().name)
            with super().transaction(doing) as cur:
                yield cur

    session = Watched(pg_url, "worker-0")
    session.open()
    store = FleetCronStore(tmp_path / "home", CronFires(session), CronTasks(session))
    task = _hourly(store)
    store.request_trigger(task["id"], T0)
    threads.clear()
    seen: list[str] = []
    written = asyncio.run(
        Scheduler(store, Recorder(seen), Clock(T0 + 5_000), owner="worker-0").tick())
    assert [r["reason"] for r in written] == ["manual_trigger", "scheduled_time_matched"]
    assert len(threads) > 10 and threading.main_thread().name not in threads, threads
    session.close()


def test_a_run_record_holding_a_nul_is_listed(pg_url: str, tmp_path: Path) -> None:
    """A tool's error text may carry a NUL, which PostgreSQL's jsonb refuses: the run log
    reads the record's fire key as json, and lists it."""
    store = _store(pg_url, tmp_path / "home", "worker-0")
    task = _hourly(store)
    with store.rows.locked(task["id"]) as held:
        held.append_run(T0, {"jobId": task["id"], "error": "bad\x00byte", "fireKey": "k"}, 10)
    assert [r["error"] for r in store.runs(task["id"])] == ["bad\x00byte"]
    store.fires.session.close()


class DeletingRecorder(Recorder):
    """A submitter during whose submit another worker deletes the task: the delete waits for
    the submit (it is still waiting a moment later), then returns."""

    def __init__(self, seen: list[str], other: Any, task_id: str) -> None:
        super().__init__(seen)
        self.other, self.task_id = other, task_id
        self.deleted = threading.Event()
        self.waited = False

    async def submit(
        self, agent_id: str, conversation_id: str, text: str, key: str, on_finished: Any
    ) -> SubmitResult:
        def delete() -> None:
            self.other.delete(self.task_id)
            self.deleted.set()

        threading.Thread(target=delete, daemon=True).start()
        await asyncio.sleep(0.5)
        self.waited = not self.deleted.is_set()
        return await super().submit(agent_id, conversation_id, text, key, on_finished)


def test_a_delete_on_another_worker_waits_for_a_fire_being_submitted(
    pg_url: str, tmp_path: Path
) -> None:
    firing, deleting = (_store(pg_url, tmp_path / f"home-{n}", f"worker-{n}") for n in range(2))
    task = _hourly(firing)
    seen: list[str] = []
    submitter = DeletingRecorder(seen, deleting, task["id"])
    scheduler = _always_lease(Scheduler(firing, submitter, Clock(T0 + 5_000), owner="worker-0"))
    written = asyncio.run(scheduler.tick())
    assert submitter.waited and submitter.deleted.wait(10)
    assert [r["outcome"] for r in written] == ["queued"] and len(seen) == 1
    assert deleting.tasks() == [] and _pg_rows(pg_url, "SELECT state FROM cron_fires") == [
        ("queued",)]
    assert [r["outcome"] for r in deleting.runs(task["id"])] == ["queued"]  # the run is logged
    later = _always_lease(Scheduler(firing, Recorder(seen), Clock(T0 + HOUR + 5_000),
                                    owner="worker-0"))
    assert asyncio.run(later.tick()) == [] and len(seen) == 1  # gone: nothing fires again
    for store in (firing, deleting):
        store.close()
        store.fires.session.close()
