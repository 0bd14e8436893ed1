"""Issue 14: hostile websocket frames get a clear error frame (or, past the size limit, a 1009
close naming it); the connection that sent them keeps working, and so does everyone else's
conversation, which runs a turn to the end meanwhile."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest
from websockets.exceptions import ConnectionClosed

from tests.server.support import Client, InProcess, point_at
from tether.testing.fake_provider import FakeProvider

RT = {"agent_id": "agent-x", "conversation_id": "conv-x"}
BAD_FRAMES: dict[str, tuple[str | bytes, str]] = {
    "not JSON": ("{nope", "not valid JSON"),
    "empty": ("", "not valid JSON"),
    "binary garbage": (b"\xff\xfe\x00\x01", "not valid JSON"),
    "array": ("[1, 2]", "JSON object"),
    "number": ("1e999", "not valid JSON"),
    "string": ('"hi"', "JSON object"),
    "deep nesting": ("[" * 100_000 + "]" * 100_000, "not valid JSON"),
    "no type": ('{"request_id": "r"}', "'type'"),
    "type not a string": ('{"type": 7}', "'type'"),
    "unknown type": ('{"type": "rm_rf", "request_id": "r"}', "unknown frame type"),
    "request_id a number": ('{"type": "app_server_info", "request_id": 5}', "request_id"),
    "unknown field": ('{"type": "app_server_info", "request_id": "r", "admin": true}',
                      "'admin' is not a field"),
    "runtime_start agent_id a list": (
        '{"type": "runtime_start", "request_id": "r", "agent_id": ["a"]}', "agent_id"),
    "runtime_start both agents": (
        '{"type": "runtime_start", "request_id": "r", "agent_id": "a", "create_agent": {}}',
        "exactly one"),
    "input without runtime": (
        '{"type": "input", "request_id": "r", "payload": {"kind": "create_message"}}',
        "'runtime'"),
    "input runtime extra field": (
        json.dumps({"type": "input", "request_id": "r", "runtime": {**RT, "root": True},
                    "payload": {"kind": "create_message", "messages": []}}),
        "'runtime.root' is not a field"),
    "input payload unknown kind": (
        json.dumps({"type": "input", "request_id": "r", "runtime": RT,
                    "payload": {"kind": "exec"}}), "'payload.kind'"),
    "input payload unknown field": (
        json.dumps({"type": "input", "request_id": "r", "runtime": RT,
                    "payload": {"kind": "create_message", "messages": [{"content": "x"}],
                                "mode": "unrestricted"}}),
        "'payload.mode' is not a field"),
    "messages not a list": (
        json.dumps({"type": "input", "request_id": "r", "runtime": RT,
                    "payload": {"kind": "create_message", "messages": "hi"}}), "messages"),
    "message content a number": (
        json.dumps({"type": "input", "request_id": "r", "runtime": RT,
                    "payload": {"kind": "create_message", "messages": [{"content": 1}]}}),
        "content"),
    "unsupported tool allowlist": (
        json.dumps({"type": "input", "request_id": "r", "runtime": RT,
                    "payload": {"kind": "create_message", "messages": [{"content": "x"}],
                                "client_tool_allowlist": ["Read"]}}),
        "client_tool_allowlist' is not supported"),
    "approval decision unknown field": (
        json.dumps({"type": "input", "request_id": "r", "runtime": RT,
                    "payload": {"kind": "approval_response", "request_id": "p",
                                "decision": {"behavior": "allow", "always": True}}}),
        "'payload.decision.always' is not a field"),
    "approval behavior odd": (
        json.dumps({"type": "input", "request_id": "r", "runtime": RT,
                    "payload": {"kind": "approval_response", "request_id": "p",
                                "decision": {"behavior": "maybe"}}}), "behavior"),
    "device state unknown field": (
        json.dumps({"type": "change_device_state", "request_id": "r", "runtime": RT,
                    "payload": {"sandbox": False}}), "'payload.sandbox' is not a field"),
    "abort run_id a dict": (
        json.dumps({"type": "abort_message", "request_id": "r", "runtime": RT,
                    "run_id": {}}), "run_id"),
    "sync on a runtime not started": (
        json.dumps({"type": "sync", "request_id": "r", "runtime": RT}), "not started"),
    "NUL in cwd": (
        json.dumps({"type": "runtime_start", "request_id": "r", "agent_id": "a",
                    "cwd": "/tmp\u0000x"}), "NUL"),
}


@pytest.fixture
def project(tmp_path: Path) -> Path:
    d = tmp_path / "project"
    d.mkdir()
    return d


@pytest.mark.parametrize("raw,why", BAD_FRAMES.values(), ids=BAD_FRAMES.keys())
def test_bad_frames_get_error_frames_and_the_connection_keeps_working(
    project: Path, raw: str | bytes, why: str
) -> None:
    async def scenario() -> None:
        async with InProcess(project) as srv, srv.connect() as ws:
            c = Client(ws)
            await ws.send(raw)
            answer = await c.wait_for(
                lambda f: f.get("type") in ("error", "runtime_start_response")
            )
            text = answer.get("message") or answer.get("error") or ""
            assert answer.get("success") is not True and why in text, answer
            assert "internal server error" not in text
            await c.send({"type": "app_server_info", "request_id": "after"})
            assert (await c.of_type("app_server_info_response"))["request_id"] == "after"

    asyncio.run(scenario())


def test_a_storm_of_bad_frames_and_an_oversized_one_leave_other_conversations_working(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    limit = 64 * 1024
    with FakeProvider([{"text": "still here", "delay_ms": 300}]) as fake:
        point_at(fake, monkeypatch)

        async def scenario() -> None:
            async with (
                InProcess(project, max_frame_bytes=limit) as srv,
                srv.connect() as good_ws,
                srv.connect() as bad_ws,
            ):
                good, bad = Client(good_ws), Client(bad_ws)
                started = await good.start(project)
                await good.say(started["runtime"], "hello")
                for raw, _ in BAD_FRAMES.values():
                    if len(raw) < limit:
                        await bad_ws.send(raw)
                errors = 0
                while errors < sum(1 for r, _ in BAD_FRAMES.values() if len(r) < limit):
                    frame = await bad.wait_for(
                        lambda f: f.get("type") in ("error", "runtime_start_response")
                    )
                    errors += 1
                    assert frame.get("success") is not True
                await bad_ws.send("x" * (limit + 1))
                with pytest.raises(ConnectionClosed) as closed:
                    await asyncio.wait_for(bad_ws.recv(), 10)
                assert closed.value.rcvd is not None and closed.value.rcvd.code == 1009
                done: dict[str, Any] = await good.of_type("turn_finished")
                assert done["stop_reason"] == "end_turn" and "error" not in done, done
                said = "".join(str(d.get("content")) for d in good.deltas("assistant_message"))
                assert "still here" in said, said

        asyncio.run(scenario())


def test_a_turn_that_fails_outside_tether_errors_does_not_wedge_the_conversation(
    project: Path, tether_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The transcript path turned into a directory makes the turn fail with an OSError (not a
    tether error): that turn ends with the error, and the next input still runs."""
    import shutil

    script = [{"text": "one"}, {"text": "three"}]
    with FakeProvider(script) as fake:
        point_at(fake, monkeypatch)

        async def scenario() -> None:
            async with InProcess(project) as srv, srv.connect() as ws:
                c = Client(ws)
                runtime = (await c.start(project))["runtime"]
                await c.say(runtime, "one")
                assert (await c.of_type("turn_finished"))["stop_reason"] == "end_turn"
                assert srv.server is not None
                transcript = srv.server.ctx.store.conversation_dir(
                    runtime["agent_id"], runtime["conversation_id"]) / "messages.jsonl"
                saved = transcript.read_bytes()
                transcript.unlink()
                transcript.mkdir()
                await c.say(runtime, "two", request_id="in-2")
                broken = await c.of_type("turn_finished", request_id="in-2")
                assert broken["stop_reason"] == "error" and broken.get("error"), broken
                shutil.rmtree(transcript)
                transcript.write_bytes(saved)
                await c.say(runtime, "three", request_id="in-3")
                again = await c.of_type("turn_finished", request_id="in-3", timeout=30)
                assert again["stop_reason"] == "end_turn", again

        asyncio.run(scenario())
