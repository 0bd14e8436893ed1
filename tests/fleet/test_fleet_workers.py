"""Three worker processes on one real PostgreSQL (issue 31): the conversation's owner killed -9
mid-turn, a paused (SIGSTOP) owner whose lease moved, an input sent to a worker that does not
own the conversation, and a schedule due while workers die. The workers are
`tests/fleet/worker.py`, running the store's real code; the database is never mocked."""

from __future__ import annotations

import contextlib
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fleet.support import CODEC, CONVERSATION, item, read_events, wait_for

ROOT = Path(__file__).resolve().parents[2]


class Fleet:
    """The worker processes a test started (and so may kill), by name."""

    def __init__(self, url: str, logs: Path, **options: float | str) -> None:
        self.url = url
        self.logs = logs
        self.options = [f"--{k.replace('_', '-')}={v}" for k, v in options.items()]
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self.count = 0

    def start(self) -> str:
        self.count += 1
        name = f"worker-{self.count}"
        with (self.logs / f"{name}.stderr").open("wb") as stderr:
            self.procs[name] = subprocess.Popen(
                [sys.executable, "-m", "tests.fleet.worker", self.url, name, str(self.logs),
                 *self.options],
                cwd=ROOT, stderr=stderr,
            )
        return name

    def signal(self, name: str, sig: int) -> None:
        os.kill(self.procs[name].pid, sig)
        if sig == signal.SIGKILL:
            self.procs[name].wait(timeout=30)

    def alive(self) -> list[str]:
        return [n for n, p in self.procs.items() if p.poll() is None]

    def send(self, worker: str, item_id: str, text: str) -> None:
        """An input sent to `worker` (it accepts it into the shared queue)."""
        inbox = self.logs / f"{worker}.inbox"
        inbox.mkdir(exist_ok=True)
        draft = self.logs / f".{item_id}"
        draft.write_text(text)
        draft.rename(inbox / item_id)

    def stop(self) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    proc.send_signal(signal.SIGCONT)
                    proc.kill()
                proc.wait(timeout=30)

    def crashed(self) -> str:
        """stderr of workers that died by themselves (a traceback is a test failure)."""
        out = []
        for name, proc in self.procs.items():
            if proc.returncode not in (None, -signal.SIGKILL):
                out.append(f"{name} exited {proc.returncode}: "
                           + (self.logs / f"{name}.stderr").read_text()[-2000:])
        return "\n".join(out)


@contextlib.contextmanager
def fleet(url: str, logs: Path, workers: int, **options: float | str) -> Iterator[Fleet]:
    running = Fleet(url, logs, **options)
    try:
        for _ in range(workers):
            running.start()
        yield running
        assert not running.crashed(), running.crashed()
    finally:
        running.stop()


@pytest.fixture
def logs(tmp_path: Path) -> Path:
    path = tmp_path / "logs"
    path.mkdir()
    return path


@pytest.fixture
def client(pg_url: str) -> Iterator[Any]:
    """A queue outside the fleet (a client's view of the shared database)."""
    from tether.backends.postgres.connection import PgSession
    from tether.backends.postgres.input_queue import PgInputQueue

    queue = PgInputQueue(PgSession(pg_url, "test-client"), CODEC)
    yield queue
    queue.close()


def _event(kind: str, **fields: Any) -> Any:
    return lambda e: e["event"] == kind and all(e.get(k) == v for k, v in fields.items())


def _states(client: Any) -> dict[str, tuple[str, str | None]]:
    rows = client.of_conversation(CONVERSATION, ("queued", "started", "done", "cancelled",
                                                 "interrupted", "not_run"))
    return {r.item_id: (r.state, r.reason) for r in rows}


def _transcript(pg_url: str) -> list[tuple[int, str, int]]:
    import psycopg

    with psycopg.connect(pg_url) as conn:
        rows = conn.execute(
            "SELECT seq, entry->>'id', token FROM transcript WHERE conversation = %s ORDER BY seq",
            (CONVERSATION,),
        ).fetchall()
    return [(int(s), str(i), int(t)) for s, i, t in rows]


