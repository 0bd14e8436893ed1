"""A scheduled fire runs exactly once per due time across `kill -9` of the real `tether server`
that holds the scheduler lease: killed right after the fire's claim commits, right after its run
record says `queued` while the prompt still waits behind a busy turn, and in the middle of the
prompt's own turn; a second server takes over and the transcript holds the prompt once."""

from __future__ import annotations

import asyncio
import os
import signal
import sqlite3
import time
from pathlib import Path
from typing import Any

import pytest
from websockets.asyncio.client import connect

from tests.e2e.cron_support import (
    MIN,
    T0,
    Clock,
    add_task,
    cron,
    new_agent,
    ok,
    scheduled_env,
    wait_until,
)
from tests.server.support import Client, ServerProcess
from tether.backends.local.store import LocalStore
from tether.protocol.messages import TextPart, UserMessage
from tether.testing.fake_provider import FakeProvider

TAKEOVER = 91_000  # past the dead server's scheduler lease and presence


def add_tick(home: Path, agent: str, env: dict[str, str]) -> Any:
    """An hourly task "tick" into the default conversation."""
    return add_task(
        home, agent, "tick", "tick once", "--every", "1h", conversation="default", extra=env
    )


def many_more_passes(clock: Clock) -> None:
    """Many more passes of the scheduler, the clock moving on a little each time."""
    for _ in range(4):
        clock.advance(5_000)
        time.sleep(0.3)


def fired_prompts(home: Path, agent: str) -> list[str]:
    """The scheduled prompts the default conversation's transcript holds, in order."""
    out = []
    for message in LocalStore(home).transcript(agent, "default").load():
        if isinstance(message, UserMessage):
            text = "".join(p.text for p in message.content if isinstance(p, TextPart))
            if text.startswith('Scheduled task "tick" is firing.'):
                out.append(text)
    return out


def fire_states(home: Path) -> list[str]:
    db = sqlite3.connect(home / "cron.db")
    try:
        return [row[0] for row in db.execute("SELECT state FROM fires ORDER BY updated_ms, key")]
    finally:
        db.close()


@pytest.mark.parametrize("point", ["claimed", "queued behind a busy turn", "mid-turn"])
def test_kill_9_of_the_lease_holder_then_a_takeover_runs_each_due_time_once(
    tmp_path: Path, workdir: Path, tether_home: Path, point: str
) -> None:
    home = tether_home
    agent = new_agent(home)
    clock = Clock(tmp_path / "clock")
    marker = tmp_path / "held"
    busy = point == "queued behind a busy turn"
    script: list[dict[str, Any]] = []
    if busy:
        script.append({"text": "a client's slow answer", "delay_ms": 30_000})
    if point == "mid-turn":
        script.append({"text": "the first try, cut by the kill", "delay_ms": 30_000})
    script += [{"text": "ticked"}] * 4
    with FakeProvider(script) as fake:
        env = scheduled_env(fake.url, home, tmp_path, clock)
        task = add_tick(home, agent, env)
        hold = "claimed" if point == "claimed" else "queued"
        first = ServerProcess({**env, "TETHER_CRON_HOLD": f"{hold}:{marker}"}, workdir)
        second: ServerProcess | None = None
        try:

            async def scenario() -> None:
                if not busy:
                    await fire_and_kill()
                    return
                async with connect(first.url) as ws:  # a client's turn keeps the conversation busy
                    c = Client(ws)
                    runtime = (await c.start(workdir, agent_id=agent, conversation_id="default"))[
                        "runtime"
                    ]
                    await c.say(runtime, "take your time")
                    await asyncio.to_thread(wait_until, lambda: fake.requests, 20, "the slow turn")
                    await fire_and_kill()

            async def fire_and_kill() -> None:
                clock.set(T0 - 10_000 + 60 * MIN + task["jitter_offset_ms"])  # the slot is due
                await asyncio.to_thread(wait_until, marker.exists, 30, f"the fire to be {hold}")
                if point == "mid-turn":
                    await asyncio.to_thread(
                        wait_until, lambda: fake.requests, 20, "the prompt's turn to start"
                    )
                first.kill_9()

            asyncio.run(scenario())
            if point == "claimed":
                assert fired_prompts(home, agent) == [] and fire_states(home) == ["claimed"]
            elif busy:
                assert fired_prompts(home, agent) == []  # the record says queued; it was lost
                assert [r["outcome"] for r in ok(cron("runs", task["id"], home=home))] == ["queued"]
            else:
                assert len(fired_prompts(home, agent)) == 1  # in the transcript before the kill
            second = ServerProcess(env, workdir)
            clock.advance(TAKEOVER)  # the dead holder's lease and presence run out
            wait_until(
                lambda: fire_states(home) and fire_states(home)[0] in ("started", "done"),
                30,
                "the takeover to settle the fire",
            )
            if point != "mid-turn":
                wait_until(lambda: fired_prompts(home, agent), 30, "the prompt to run")
            many_more_passes(clock)  # nothing fires again
            prompts = fired_prompts(home, agent)
            assert len(prompts) == 1, prompts
            assert "Prompt: tick once" in prompts[0] and "(fire #1)" in prompts[0]
            runs = ok(cron("runs", task["id"], home=home))
            assert [r["outcome"] for r in runs] == ["queued"]
            got = ok(cron("get", task["id"], home=home))
            assert got["fire_count"] == 1
        finally:
            first.stop()
            if second is not None:
                assert second.stop() == 0


