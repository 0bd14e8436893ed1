"""Schedules shared by a fleet whose workers have separate TETHER_HOMEs on one database (issue
31): a task added on one worker is the database's (`backends/postgres/cron_tasks.py`), so
another worker lists it, fires it once when the first is gone, and deletes it for everyone; and
`tether cron --store` from yet another home adds, triggers and reads the fleet's tasks."""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
from pathlib import Path
from typing import Any

from websockets.asyncio.client import connect

from tests.e2e.cron_support import T0, Clock, scheduled_env, wait_until
from tests.e2e.support import TETHER
from tests.fleet.test_fleet_cron import (
    Worker,
    _add_hourly_task,
    _due,
    _fired_prompts,
    _fires,
    _rows,
    _stop_all,
)
from tests.server.requests_client import ask
from tests.server.support import Client
from tether.testing.fake_provider import FakeProvider


def _ask(worker: Worker, kind: str, **fields: Any) -> dict[str, Any]:
    """One request to `worker` over its websocket; its response."""

    async def scenario() -> dict[str, Any]:
        async with connect(worker.url, open_timeout=10) as ws:
            return await ask(Client(ws), kind, **fields)

    return asyncio.run(scenario())


def test_a_schedule_added_on_one_worker_is_listed_fired_and_deleted_by_another(
    tmp_path: Path, pg_url: str,
) -> None:
    project = tmp_path / "project"
    project.mkdir()
    clock = Clock(tmp_path / "clock")
    with FakeProvider([{"text": "ticked"}] * 4) as fake:
        env_a = scheduled_env(fake.url, tmp_path / "home-a", tmp_path, clock)
        env_b = scheduled_env(fake.url, tmp_path / "home-b", tmp_path, clock)
        a = Worker(env_a, project, pg_url)
        workers = [a]
        try:
            task = _add_hourly_task(a, project)
            b = Worker(env_b, project, pg_url)
            workers.append(b)
            listed = _ask(b, "cron_list", agent_id=task["agent_id"])
            assert [t["id"] for t in listed["tasks"]] == [task["id"]], listed
            assert not (tmp_path / "home-a" / "cron.db").exists()  # the database's, not a file
            changed = _ask(b, "cron_update", task_id=task["id"], prompt="tick as changed on B")
            assert changed["task"]["prompt"] == "tick as changed on B", changed
            assert _ask(a, "cron_get", task_id=task["id"])["task"] == changed["task"]
            a.kill_9()
            first = _due(task, T0)
            clock.set(first)
            wait_until(lambda: len(_fired_prompts(pg_url)) == 1, 60, "B to fire the task")
            wait_until(lambda: [s for _, s in _fires(pg_url)] == ["done"], 60, "its turn to end")
            for _ in range(4):  # many more passes on B: the due time does not fire again
                clock.advance(5_000)
                time.sleep(0.3)
            prompts = _fired_prompts(pg_url)
            runs = _ask(b, "cron_runs", task_id=task["id"])["page"]["entries"]
            deleted = _ask(b, "cron_delete", task_id=task["id"])
            again = Worker(env_a, project, pg_url)  # A's home again: the task is gone there too
            workers.append(again)
            after = _ask(again, "cron_list", agent_id=task["agent_id"])
            found = _ask(again, "cron_get", task_id=task["id"])
        finally:
            _stop_all(workers)
    assert len(prompts) == 1 and "(fire #1)" in prompts[0] and "tick as changed on B" in prompts[0]
    assert len(fake.requests) == 1
    assert [k for k, _ in _fires(pg_url)] == [f"cron:{task['id']}:{first - task['jitter_offset_ms']}"]
    assert [(r["outcome"], r.get("fireState")) for r in runs] == [("queued", "done")]
    assert deleted["found"] is True and after["tasks"] == [] and found["found"] is False
    assert _rows(pg_url, "SELECT id FROM cron_tasks") == []


def _cron_cli(env: dict[str, str], *args: str) -> Any:
    proc = subprocess.run([TETHER, "cron", *args], capture_output=True, text=True, env=env,
                          timeout=60, check=False)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_tether_cron_with_store_adds_and_triggers_a_task_the_fleet_runs(
    tmp_path: Path, pg_url: str,
) -> None:
    project = tmp_path / "project"
    project.mkdir()
    clock = Clock(tmp_path / "clock")
    with FakeProvider([{"text": "ticked"}] * 2) as fake:
        env = scheduled_env(fake.url, tmp_path / "home-a", tmp_path, clock)
        cli_env = {**env, "TETHER_HOME": str(tmp_path / "home-cli")}
        worker = Worker(env, project, pg_url)
        try:

            async def start() -> dict[str, Any]:
                async with connect(worker.url, open_timeout=10) as ws:
                    return dict((await Client(ws).start(project))["runtime"])

            runtime = asyncio.run(start())
            task = _cron_cli(cli_env, "--store", pg_url, "add", "--agent", runtime["agent_id"],
                             "--conversation", runtime["conversation_id"], "--name", "tick",
                             "--prompt", "tick once", "--cron", "0 * * * *", "--tz", "UTC")
            listed = _ask(worker, "cron_list", agent_id=runtime["agent_id"])
            triggered = _cron_cli(cli_env, "--store", pg_url, "trigger", task["id"])
            wait_until(lambda: len(_fired_prompts(pg_url)) == 1, 60, "the triggered prompt")
            runs = _cron_cli(cli_env, "--store", pg_url, "runs", task["id"])
            local = _cron_cli(cli_env, "list")  # the CLI's own home holds no task
        finally:
            _stop_all([worker])
    assert [t["id"] for t in listed["tasks"]] == [task["id"]]
    assert triggered["outcome"] == "queued" and triggered["reason"] == "manual_trigger"
    assert [r["reason"] for r in runs] == ["manual_trigger"] and local == []
    assert len(fake.requests) == 1