def _assert_one_holder_per_token(events: list[dict[str, Any]]) -> None:
    """A conversation runs on one worker at a time: each token was taken once, and every turn
    ran under a token its own worker held."""
    taken = Counter(e["token"] for e in events if e["event"] == "lease")
    assert taken and max(taken.values()) == 1, taken
    holder = {e["token"]: e["worker"] for e in events if e["event"] == "lease"}
    for e in events:
        if e["event"] in ("turn_started", "turn_done"):
            assert holder[e["token"]] == e["worker"], e


def _wait_settled(client: Any, items: set[str], deadline_s: float = 90.0) -> dict[str, Any]:
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        states = _states(client)
        if items <= states.keys() and all(states[i][0] in ("done", "interrupted") for i in items):
            return states
        time.sleep(0.1)
    raise AssertionError(f"inputs not settled within {deadline_s} s: {_states(client)}")


def test_the_owner_killed_mid_turn_leaves_an_unknown_outcome_and_nothing_re_run(
    pg_url: str, logs: Path, client: Any
) -> None:
    # A long lease: the takeover comes from the killed worker's session ending, not the clock.
    with fleet(pg_url, logs, 3, ttl=120, idle_wait=1) as workers:
        client.accept_many([item("q-1", "sleep:120"), item("q-2"), item("q-3")])
        started = wait_for(logs, _event("turn_started", item="q-1"), "q-1's turn starting")
        workers.signal(started["worker"], signal.SIGKILL)
        heir = wait_for(logs, _event("lease", token=started["token"] + 1), "a takeover")
        states = _wait_settled(client, {"q-1", "q-2", "q-3"})
    assert heir["worker"] != started["worker"] and heir["interrupted"] == ["q-1"]
    assert states["q-1"][0] == "interrupted" and "outcome is unknown" in str(states["q-1"][1])
    assert states["q-2"][0] == states["q-3"][0] == "done"
    turns = Counter(e["item"] for e in read_events(logs) if e["event"] == "turn_started")
    assert turns == {"q-1": 1, "q-2": 1, "q-3": 1}  # nothing ran twice
    _assert_one_holder_per_token(read_events(logs))
    ids = [i for _, i, _ in _transcript(pg_url)]
    assert ids == ["user-q-1", "user-q-2", "assistant-q-2", "user-q-3", "assistant-q-3"]
    assert [s for s, _, _ in _transcript(pg_url)] == [1, 2, 3, 4, 5]


def test_a_paused_owner_whose_lease_moved_has_its_writes_refused(
    pg_url: str, logs: Path, client: Any
) -> None:
    with fleet(pg_url, logs, 3, ttl=2, idle_wait=0.5) as workers:
        client.accept(item("q-1", "sleep:120"))
        started = wait_for(logs, _event("turn_started", item="q-1"), "q-1's turn starting")
        owner = started["worker"]
        workers.signal(owner, signal.SIGSTOP)  # alive to the database, renewing nothing
        heir = wait_for(logs, _event("lease", token=started["token"] + 1), "a takeover")
        client.accept(item("q-2"))
        wait_for(logs, _event("turn_done", item="q-2"), "q-2 run by the new owner")
        workers.signal(owner, signal.SIGCONT)
        refused = wait_for(logs, _event("refused", worker=owner), "the old owner's refusal")
        states = _states(client)
    assert heir["worker"] != owner and heir["interrupted"] == ["q-1"]
    assert f"lease (token {started['token']}) is no longer current" in refused["error"]
    assert f"held by {heir['worker']}" in refused["error"]
    assert states["q-1"][0] == "interrupted" and states["q-2"][0] == "done"
    rows = _transcript(pg_url)
    assert [i for _, i, _ in rows] == ["user-q-1", "user-q-2", "assistant-q-2"]
    assert [t for _, i, t in rows if i == "user-q-1"] == [started["token"]]
    assert not any(e["event"] == "turn_done" and e["item"] == "q-1" for e in read_events(logs))


