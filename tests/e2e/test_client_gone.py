"""End to end: a stream-json client that goes away (stdin closed) mid-turn stops the turn at once,
and every interrupt says what interrupted it (issue 18 items 6 and 7)."""

from __future__ import annotations

import os
import queue
import time
from pathlib import Path

from tests.e2e.test_bidirectional import Client, bash
from tether.testing.fake_provider import FakeProvider


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _wait_for_file(path: Path) -> str:
    deadline = time.monotonic() + 20
    while not (path.exists() and path.read_text().strip()) and time.monotonic() < deadline:
        time.sleep(0.05)
    return path.read_text().strip()


def test_closing_stdin_mid_turn_aborts_it_and_runs_nothing_more(workdir: Path) -> None:
    first = bash("sleep 30 & echo $! > child.pid; wait; touch first-finished")
    script = [{"tool_calls": [first]}, {"tool_calls": [bash("touch second-ran")]}, {"text": "never"}]
    with FakeProvider(script) as fake:
        c = Client(fake.url, workdir, "--yolo")
        c.user("go")
        c.user("queued by the client before it left")
        child = int(_wait_for_file(workdir / "child.pid"))
        started = time.monotonic()
        assert c.proc.stdin is not None
        c.proc.stdin.close()  # the client goes away; its reader end stays open to see the rest
        code = c.proc.wait(timeout=20)
        assert time.monotonic() - started < 10
        requests = len(fake.requests)
        events = []
        while True:  # the pump thread reads what tether wrote before it exited, then EOF
            try:
                events.append(c.lines.get(timeout=2))
            except queue.Empty:
                break
        c.close()
    assert code == 0
    time.sleep(0.2)
    assert not _alive(child)
    assert not (workdir / "first-finished").exists() and not (workdir / "second-ran").exists()
    assert requests == 1  # nothing was sent to the model after the client went away
    errors = [e for e in events if e["type"] == "error"]
    results = [e for e in events if e["type"] == "result"]
    assert errors and errors[-1]["message"] == "Interrupted: stdin closed (the client went away)"
    assert [r["subtype"] for r in results] == ["interrupted"]


def test_an_interrupt_request_is_named_as_such(workdir: Path) -> None:
    with FakeProvider([{"tool_calls": [bash("sleep 30 & echo $! > child.pid; wait")]}, {"text": "x"}]) as fake:
        c = Client(fake.url, workdir, "--yolo")
        c.user("go")
        _wait_for_file(workdir / "child.pid")
        c.send({"type": "control_request", "request_id": "int_1", "request": {"subtype": "interrupt"}})
        error = c.wait_for(lambda e: e["type"] == "error")
        result = c.result()
        assert c.close() == 0
    assert error["message"] == "Interrupted by the client (interrupt request)"
    assert result["subtype"] == "interrupted"
