"""Letta's stream events as tether's chunks, on events recorded from the real letta==0.16.8
server (`recorded_stream.json`), checked against the official client's models as well."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.backends.api.letta_server import CACHE, installed
from tether.backends.api.events import EventMapper, ServerToolCall, ServerToolReturn
from tether.protocol.chunks import (
    AssistantText,
    ErrorChunk,
    StopReason,
    ToolCallRequest,
    UsageStatistics,
)

RECORDED = json.loads((Path(__file__).with_name("recorded_stream.json")).read_text())


def _map(events: list[dict[str, Any]], answered: frozenset[str] = frozenset()) -> list[Any]:
    mapper = EventMapper(answered)
    out: list[Any] = []
    for e in events:
        out.extend(mapper.feed(e["data"], error_frame=e["error"]))
    out.extend(mapper.finish())
    return out


def test_text_deltas_share_one_otid_then_stop_and_usage() -> None:
    chunks = _map(RECORDED["text"])
    texts = [c for c in chunks if isinstance(c, AssistantText)]
    assert "".join(t.content for t in texts) == "Hello there, friend"
    assert len({t.otid for t in texts}) == 1 and all(t.run_id for t in texts)
    stop = next(c for c in chunks if isinstance(c, StopReason))
    usage = next(c for c in chunks if isinstance(c, UsageStatistics))
    assert stop.stop_reason == "end_turn" and stop.run_id == texts[0].run_id
    assert usage.usage.input_tokens > 0 and usage.step_count == 1 and usage.run_id == stop.run_id


def test_approval_request_deltas_become_one_complete_call_at_the_stop() -> None:
    chunks = _map(RECORDED["client_tool"])
    calls = [c for c in chunks if isinstance(c, ToolCallRequest)]
    assert [(c.tool_call_id, c.name, json.loads(c.arguments)) for c in calls] == [
        ("call_rec1", "Bash", {"command": "echo hi"})]
    kinds = [type(c).__name__ for c in chunks]
    assert kinds.index("ToolCallRequest") < kinds.index("StopReason")  # complete before the stop
    assert next(c for c in chunks if isinstance(c, StopReason)).stop_reason == "requires_approval"


def test_the_pending_approval_conflict_is_an_error_before_any_output() -> None:
    mapper = EventMapper()
    for e in RECORDED["pending_conflict"]:
        mapper.feed(e["data"], error_frame=e["error"])
    assert not mapper.output
    assert mapper.stop is not None and mapper.stop.stop_reason == "error"
    assert isinstance(mapper.error, ErrorChunk) and "waiting for approval" in mapper.error.message


def test_server_tools_are_shown_as_the_servers_and_echoes_of_client_answers_are_not() -> None:
    chunks = _map(RECORDED["server_tool"], frozenset({"call_rec1"}))
    calls = [c for c in chunks if isinstance(c, ServerToolCall)]
    returns = [c for c in chunks if isinstance(c, ServerToolReturn)]
    assert [(c.tool_call_id, c.name) for c in calls] == [("call_mem1", "memory_insert")]
    assert calls[0].call.arguments["label"] == "persona"
    assert [(r.tool_call_id, r.name, r.status) for r in returns] == [("call_mem1", "memory_insert", "error")]
    wire = calls[0].to_wire()
    assert wire["message_type"] == "tool_call_message" and wire["server_side"] is True
    assert "outside tether's permissions and sandbox" in wire["note"]
    assert not any(isinstance(c, ToolCallRequest) for c in chunks)  # nothing for tether to run
    assert "".join(c.content for c in chunks if isinstance(c, AssistantText)) == "noted"


def test_a_replayed_event_after_a_reattach_is_ignored() -> None:
    events = RECORDED["text"]
    mapper = EventMapper()
    first = [c for e in events[:3] for c in mapper.feed(e["data"])]
    again = [c for e in events for c in mapper.feed(e["data"])]  # the server replays from seq 1
    text = "".join(c.content for c in [*first, *again] if isinstance(c, AssistantText))
    assert text == "Hello there, friend"


@pytest.mark.parametrize("data, why", [
    ({"message_type": "stop_reason", "stop_reason": "tool_rule"}, "tool_rule"),
    ({"message_type": "error_message", "message": "boom", "error_type": "internal_error",
      "run_id": "run-1"}, "boom"),
])
def test_stops_tether_has_no_name_for_and_errors_end_as_errors(data: dict[str, Any], why: str) -> None:
    mapper = EventMapper()
    mapper.feed(data)
    assert mapper.error is not None and why in mapper.error.message


def test_the_recorded_events_are_letta_client_streaming_responses() -> None:
    """The same events parse as the official client's `LettaStreamingResponse` union, so the
    mapping above is checked against Letta's own models, not only against tether's reading."""
    why = installed()
    if why is not None:
        pytest.fail(why)
    code = """
import json, sys
from pydantic import TypeAdapter
from letta_client.types.agents.letta_streaming_response import LettaStreamingResponse
adapter = TypeAdapter(LettaStreamingResponse)
seen = []
for name, events in json.load(open(sys.argv[1])).items():
    for e in events:
        model = adapter.validate_python(e["data"])
        seen.append([name, e["data"].get("message_type"), type(model).__name__])
print(json.dumps(seen))
"""
    done = subprocess.run([str(CACHE / "venv" / "bin" / "python"), "-c", code,
                           str(Path(__file__).with_name("recorded_stream.json"))],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout)
    classes = {(kind, cls) for _, kind, cls in seen}
    assert ("assistant_message", "AssistantMessage") in classes
    assert ("approval_request_message", "ApprovalRequestMessage") in classes
    assert ("tool_call_message", "ToolCallMessage") in classes
    assert ("stop_reason", "LettaStopReason") in classes
    assert ("usage_statistics", "LettaUsageStatistics") in classes
    assert ("error_message", "LettaErrorMessage") in classes
    assert len(seen) == sum(len(v) for v in RECORDED.values())