def test_an_input_sent_to_a_worker_that_does_not_own_the_conversation_reaches_the_owner(
    pg_url: str, logs: Path, client: Any
) -> None:
    # The owner waits up to 60 s between looks: only the notification can wake it sooner.
    with fleet(pg_url, logs, 3, ttl=120, idle_wait=60) as workers:
        owner = wait_for(logs, _event("lease"), "a worker taking the conversation")["worker"]
        wait_for(logs, _event("waiting", worker=owner), "the owner waiting for input")
        other = next(n for n in workers.alive() if n != owner)
        workers.send(other, "q-1", "hello")
        accepted = wait_for(logs, _event("accepted", item="q-1"), "the non-owner accepting it")
        done = wait_for(logs, _event("turn_done", item="q-1"), "the owner running it", 30)
    assert accepted["worker"] == other and done["worker"] == owner
    mine = [e for e in read_events(logs) if e["worker"] == owner]
    kinds = [e["event"] for e in mine]
    assert kinds[kinds.index("waiting"):][:4] == ["waiting", "woken", "turn_started", "turn_done"]
    assert next(e for e in mine if e["event"] == "woken")["conversations"] == [CONVERSATION]
    assert _states(client)["q-1"][0] == "done"


def test_a_schedule_due_while_workers_die_fires_once(
    pg_url: str, logs: Path, client: Any
) -> None:
    due_times = 8
    first = time.time() + 1.0
    chaos = random.Random(31)
    schedule = f"nightly:{first}:0.4:{due_times}"
    with fleet(pg_url, logs, 3, ttl=3, idle_wait=0.3, schedule=schedule) as workers:
        while time.time() < first + 0.4 * due_times + 0.5:  # kill one now and then, replace it
            time.sleep(chaos.uniform(0.2, 0.6))
            victim = chaos.choice(workers.alive())
            workers.signal(victim, signal.SIGKILL)
            workers.start()
        items = {f"nightly-{n}" for n in range(due_times)}
        states = _wait_settled(client, items)
    import psycopg

    with psycopg.connect(pg_url) as conn:
        fires = conn.execute("SELECT count(*), count(DISTINCT due_at) FROM schedule_fires").fetchone()
        keyed = conn.execute(
            "SELECT count(*) FROM inputs WHERE idempotency_key LIKE 'nightly:%'"
        ).fetchone()
    assert fires == (due_times, due_times) and keyed == (due_times,)
    fired = Counter(e["n"] for e in read_events(logs) if e["event"] == "fired")
    assert max(fired.values()) == 1  # (a worker killed just after its commit logs nothing)
    turns = Counter(e["item"] for e in read_events(logs) if e["event"] == "turn_started")
    assert max(turns.values()) == 1  # none ran twice; an interrupted one is reported, not re-run
    _assert_one_holder_per_token(read_events(logs))
    ids = Counter(i for _, i, _ in _transcript(pg_url))
    for name in items:
        state = states[name][0]
        assert ids[f"user-{name}"] == 1
        assert ids[f"assistant-{name}"] == (1 if state == "done" else 0), (name, state)


def test_an_input_acknowledged_by_a_worker_killed_right_after_still_runs_once(
    pg_url: str, logs: Path, client: Any
) -> None:
    with fleet(pg_url, logs, 3, ttl=120, idle_wait=60) as workers:
        owner = wait_for(logs, _event("lease"), "a worker taking the conversation")["worker"]
        other = next(n for n in workers.alive() if n != owner)
        workers.send(other, "q-1", "hello")
        wait_for(logs, _event("accepted", item="q-1"), "the non-owner acknowledging it")
        workers.signal(other, signal.SIGKILL)  # acknowledged, then gone
        done = wait_for(logs, _event("turn_done", item="q-1"), "the owner running it")
    assert done["worker"] == owner
    assert _states(client)["q-1"][0] == "done"
    assert Counter(e["item"] for e in read_events(logs) if e["event"] == "turn_started") == {"q-1": 1}
