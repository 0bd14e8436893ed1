"""A schedule fires once per due time across a fleet of real `tether server --store …` workers on
one database and one TETHER_HOME, while the worker running the conversation dies by kill -9 (a
fire's input is deduplicated by its key in the shared queue; the conversation moves by its
lease)."""

from __future__ import annotations

import os
import signal
from pathlib import Path

from tests.e2e.cron_support import MIN, T0, Clock, new_agent, scheduled_env, wait_until
from tests.e2e.test_cron_kill import TAKEOVER, add_tick, fired_prompts, many_more_passes
from tests.server.support import ServerProcess
from tether.testing.fake_provider import FakeProvider


def _holder_pid(url: str) -> int:
    """The pid of the worker holding the (only) conversation lease: a worker's name is
    host:pid:nonce (`checkpoints.new_owner`)."""
    import psycopg

    with psycopg.connect(url) as conn:
        row = conn.execute("SELECT holder FROM conversation_leases").fetchone()
    assert row is not None
    return int(str(row[0]).split(":")[1])


def test_a_schedule_fires_once_per_due_time_while_the_owner_dies(
    tmp_path: Path, pg_url: str,
) -> None:
    project, home = tmp_path / "project", tmp_path / "tether-home"
    project.mkdir()
    agent = new_agent(home)
    clock = Clock(tmp_path / "clock")
    with FakeProvider([{"text": "ticked"}] * 4) as fake:
        env = scheduled_env(fake.url, home, tmp_path, clock)
        task = add_tick(home, agent, env)
        workers = [ServerProcess(env, project, "--store", pg_url) for _ in range(3)]
        try:
            clock.set(T0 - 10_000 + 60 * MIN + task["jitter_offset_ms"])  # the first slot is due
            wait_until(lambda: len(fired_prompts(home, agent)) == 1, 60, "the first fire to run")
            many_more_passes(clock)
            dead = _holder_pid(pg_url)
            for w in workers:
                if w.proc.pid == dead:
                    w.kill_9()
            assert any(w.proc.pid == dead for w in workers)
            clock.advance(60 * MIN + TAKEOVER)  # the next slot, past the dead one's cron lease
            wait_until(lambda: len(fired_prompts(home, agent)) == 2, 60, "the second fire to run")
            many_more_passes(clock)
            prompts = fired_prompts(home, agent)
        finally:
            for w in workers:
                if w.proc.poll() is None:
                    os.kill(w.proc.pid, signal.SIGTERM)
                w.stop()
    assert len(prompts) == 2 and "(fire #1)" in prompts[0] and "(fire #2)" in prompts[1]
    assert len(fake.requests) == 2  # each due time ran once, nothing twice
