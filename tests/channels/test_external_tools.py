"""Client-registered external tools on the App Server: a call goes to the registering client as
external_tool_call_request, its answer comes back as the tool result, the call is checkpointed,
and a call whose client dropped goes to the next client that registers the tool."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from tests.server.support import Client, InProcess, point_at
from tether.testing.fake_provider import FakeProvider

TOOL = {
    "name": "MessageChannel",
    "description": "Send a message to the chat",
    "parameters": {"type": "object", "properties": {"text": {"type": "string"}},
                   "required": ["text"]},
}


def reply(text: str) -> dict[str, Any]:
    return {"name": "MessageChannel", "arguments": {"text": text}}


@pytest.fixture
def project(tmp_path: Path) -> Path:
    d = tmp_path / "project"
    d.mkdir()
    return d


def test_external_tool_call_round_trip_is_checkpointed(
    project: Path, tether_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def scenario() -> None:
        async with InProcess(project) as srv, srv.connect() as ws:
            c = Client(ws)
            started = await c.start(project, external_tools=[{"scope_id": "s1", "tools": [TOOL]}])
            assert "MessageChannel" in started["agent"]["tools"]
            runtime = started["runtime"]
            await c.say(runtime, "hi")
            request = await c.of_type("external_tool_call_request")
            assert request["tool_name"] == "MessageChannel"
            assert request["input"] == {"text": "hello there"}
            assert request["scope_id"] == "s1" and request["runtime"] == runtime
            await c.send({"type": "external_tool_call_response",
                          "request_id": request["request_id"],
                          "content": [{"type": "text", "text": "sent as msg 7"}]})
            finished = await c.of_type("turn_finished")
            assert finished["stop_reason"] == "end_turn", finished

    with FakeProvider([{"tool_calls": [reply("hello there")]}, {"text": "done"}]) as fake:
        point_at(fake, monkeypatch)
        asyncio.run(scenario())
        assert "sent as msg 7" in json.dumps(fake.requests[1]["body"])
        assert "MessageChannel" in json.dumps(fake.requests[0]["body"])
    db = sqlite3.connect(tether_home / "checkpoints.db")
    rows = db.execute("SELECT tool_name, phase, result FROM effect_checkpoints").fetchall()
    assert [(r[0], r[1]) for r in rows] == [("MessageChannel", "after")]
    assert b"sent as msg 7" in bytes(rows[0][2])


def test_a_call_whose_client_dropped_goes_to_the_next_registrant(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def scenario() -> None:
        async with InProcess(project) as srv:
            async with srv.connect() as ws:
                first = Client(ws)
                started = await first.start(project, external_tools=[{"tools": [TOOL]}])
                runtime = started["runtime"]
                await first.say(runtime, "hi")
                lost = await first.of_type("external_tool_call_request")
            # The first client is gone without answering; a second one takes the tool over.
            async with srv.connect() as ws2:
                second = Client(ws2)
                await second.send({
                    "type": "runtime_start", "request_id": "again", "cwd": str(project),
                    "agent_id": runtime["agent_id"], "conversation_id": runtime["conversation_id"],
                    "external_tools": [{"tools": [TOOL]}],
                })
                again = await second.of_type("external_tool_call_request")
                assert again["request_id"] == lost["request_id"]  # the same call, not a new one
                await second.send({"type": "external_tool_call_response",
                                   "request_id": again["request_id"], "result": "ok"})
                finished = await second.of_type("turn_finished")
                assert finished["stop_reason"] == "end_turn", finished

    with FakeProvider([{"tool_calls": [reply("x")]}, {"text": "done"}]) as fake:
        point_at(fake, monkeypatch)
        asyncio.run(scenario())
        assert len(fake.requests) == 2


BAD = [
    ({"external_tools": [{"tools": [{"name": "Bash"}]}]}, "built-in"),
    ({"external_tools": [{"tools": [{"description": "x"}]}]}, "name"),
    ({"external_tools": [{"tools": [{"name": "T", "parameters": "no"}]}]}, "parameters"),
    ({"external_tools": {"tools": []}}, "external_tools"),
]


@pytest.mark.parametrize(("extra", "why"), BAD)
def test_bad_external_tools_are_refused_by_name(
    project: Path, monkeypatch: pytest.MonkeyPatch, extra: dict[str, Any], why: str
) -> None:
    async def scenario() -> None:
        async with InProcess(project) as srv, srv.connect() as ws:
            c = Client(ws)
            await c.send({"type": "runtime_start", "request_id": "r", "cwd": str(project),
                          "create_agent": {"body": {"model": "anthropic/claude-test"}}, **extra})
            answer = await c.wait_for(lambda f: f.get("request_id") == "r")
            assert answer.get("success") is not True
            assert why in str(answer.get("message") or answer.get("error")), answer

    with FakeProvider([{"text": "unused"}]) as fake:
        point_at(fake, monkeypatch)
        asyncio.run(scenario())


def test_external_tools_survive_a_move_to_another_folder(
    project: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    other = tmp_path / "other"
    other.mkdir()

    async def scenario() -> None:
        async with InProcess(project) as srv, srv.connect() as ws:
            c = Client(ws)
            started = await c.start(project, external_tools=[{"tools": [TOOL]}])
            runtime = started["runtime"]
            await c.send({"type": "change_device_state", "request_id": "move",
                          "runtime": runtime, "payload": {"cwd": str(other)}})
            moved = await c.of_type("change_device_state_response")
            assert moved["applied"] is True
            await c.say(runtime, "hi")
            request = await c.of_type("external_tool_call_request")
            await c.send({"type": "external_tool_call_response",
                          "request_id": request["request_id"], "result": "delivered"})
            finished = await c.of_type("turn_finished")
            assert finished["stop_reason"] == "end_turn", finished

    with FakeProvider([{"tool_calls": [reply("x")]}, {"text": "done"}]) as fake:
        point_at(fake, monkeypatch)
        asyncio.run(scenario())
        assert str(other) in json.dumps(fake.requests[0]["body"])  # the rebuilt runtime ran it
        assert "delivered" in json.dumps(fake.requests[1]["body"])


def test_a_deny_rule_stops_an_external_tool_before_the_client_is_asked(
    project: Path, tether_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    tether_home.mkdir(parents=True, exist_ok=True)
    (tether_home / "settings.json").write_text(
        json.dumps({"permissions": {"deny": ["MessageChannel"]}})
    )

    async def scenario() -> None:
        async with InProcess(project) as srv, srv.connect() as ws:
            c = Client(ws)
            started = await c.start(project, external_tools=[{"tools": [TOOL]}])
            await c.say(started["runtime"], "hi")
            finished = await c.of_type("turn_finished")
            assert finished["stop_reason"] == "end_turn", finished
            assert not [f for f in c.seen if f.get("type") == "external_tool_call_request"]

    with FakeProvider([{"tool_calls": [reply("leak")]}, {"text": "done"}]) as fake:
        point_at(fake, monkeypatch)
        asyncio.run(scenario())
        assert "Permission denied by rule" in json.dumps(fake.requests[1]["body"])
