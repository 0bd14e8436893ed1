"""A schedule fires once per due time across a fleet of real `tether server --store …` workers on
one database (issue 31): the fire's row (`cron:<task>:<due ms>`, claimed → queued → started →
done), the scheduler lease and each scheduler's presence are the database's, so while workers
die by kill -9 (the worker running the conversation, the worker that had just claimed a fire)
and new ones start, each due time reaches the conversation exactly once. The task definitions
(added through a worker's `cron_add`), agents, conversations and transcripts are the store's
too: every worker here has a TETHER_HOME of its own."""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import signal
import time
from pathlib import Path
from typing import Any

from websockets.asyncio.client import connect

from tests.e2e.cron_support import T0, Clock, scheduled_env, wait_until
from tests.server.requests_client import ask
from tests.server.support import Client, ServerProcess
from tether.runtime.cron import schedule
from tether.testing.fake_provider import FakeProvider

FIRING = 'Scheduled task "tick" is firing.'


def _rows(url: str, sql: str, *args: Any) -> list[tuple[Any, ...]]:
    import psycopg

    with psycopg.connect(url) as conn:
        return [tuple(r) for r in conn.execute(sql, args).fetchall()]


def _fired_prompts(url: str) -> list[str]:
    """The scheduled prompts the store's transcript rows hold, in order."""
    out = []
    for (line,) in _rows(url, "SELECT line FROM transcript ORDER BY conversation, seq"):
        message = json.loads(bytes(line)).get("message", {})
        if message.get("role") != "user":
            continue
        content = message["content"]
        text = content if isinstance(content, str) else " ".join(
            p.get("text", "") for p in content if p.get("type") == "text")
        if text.startswith(FIRING):
            out.append(text)
    return out


def _fires(url: str) -> list[tuple[str, str]]:
    return [(str(k), str(s)) for k, s in _rows(url, "SELECT key, state FROM cron_fires ORDER BY slot_ms")]


def _holder_pid(url: str, sql: str) -> int:
    """The pid in the worker name a lease row holds: a worker's name is host:pid:nonce."""
    rows = _rows(url, sql)
    assert len(rows) == 1, rows
    return int(str(rows[0][0]).split(":")[1])


def _add_hourly_task(worker: Worker, cwd: Path) -> dict[str, Any]:
    """An agent and conversation made through `worker` (so in the store), and an hourly task
    "tick" into that conversation added through its `cron_add`."""

    async def scenario() -> dict[str, Any]:
        async with connect(worker.url, open_timeout=10) as ws:
            client = Client(ws)
            runtime = (await client.start(cwd))["runtime"]
            answer = await ask(
                client, "cron_add", agent_id=runtime["agent_id"],
                conversation_id=runtime["conversation_id"], name="tick", prompt="tick once",
                cron="0 * * * *", recurring=True, timezone="UTC",
            )
            assert answer.get("task"), answer
            return dict(answer["task"])

    return asyncio.run(scenario())


def _due(task: dict[str, Any], after_ms: int) -> int:
    """The first due time of the task after `after_ms`, with its jitter."""
    return schedule.next_fire_ms(task["cron"], task["timezone"], after_ms) + int(
        task.get("jitter_offset_ms") or 0)


def _many_more_passes(clock: Clock) -> None:
    """Many more scheduler passes (0.05 s each), the clock moving on a little each time."""
    for _ in range(4):
        clock.advance(5_000)
        time.sleep(0.3)


_homes = itertools.count()


def _own_home(env: dict[str, str]) -> dict[str, str]:
    """`env` with a TETHER_HOME no other worker uses: the fleet shares nothing but the store."""
    return {**env, "TETHER_HOME": f"{env['TETHER_HOME']}-{next(_homes)}"}


class Worker(ServerProcess):
    """A `tether server --store … --log-format json` whose stderr (one JSON object per line) is
    kept when it ends, however it ends."""

    def __init__(self, env: dict[str, str], cwd: Path, url: str) -> None:
        super().__init__(env, cwd, "--store", url, "--log-format", "json")
        self.log = ""

    def stop(self, sig: int | None = None) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(sig or signal.SIGTERM)
        self.proc.wait(timeout=40)  # a held scheduler takes its 20 s to give up
        if self.proc.stderr is not None and not self.proc.stderr.closed:
            self.log = self.proc.stderr.read()
        return super().stop(sig)


def _events(workers: list[Worker], *names: str) -> list[dict[str, Any]]:
    """The fleet events named, from every worker's JSON-line log, in no particular order."""
    out = []
    for w in workers:
        for line in w.log.splitlines():
            if line.startswith("{"):
                event = json.loads(line)  # every line of a json log is one JSON object
                if event.get("logger") == "tether.fleet" and event.get("event") in names:
                    out.append({**event, "pid": w.proc.pid})
    return out


def _stop_all(workers: list[Worker]) -> None:
    for w in workers:
        if w.proc.poll() is None:
            os.kill(w.proc.pid, signal.SIGTERM)
        w.stop()


