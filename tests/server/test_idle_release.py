"""Idle runtimes are released from the App Server and rebuilt from disk on demand (issue 22
item 5): memory follows the active conversations, and what a client relies on survives (the
event sequence, recent idempotency keys, the mode and folder it chose, the history)."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from tests.server.support import Client, InProcess, point_at, released
from tether.testing.fake_provider import FakeProvider


@pytest.fixture
def project(tmp_path: Path) -> Path:
    d = tmp_path / "project"
    d.mkdir()
    return d


def test_a_released_runtime_is_rebuilt_with_what_must_survive(
    project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    other = tmp_path / "other"
    other.mkdir()

    async def scenario() -> None:
        async with InProcess(project, idle_release_after=0) as srv:
            async with srv.connect() as ws:
                c = Client(ws)
                runtime = (await c.start(project))["runtime"]
                await c.send({"type": "change_device_state", "request_id": "m", "runtime": runtime,
                              "payload": {"mode": "acceptEdits", "cwd": str(other)}})
                await c.wait_for(lambda f: f["type"] == "update_device_status"
                                 and f["device_status"]["current_working_directory"] == str(other))
                await c.say(runtime, "first", request_id="key-1")
                first = await c.of_type("input_accepted")
                await c.of_type("turn_finished")
                last_seq = max(f.get("event_seq", 0) for f in c.seen)
                assert srv.server is not None and len(srv.server.runtimes) == 1  # watched: kept
            key = (runtime["agent_id"], runtime["conversation_id"])
            await released(srv, key)  # the client left and nothing runs: let go
            assert srv.server is not None and srv.server.runtimes == {}

            async with srv.connect() as ws:
                c = Client(ws)
                await c.send({"type": "runtime_start", "request_id": "start-2",
                              "agent_id": runtime["agent_id"],
                              "conversation_id": runtime["conversation_id"]})
                assert (await c.of_type("runtime_start_response"))["success"]
                status = (await c.of_type("update_device_status"))["device_status"]
                assert status["current_working_directory"] == str(other)  # the folder it chose
                assert status["current_permission_mode"] == "acceptEdits"  # and the mode
                await c.say(runtime, "first", request_id="key-1")  # a retry of the same input
                again = await c.of_type("input_accepted")
                assert again["duplicate"] is True and again["queue_item_id"] == first["queue_item_id"]
                await c.say(runtime, "second", request_id="key-2")
                await c.of_type("turn_finished")
                seqs = [f["event_seq"] for f in c.seen if "event_seq" in f]
                assert seqs and min(seqs) > last_seq  # the stream goes on, keys stay unique
            await released(srv, key)

    with FakeProvider([{"text": "one"}, {"text": "two"}]) as fake:
        point_at(fake, monkeypatch)
        asyncio.run(scenario())
        assert len(fake.requests) == 2  # the retried input did not run again
        second = json.dumps(fake.requests[1]["body"])
    assert "first" in second and "one" in second  # rebuilt from disk: the history is there


def test_a_watched_or_busy_runtime_is_not_released(project: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    async def scenario() -> None:
        async with InProcess(project, idle_release_after=0) as srv, srv.connect() as ws:
            c = Client(ws)
            runtime = (await c.start(project))["runtime"]
            await c.say(runtime, "hi")
            await c.of_type("turn_finished")
            await asyncio.sleep(0.2)
            assert srv.server is not None and len(srv.server.runtimes) == 1, runtime

    with FakeProvider([{"text": "hello"}]) as fake:
        point_at(fake, monkeypatch)
        asyncio.run(scenario())