def test_a_second_live_server_finishes_the_fire_of_the_holder_killed_after_its_claim(
    tmp_path: Path, workdir: Path, tether_home: Path
) -> None:
    home = tether_home
    agent = new_agent(home)
    clock = Clock(tmp_path / "clock")
    with FakeProvider([{"text": "ticked"}] * 3) as fake:
        env = scheduled_env(fake.url, home, tmp_path, clock)
        task = add_tick(home, agent, env)
        # Either may hold the lease when the slot comes (an hour of clock runs it out): the
        # one that claims the fire stops there, and is the one killed.
        markers = [tmp_path / "held-0", tmp_path / "held-1"]
        servers = [
            ServerProcess({**env, "TETHER_CRON_HOLD": f"claimed:{m}"}, workdir) for m in markers
        ]
        try:
            clock.set(T0 - 10_000 + 60 * MIN + task["jitter_offset_ms"])
            wait_until(lambda: any(m.exists() for m in markers), 30, "a claim")
            dead = 0 if markers[0].exists() else 1
            servers[dead].kill_9()
            time.sleep(1.0)
            assert fired_prompts(home, agent) == []  # nobody takes it while the lease holds
            assert fire_states(home) == ["claimed"]
            clock.advance(TAKEOVER)
            wait_until(lambda: fired_prompts(home, agent), 30, "the other server's takeover")
            wait_until(lambda: fire_states(home) == ["done"], 30, "the fire's turn to end")
            many_more_passes(clock)
            assert len(fired_prompts(home, agent)) == 1
            assert not markers[1 - dead].exists()  # the survivor fired nothing of its own
            runs = ok(cron("runs", task["id"], home=home))
            assert [(r["outcome"], r["fireState"]) for r in runs] == [("queued", "done")]
        finally:
            codes = [server.stop() for server in servers]
        assert codes[1 - dead] == 0


def test_kill_9_at_seeded_moments_around_each_fire_runs_every_due_time_once(
    tmp_path: Path, workdir: Path, tether_home: Path
) -> None:
    """The tester's measurement, seeded: the lease holder killed at a random moment (0-400 ms)
    after each of five due times, a new server each time; every due time runs exactly once."""
    import random

    rng = random.Random(2902)
    home = tether_home
    agent = new_agent(home)
    clock = Clock(tmp_path / "clock")
    rounds = 5
    with FakeProvider([{"text": "ticked", "delay_ms": 100}] * (2 * rounds)) as fake:
        env = scheduled_env(fake.url, home, tmp_path, clock)
        task = add_tick(home, agent, env)
        first_slot = T0 - 10_000 + 60 * MIN
        server = ServerProcess(env, workdir)
        try:
            for n in range(rounds):
                clock.set(first_slot + n * 60 * MIN + task["jitter_offset_ms"])
                time.sleep(rng.uniform(0.0, 0.4))
                os.kill(server.proc.pid, signal.SIGKILL)
                server.stop()
                server = ServerProcess(env, workdir)
                clock.advance(TAKEOVER)
                wait_until(
                    lambda n=n: (
                        len(fired_prompts(home, agent)) == n + 1
                        and set(fire_states(home)) <= {"started", "done"}
                    ),
                    30,
                    f"due time {n + 1} to reach the conversation",
                )
            time.sleep(1.0)
        finally:
            assert server.stop() == 0
    prompts = fired_prompts(home, agent)
    slots = [line for p in prompts for line in p.splitlines() if line.startswith("Scheduled for")]
    assert len(prompts) == rounds and len(set(slots)) == rounds, prompts
    runs = ok(cron("runs", task["id"], home=home))
    assert [r["outcome"] for r in runs] == ["queued"] * rounds
