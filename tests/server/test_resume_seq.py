"""`runtime_start{after_event_seq}` (a tether extension, `server/protocol_v2.py`): a value that is
not a non-negative integer is refused with an error naming the field, and a server without
`--store` (which keeps no history of its frames) answers `runtime_replay` saying whether the
client missed frames after its seq. The replay itself, on a fleet, is shown in
tests/fleet/test_fleet_resume_seq.py."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import pytest

from tests.server.support import MODEL, Client, InProcess, point_at
from tether.server.frame_reader import FrameError
from tether.server.protocol_v2 import RuntimeStart, Sync, parse_frame
from tether.testing.fake_provider import FakeProvider


def _start(**fields: Any) -> dict[str, Any]:
    return {"type": "runtime_start", "request_id": "s-1",
            "create_agent": {"body": {"model": MODEL}}, **fields}


@pytest.mark.parametrize("value", [-1, "12", 1.5, True, [3], {"seq": 3}])
def test_a_bad_after_event_seq_is_refused_naming_the_field(value: Any) -> None:
    import orjson

    with pytest.raises(FrameError) as caught:
        parse_frame(orjson.dumps(_start(after_event_seq=value)))
    assert "'after_event_seq' must be a non-negative integer" in str(caught.value)
    assert caught.value.request_id == "s-1" and caught.value.frame_type == "runtime_start"


@pytest.mark.parametrize("value,parsed", [(0, 0), (41, 41), (None, None)])
def test_a_good_after_event_seq_is_parsed(value: int | None, parsed: int | None) -> None:
    import orjson

    frame = parse_frame(orjson.dumps(_start(after_event_seq=value)))
    assert isinstance(frame, RuntimeStart) and frame.after_event_seq == parsed


def test_the_server_answers_a_bad_value_with_an_error_frame_and_no_runtime(tmp_path: Path) -> None:
    async def scenario() -> None:
        async with InProcess(tmp_path) as srv, srv.connect() as ws:
            c = Client(ws)
            await c.send(_start(cwd=str(tmp_path), after_event_seq="7"))
            error = await c.of_type("error")
            assert "after_event_seq" in error["message"] and error["request_id"] == "s-1"
            assert not any(f.get("type") == "runtime_start_response" for f in c.seen)

    asyncio.run(scenario())


def test_without_a_store_the_answer_says_whether_frames_were_missed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with FakeProvider([{"text": "one"}]) as fake:
        point_at(fake, monkeypatch)

        async def scenario() -> None:
            async with InProcess(tmp_path) as srv, srv.connect() as ws_a:
                a = Client(ws_a)
                runtime = (await a.start(tmp_path))["runtime"]
                await a.say(runtime, "hello", request_id="in-1")
                done = await a.of_type("turn_finished", request_id="in-1")
                ids = {"agent_id": runtime["agent_id"],
                       "conversation_id": runtime["conversation_id"]}
                async with srv.connect() as ws_b:  # resuming from an older seq: frames lost
                    b = Client(ws_b)
                    await b.start(tmp_path, after_event_seq=done["event_seq"] - 2, **ids)
                    replay = await b.of_type("runtime_replay")
                    assert replay["complete"] is False and replay["replayed"] == 0
                    assert replay["missing_through"] >= done["event_seq"]
                    assert replay["runtime"] == runtime
                    last = max(f["event_seq"] for f in b.seen if "event_seq" in f)
                async with srv.connect() as ws_c:  # from the last seq built: nothing missed
                    c = Client(ws_c)
                    await c.start(tmp_path, after_event_seq=last, **ids)
                    replay = await c.of_type("runtime_replay")
                    assert replay["complete"] is True and replay["missing_through"] is None

        asyncio.run(scenario())


@pytest.mark.parametrize("value", [-1, "12", 1.5, True])
def test_a_bad_sync_after_event_seq_is_refused_naming_the_field(value: Any) -> None:
    import orjson

    frame = {"type": "sync", "request_id": "y-1",
             "runtime": {"agent_id": "a", "conversation_id": "c"}, "after_event_seq": value}
    with pytest.raises(FrameError) as caught:
        parse_frame(orjson.dumps(frame))
    assert "'after_event_seq' must be a non-negative integer" in str(caught.value)
    assert caught.value.frame_type == "sync"
    good = parse_frame(orjson.dumps({**frame, "after_event_seq": 5}))
    assert isinstance(good, Sync) and good.after_event_seq == 5


def test_sync_after_a_seq_answers_after_its_state_frames(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with FakeProvider([{"text": "one"}]) as fake:
        point_at(fake, monkeypatch)

        async def scenario() -> None:
            async with InProcess(tmp_path) as srv, srv.connect() as ws:
                a = Client(ws)
                runtime = (await a.start(tmp_path))["runtime"]
                await a.say(runtime, "hello", request_id="in-1")
                done = await a.of_type("turn_finished", request_id="in-1")
                last = max(f["event_seq"] for f in a.seen if "event_seq" in f)
                for after, complete in ((last, True), (done["event_seq"] - 2, False)):
                    a.seen.clear()
                    await a.send({"type": "sync", "runtime": runtime, "after_event_seq": after})
                    replay = await a.of_type("runtime_replay")
                    assert replay["complete"] is complete and replay["after_event_seq"] == after
                    if complete:
                        assert replay["missing_through"] is None
                    else:
                        assert replay["missing_through"] >= done["event_seq"]
                    kinds = [f["type"] for f in a.seen]
                    # The state frames `sync` sends come first, the replay's answer after them.
                    assert "update_device_status" in kinds[:kinds.index("runtime_replay")]
                    last = max(f["event_seq"] for f in a.seen if "event_seq" in f)
                await a.send({"type": "sync", "runtime": runtime})  # without: no replay answer
                await a.of_type("update_device_status")
                await asyncio.sleep(0.2)
                assert [f for f in a.seen if f["type"] == "runtime_replay"] == [replay]

        asyncio.run(scenario())
