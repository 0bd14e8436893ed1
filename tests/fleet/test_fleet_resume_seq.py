"""A client resumes from its last `event_seq` on another worker (issue 31): three real
`tether server --store` workers on one database; a client of a non-owner follows a turn the owner
runs, its worker is killed (kill -9) mid-turn, and it reconnects to the third worker with
`runtime_start{after_event_seq: N}`: it receives `runtime_replay` and then exactly the owner's
frames N+1.. (the same seqs, in order, none twice, none missing) through the turn's end, part
replayed from the `fleet_events` rows and part live. When the rows after N were pruned, the
replay says so (`complete: false`, from which seq). A client that stays connected asks the same
with `sync{after_event_seq}`."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

from websockets.asyncio.client import connect

from tests.fleet.support import wait_for_async
from tests.server.support import Client, ServerProcess, bash, server_env
from tether.testing.fake_provider import FakeProvider


def _instance(frame: dict[str, Any]) -> str:
    """The server instance that built a runtime frame (its idempotency key's first part)."""
    return str(frame["idempotency_key"]).split(":", 1)[0]


def _owner_frames(client: Client, owner: str, after: int, through: int) -> list[tuple[int, str]]:
    return [(f["event_seq"], f["type"]) for f in client.seen
            if "event_seq" in f and _instance(f) == owner and after < f["event_seq"] <= through]



def _tool_returns(client: Client) -> list[dict[str, Any]]:
    return [f for f in client.seen if f.get("type") == "stream_delta"
            and f["delta"].get("message_type") == "tool_return_message"]


def test_a_client_of_a_killed_worker_resumes_on_another_from_its_last_seq(
    tmp_path: Path, pg_url: str,
) -> None:
    project, home = tmp_path / "project", tmp_path / "tether-home"
    project.mkdir()
    script = [
        {"text": "warm"},
        {"text": "step one", "tool_calls": [bash("echo one")]},
        {"text": "step two", "tool_calls": [bash("echo two")]},
        {"text": "all done, with a longer answer streamed in pieces", "chunk_size": 3,
         "delay_ms": 3000},
    ]
    with FakeProvider(script) as fake:
        env = server_env(fake.url, home, tmp_path)
        workers = [ServerProcess(env, project, "--store", pg_url) for _ in range(3)]
        try:
            async def scenario() -> None:
                async with connect(workers[0].url) as ws_a:
                    a = Client(ws_a)
                    runtime = (await a.start(project, mode="unrestricted"))["runtime"]
                    await a.say(runtime, "warm up", request_id="in-1")  # worker 0 owns it now
                    await a.of_type("turn_finished", request_id="in-1")
                    ws_b = await connect(workers[1].url)
                    b = Client(ws_b)
                    await b.start(project, agent_id=runtime["agent_id"],
                                  conversation_id=runtime["conversation_id"])
                    await asyncio.sleep(0.5)  # b's worker is following the conversation
                    await a.say(runtime, "two steps", request_id="in-2")
                    await b.wait_for(lambda f: len(_tool_returns(b)) == 1, timeout=30)
                    owner = _instance(_tool_returns(b)[0])
                    last = max(f["event_seq"] for f in b.seen
                               if "event_seq" in f and _instance(f) == owner)
                    workers[1].kill_9()  # b's worker dies mid-turn
                    await ws_b.close()
                    # Frames go on while the client is away: step two ran, step three is slow.
                    await a.wait_for(lambda f: len(_tool_returns(a)) == 2, timeout=30)
                    async with connect(workers[2].url) as ws_c:
                        c = Client(ws_c)
                        await c.start(project, agent_id=runtime["agent_id"],
                                      conversation_id=runtime["conversation_id"],
                                      after_event_seq=last)
                        replay = await c.of_type("runtime_replay")
                        done = await c.of_type("turn_finished", timeout=60, request_id="in-2")
                    end = await a.of_type("turn_finished", request_id="in-2")
                    assert done["event_seq"] == end["event_seq"]
                    assert replay["after_event_seq"] == last and replay["complete"] is True
                    assert replay["runtime"] == runtime
                    seen_c = _owner_frames(c, owner, 0, end["event_seq"])
                    seen_a = _owner_frames(a, owner, last, end["event_seq"])
                    assert seen_c == seen_a, (seen_c, seen_a)  # none missing, none twice, in order
                    assert seen_c[0][0] == replay["first_event_seq"]
                    # Part of it was replayed from the rows, the rest came live.
                    assert last < replay["through_event_seq"] < end["event_seq"]
                    assert len(_tool_returns(c)) == 1  # step two's, not step one's again

            asyncio.run(scenario())
            assert len(fake.requests) == 4 and fake.violations == []
        finally:
            for w in workers:
                w.stop()


def _holder(pg_url: str, conversation: str) -> tuple[str, int] | None:
    import psycopg

    with psycopg.connect(pg_url) as conn:
        row = conn.execute("SELECT holder, token FROM conversation_leases WHERE conversation = %s",
                           (conversation,)).fetchone()
    return (str(row[0]), int(row[1])) if row else None


def test_when_the_owner_dies_too_the_resumed_client_gets_the_interrupted_report(
    tmp_path: Path, pg_url: str,
) -> None:
    """B, then the owner A are killed mid-turn; C takes the conversation and reports the turn
    interrupted; the client resuming on C after its last seq gets what A published after it,
    then that report, in order, none twice (what A broadcast but had not written is lost)."""
    project, home = tmp_path / "project", tmp_path / "tether-home"
    project.mkdir()
    script = [{"text": "warm"}, {"text": "step one", "tool_calls": [bash("echo one")]},
              {"fault": {"hang": True}}, {"text": "after"}]
    with FakeProvider(script) as fake:
        env = server_env(fake.url, home, tmp_path)
        workers = [ServerProcess(env, project, "--store", pg_url) for _ in range(3)]
        try:
            async def scenario() -> None:
                async with connect(workers[0].url) as ws_a:
                    a = Client(ws_a)
                    runtime = (await a.start(project, mode="unrestricted"))["runtime"]
                    conversation = f"{runtime['agent_id']}/{runtime['conversation_id']}"
                    await a.say(runtime, "warm up", request_id="in-1")
                    await a.of_type("turn_finished", request_id="in-1")
                    ws_b = await connect(workers[1].url)
                    b = Client(ws_b)
                    await b.start(project, agent_id=runtime["agent_id"],
                                  conversation_id=runtime["conversation_id"])
                    await asyncio.sleep(0.5)
                    await a.say(runtime, "hang after a step", request_id="in-2")
                    await b.wait_for(lambda f: f.get("type") == "stream_delta", timeout=30)
                    owner = _instance(b.seen[-1])
                    last = b.seen[-1]["event_seq"]
                    workers[1].kill_9()
                    await ws_b.close()
                    await a.wait_for(lambda f: len(_tool_returns(a)) == 1, timeout=30)
                    await wait_for_async(lambda: len(fake.requests) == 3, "the hanging request")
                    held_by_a = _holder(pg_url, conversation)
                    workers[0].kill_9()
                    await wait_for_async(lambda: _holder(pg_url, conversation) not in (None, held_by_a),
                                "the third worker taking the conversation")
                async with connect(workers[2].url) as ws_c:
                    c = Client(ws_c)
                    await c.start(project, agent_id=runtime["agent_id"],
                                  conversation_id=runtime["conversation_id"],
                                  after_event_seq=last)
                    replay = await c.of_type("runtime_replay")
                    done = await c.of_type("turn_finished", timeout=60, request_id="in-2")
                assert replay["complete"] is True and replay["first_event_seq"] > last
                assert done["stop_reason"] == "error" and "not run again" in done["error"]
                start = c.seen.index(replay)
                got = [(f["event_seq"], f["type"]) for f in c.seen[start + 1:]]
                assert [s for s, _ in got] == sorted({s for s, _ in got})  # in order, once
                from_a = [x for x, f in zip(got, c.seen[start + 1:], strict=True)
                          if _instance(f) == owner]
                sent_by_a = [(f["event_seq"], f["type"]) for f in a.seen
                             if "event_seq" in f and f["event_seq"] > last]
                n = min(len(from_a), len(sent_by_a))  # `a` read only so far; A wrote what it did
                assert n > 0 and from_a[:n] == sent_by_a[:n]  # no gap among A's rows
                assert any(t == "stream_delta" and "tool_return" in str(f.get("delta"))
                           for (_, t), f in zip(got, c.seen[start + 1:], strict=True))

            asyncio.run(scenario())
            assert len(fake.requests) == 3 and fake.violations == []  # the hang never re-ran
        finally:
            for w in workers:
                w.stop()


def test_a_replay_from_before_the_pruned_rows_says_it_is_incomplete(
    tmp_path: Path, pg_url: str,
) -> None:
    import psycopg

    from tether.backends.postgres import events

    project, home = tmp_path / "project", tmp_path / "tether-home"
    project.mkdir()
    with FakeProvider([{"text": "one"}, {"text": "two"}]) as fake:
        env = server_env(fake.url, home, tmp_path)
        workers = [ServerProcess(env, project, "--store", pg_url) for _ in range(2)]
        try:
            async def scenario() -> None:
                async with connect(workers[0].url) as ws_a:
                    a = Client(ws_a)
                    runtime = (await a.start(project))["runtime"]
                    await a.say(runtime, "first", request_id="in-1")
                    first = await a.of_type("turn_finished", request_id="in-1")
                    conversation = f"{runtime['agent_id']}/{runtime['conversation_id']}"

                    def published() -> bool:
                        with psycopg.connect(pg_url) as conn:
                            return events.last_seq(conn, conversation) >= first["event_seq"]

                    await wait_for_async(published, "the first turn's rows")
                    with psycopg.connect(pg_url, autocommit=True) as conn:
                        assert events.prune(conn, keep_s=0) > 0
                    await a.say(runtime, "second", request_id="in-2")
                    second = await a.of_type("turn_finished", request_id="in-2")
                    async with connect(workers[1].url) as ws_b:
                        b = Client(ws_b)
                        await b.start(project, agent_id=runtime["agent_id"],
                                      conversation_id=runtime["conversation_id"],
                                      after_event_seq=1)
                        replay = await b.of_type("runtime_replay")
                        assert replay["complete"] is False
                        assert replay["missing_through"] >= first["event_seq"]
                        assert replay["first_event_seq"] > first["event_seq"]
                        again = await b.of_type("turn_finished", request_id="in-2")
                        assert again["event_seq"] == second["event_seq"]  # what is kept, replayed

            asyncio.run(scenario())
        finally:
            for w in workers:
                w.stop()


def test_a_client_that_stays_asks_sync_after_a_seq_and_gets_the_owners_frames_after_it(
    tmp_path: Path, pg_url: str,
) -> None:
    """`sync{after_event_seq}` on a worker that does not run the conversation: after its state
    frames, `runtime_replay` and the owner's frames after that seq, read from the rows (the
    same the owner's own client saw), then the live ones."""
    project, home = tmp_path / "project", tmp_path / "tether-home"
    project.mkdir()
    script = [{"text": "warm"}, {"text": "step", "tool_calls": [bash("echo one")]},
              {"text": "done"}]
    with FakeProvider(script) as fake:
        env = server_env(fake.url, home, tmp_path)
        workers = [ServerProcess(env, project, "--store", pg_url) for _ in range(2)]
        try:
            async def scenario() -> None:
                async with connect(workers[0].url) as ws_a, connect(workers[1].url) as ws_b:
                    a, b = Client(ws_a), Client(ws_b)
                    runtime = (await a.start(project, mode="unrestricted"))["runtime"]
                    await a.say(runtime, "warm up", request_id="in-1")  # worker 0 owns it now
                    warm = await a.of_type("turn_finished", request_id="in-1")
                    owner = _instance(warm)
                    await b.start(project, agent_id=runtime["agent_id"],
                                  conversation_id=runtime["conversation_id"])
                    await asyncio.sleep(0.5)  # b's worker is following the conversation
                    await a.say(runtime, "one step", request_id="in-2")
                    end = await a.of_type("turn_finished", request_id="in-2")
                    await b.of_type("turn_finished", request_id="in-2")
                    b.seen.clear()
                    await b.send({"type": "sync", "request_id": "y-1", "runtime": runtime,
                                  "after_event_seq": warm["event_seq"]})
                    replay = await b.of_type("runtime_replay")
                    await b.of_type("turn_finished", request_id="in-2")
                    kinds = [f["type"] for f in b.seen]
                    assert "update_device_status" in kinds[:kinds.index("runtime_replay")]
                    assert replay["complete"] is True and replay["runtime"] == runtime
                    assert replay["after_event_seq"] == warm["event_seq"]
                    assert replay["through_event_seq"] == end["event_seq"]
                    replayed = _owner_frames(b, owner, warm["event_seq"], end["event_seq"])
                    # Everything the owner broadcast (its input_accepted went to `a` alone).
                    broadcast = [f for f in _owner_frames(a, owner, warm["event_seq"],
                                                          end["event_seq"])
                                 if f[1] != "input_accepted"]
                    assert replayed == broadcast, (replayed, broadcast)
                    assert replayed[0][0] == replay["first_event_seq"]
                    assert len(_tool_returns(b)) == 1

            asyncio.run(scenario())
            assert len(fake.requests) == 3 and fake.violations == []
        finally:
            for w in workers:
                w.stop()


class _Sink:
    """A subscriber in this process: keeps what it is sent."""

    def __init__(self, ident: str) -> None:
        self.id = ident
        self.sent: list[dict[str, Any]] = []

    def send_frame(self, frame: dict[str, Any]) -> None:
        self.sent.append(frame)

    def seqs(self) -> list[int | str]:
        return [f.get("event_seq", f["type"]) for f in self.sent]


def _frame(seq: int) -> dict[str, Any]:
    return {"type": "stream_delta", "event_seq": seq, "delta": {}}


def test_frames_relayed_while_a_replay_is_read_are_held_and_sent_after_it_once() -> None:
    """The ordering a real fleet only shows by chance: owner frames relayed between the resuming
    client's runtime_start and the replay's rows reach it after them, never twice; the worker's
    other client gets them at once."""
    from types import SimpleNamespace

    from tether.server.fleet_events import FleetEvents
    from tether.server.protocol_v2 import RuntimeScope

    async def scenario() -> None:
        events = FleetEvents(SimpleNamespace(held={}), "postgresql://unused", "worker-c")
        other = _Sink("other")
        rt: Any = SimpleNamespace(subscribers={"other": other}, scope=RuntimeScope("a", "c"),
                                  stream=SimpleNamespace(last_seq=3))
        events.follow("a/c", rt)
        events.resume("a/c", rt, after=10)
        resuming = _Sink("resuming")
        rt.subscribers["resuming"] = resuming  # what the runtime_start goes on to do
        follower = events.followers["a/c"]
        events._relay("a/c", follower, [_frame(12), _frame(13)])  # before the bind
        await asyncio.sleep(0)  # the bind, on the next loop turn
        events._relay("a/c", follower, [_frame(14)])
        rows = [(seq, "worker-a", _frame(seq)) for seq in (11, 12, 13)]
        events._replayed(follower, follower.replays[0], rows, 0)
        events._relay("a/c", follower, [_frame(15)])
        assert resuming.seqs() == ["runtime_replay", 11, 12, 13, 14, 15]
        assert resuming.sent[0]["through_event_seq"] == 13 and resuming.sent[0]["complete"]
        assert other.seqs() == [12, 13, 14, 15]
        assert follower.replays == []

    asyncio.run(scenario())
