"""Cross-worker turn events (issue 31): three real `tether server --store` workers on one
database and one TETHER_HOME against the fake provider. A client of a worker that does not run
the conversation sees the owner's whole turn (the same frames with the same `event_seq` as the
owner's own client), answers its approval from there and aborts from there; after kill -9 of the
owner mid-turn, that client sees the turn reported interrupted, and the provider is never asked
again for it."""

from __future__ import annotations

import asyncio
from pathlib import Path

from websockets.asyncio.client import connect

from tests.fleet.support import wait_for_async
from tests.server.support import Client, ServerProcess, bash, server_env
from tether.testing.fake_provider import FakeProvider

TURN_FRAMES = ("stream_delta", "control_request", "turn_finished")


def _turn_frames(client: Client, after: int = 0) -> list[tuple[int, str]]:
    return [(f["event_seq"], f["type"]) for f in client.seen
            if f.get("type") in TURN_FRAMES and f["event_seq"] > after]



def test_a_client_of_a_non_owner_sees_the_whole_turn_and_answers_its_approval(
    tmp_path: Path, pg_url: str,
) -> None:
    project, home = tmp_path / "project", tmp_path / "tether-home"
    project.mkdir()
    script = [{"text": "warm"}, {"tool_calls": [bash("echo approved > out.txt")]},
              {"text": "file made"}, {"text": "third"}]
    with FakeProvider(script) as fake:
        env = server_env(fake.url, home, tmp_path)
        workers = [ServerProcess(env, project, "--store", pg_url) for _ in range(3)]
        try:
            async def scenario() -> None:
                async with connect(workers[0].url) as ws_a, connect(workers[1].url) as ws_b:
                    a, b = Client(ws_a), Client(ws_b)
                    runtime = (await a.start(project))["runtime"]
                    await a.say(runtime, "warm up", request_id="in-1")  # worker 0 owns it now
                    await a.of_type("turn_finished", request_id="in-1")
                    await b.start(project, agent_id=runtime["agent_id"],
                                  conversation_id=runtime["conversation_id"])
                    await asyncio.sleep(0.5)  # b's worker is following the conversation
                    await b.say(runtime, "make a file", request_id="in-2")
                    accepted = await b.of_type("input_accepted", request_id="in-2")
                    assert accepted["accepted"] and accepted["disposition"] == "queued"
                    req = await b.of_type("control_request", timeout=30)
                    assert req["request"]["tool_name"] == "Bash"
                    await b.answer(runtime, req["request_id"])  # answered on the non-owner
                    done = await b.of_type("turn_finished", timeout=30, request_id="in-2")
                    assert done["stop_reason"] == "end_turn", done
                    await a.of_type("turn_finished", request_id="in-2")
                    assert (project / "out.txt").read_text() == "approved\n"
                    # The same frames, the same seq numbers, in order, none twice.
                    start = req["event_seq"] - 1
                    seen_b = [x for x in _turn_frames(b) if x[0] >= start - 50]
                    seen_a = [x for x in _turn_frames(a) if x[0] >= seen_b[0][0]]
                    assert seen_b == seen_a and len(set(seen_b)) == len(seen_b)
                    assert [s for s, _ in seen_b] == sorted(s for s, _ in seen_b)
                    assert any(d["message_type"] == "tool_return_message" for d in
                               (f["delta"] for f in b.seen if f.get("type") == "stream_delta"))

            asyncio.run(scenario())
            assert len(fake.requests) == 3 and fake.violations == []
        finally:
            for w in workers:
                w.stop()


def test_kill_9_of_the_owner_mid_turn_is_reported_interrupted_to_another_workers_client(
    tmp_path: Path, pg_url: str,
) -> None:
    project, home = tmp_path / "project", tmp_path / "tether-home"
    project.mkdir()
    script = [{"text": "warm"}, {"fault": {"hang": True}}, {"text": "after"}]
    with FakeProvider(script) as fake:
        env = server_env(fake.url, home, tmp_path)
        workers = [ServerProcess(env, project, "--store", pg_url) for _ in range(3)]
        try:
            async def scenario() -> None:
                async with connect(workers[0].url) as ws_a, connect(workers[1].url) as ws_b:
                    a, b = Client(ws_a), Client(ws_b)
                    runtime = (await a.start(project))["runtime"]
                    await a.say(runtime, "warm up", request_id="in-1")
                    await a.of_type("turn_finished", request_id="in-1")
                    await b.start(project, agent_id=runtime["agent_id"],
                                  conversation_id=runtime["conversation_id"])
                    await asyncio.sleep(0.5)
                    await b.say(runtime, "hang", request_id="in-2")
                    await b.of_type("input_accepted", request_id="in-2")
                    await wait_for_async(lambda: len(fake.requests) == 2, "the hanging turn's request")
                    workers[0].kill_9()
                    done = await b.of_type("turn_finished", timeout=60, request_id="in-2")
                    assert done["stop_reason"] == "error" and "not run again" in done["error"]
                    # The conversation goes on from b's worker (or the third), seqs still growing.
                    await b.say(runtime, "next", request_id="in-3")
                    after = await b.of_type("turn_finished", timeout=60, request_id="in-3")
                    assert after["stop_reason"] == "end_turn"
                    assert after["event_seq"] > done["event_seq"]

            asyncio.run(scenario())
            assert len(fake.requests) == 3 and fake.violations == []  # the hang never re-ran
        finally:
            for w in workers:
                w.stop()


def test_abort_from_a_non_owner_aborts_the_owners_turn(tmp_path: Path, pg_url: str) -> None:
    project, home = tmp_path / "project", tmp_path / "tether-home"
    project.mkdir()
    script = [{"text": "warm"}, {"fault": {"hang": True}}, {"text": "after"}]
    with FakeProvider(script) as fake:
        env = server_env(fake.url, home, tmp_path)
        workers = [ServerProcess(env, project, "--store", pg_url) for _ in range(2)]
        try:
            async def scenario() -> None:
                async with connect(workers[0].url) as ws_a, connect(workers[1].url) as ws_b:
                    a, b = Client(ws_a), Client(ws_b)
                    runtime = (await a.start(project))["runtime"]
                    await a.say(runtime, "warm up", request_id="in-1")
                    await a.of_type("turn_finished", request_id="in-1")
                    await b.start(project, agent_id=runtime["agent_id"],
                                  conversation_id=runtime["conversation_id"])
                    await asyncio.sleep(0.5)
                    await b.say(runtime, "hang", request_id="in-2")
                    await wait_for_async(lambda: len(fake.requests) == 2, "the hanging turn's request")
                    await b.send({"type": "abort_message", "runtime": runtime,
                                  "request_id": "abort-1"})
                    answer = await b.of_type("abort_message_response", request_id="abort-1")
                    assert answer["aborted"] is True
                    done = await b.of_type("turn_finished", timeout=30, request_id="in-2")
                    assert done["stop_reason"] != "end_turn"
                    await a.of_type("turn_finished", request_id="in-2")

            asyncio.run(scenario())
            assert len(fake.requests) == 2 and fake.violations == []
        finally:
            for w in workers:
                w.stop()