def test_a_schedule_fires_once_per_due_time_while_the_owner_dies(
    tmp_path: Path, pg_url: str,
) -> None:
    project, home = tmp_path / "project", tmp_path / "tether-home"
    project.mkdir()
    clock = Clock(tmp_path / "clock")
    with FakeProvider([{"text": "ticked"}] * 4) as fake:
        env = scheduled_env(fake.url, home, tmp_path, clock)
        workers = [Worker(_own_home(env), project, pg_url) for _ in range(3)]
        try:
            task = _add_hourly_task(workers[0], project)
            first = _due(task, T0)
            clock.set(first)
            wait_until(lambda: len(_fired_prompts(pg_url)) == 1, 60, "the first fire to run")
            _many_more_passes(clock)
            dead = _holder_pid(pg_url, "SELECT holder FROM conversation_leases")
            for w in workers:
                if w.proc.pid == dead:
                    w.kill_9()
            assert any(w.proc.pid == dead for w in workers)
            clock.set(_due(task, first))  # the next due time
            wait_until(lambda: len(_fired_prompts(pg_url)) == 2, 60, "the second fire to run")
            wait_until(lambda: [s for _, s in _fires(pg_url)] == ["done", "done"], 60,
                       "both fires' turns to end")
            _many_more_passes(clock)
            prompts = _fired_prompts(pg_url)
        finally:
            _stop_all(workers)
    assert len(prompts) == 2 and "(fire #1)" in prompts[0] and "(fire #2)" in prompts[1]
    assert len(fake.requests) == 2  # each due time ran once, nothing twice
    assert [k for k, _ in _fires(pg_url)] == [
        f"cron:{task['id']}:{first - task['jitter_offset_ms']}",
        f"cron:{task['id']}:{_due(task, first) - task['jitter_offset_ms']}",
    ]


def test_the_worker_that_claimed_a_fire_dies_and_another_finishes_it_once(
    tmp_path: Path, pg_url: str,
) -> None:
    """kill -9 of the scheduler right after it claimed a due time (its row `claimed` in the
    database, nothing submitted), a new worker started: the fire is taken over at once (the
    dead worker's session is gone, no clock has to run out) and runs once; the next due time,
    with the workers changed again, runs once too."""
    project, home = tmp_path / "project", tmp_path / "tether-home"
    project.mkdir()
    clock = Clock(tmp_path / "clock")
    held = tmp_path / "held"
    with FakeProvider([{"text": "ticked"}] * 4) as fake:
        env = scheduled_env(fake.url, home, tmp_path, clock)
        claimer = Worker(_own_home({**env, "TETHER_CRON_HOLD": f"claimed:{held}"}), project,
                         pg_url)
        workers = [claimer]
        try:
            task = _add_hourly_task(claimer, project)  # alone: the schedules are its to run
            first = _due(task, T0)
            clock.set(first)
            wait_until(held.exists, 60, "the first worker to claim the fire")
            workers += [Worker(_own_home(env), project, pg_url) for _ in range(2)]
            assert [s for _, s in _fires(pg_url)] == ["claimed"]
            assert _holder_pid(pg_url, "SELECT owner FROM cron_fires") == claimer.proc.pid
            claimer.kill_9()
            workers.append(Worker(_own_home(env), project, pg_url))  # a worker starts
            wait_until(lambda: [s for _, s in _fires(pg_url)] == ["done"], 60,
                       "another worker to finish the dead one's fire")
            assert len(_fired_prompts(pg_url)) == 1
            assert _holder_pid(pg_url, "SELECT owner FROM cron_fires") != claimer.proc.pid
            lease = _holder_pid(pg_url, "SELECT owner FROM cron_leases WHERE name = 'scheduler'")
            for w in workers[1:]:
                if w.proc.pid == lease:
                    w.kill_9()  # the new schedule runner dies too, idle
            workers.append(Worker(_own_home(env), project, pg_url))
            clock.set(_due(task, first))
            wait_until(lambda: [s for _, s in _fires(pg_url)] == ["done", "done"], 60,
                       "the second due time to run")
            _many_more_passes(clock)
            prompts = _fired_prompts(pg_url)
        finally:
            _stop_all(workers)
    assert len(prompts) == 2 and "(fire #1)" in prompts[0] and "(fire #2)" in prompts[1]
    assert len(fake.requests) == 2 and fake.violations == []
    keys = [k for k, _ in _fires(pg_url)]
    assert len(keys) == 2
    # Each step of it is one JSON line of the worker that took it.
    claimed = _events(workers, "fire_claimed")
    assert sorted(e["key"] for e in claimed) == keys  # each due time claimed once, fleet-wide
    first_claim = next(e for e in claimed if e["key"] == keys[0])
    assert first_claim["level"] == "info" and first_claim["pid"] == claimer.proc.pid
    taken = _events(workers, "fire_taken_over")
    assert [(e["key"], e["previous"].split(":")[1]) for e in taken] == [
        (keys[0], str(claimer.proc.pid))]
    runners = _events(workers, "scheduler_lease_taken")
    assert len(runners) >= 3 and all(e["worker"].split(":")[1] == str(e["pid"]) for e in runners)
