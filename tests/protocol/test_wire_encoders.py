"""The two serialisers fed typed events: which events become stream-json lines (runs merged
unless partial), the `result` line each kind of run ends with, and the provider's error
rendered the same on both wires from the typed TurnError."""

from __future__ import annotations

import pytest

from tether.protocol import wire
from tether.protocol.chunks import (
    AssistantText,
    ErrorChunk,
    Reasoning,
    StopReason,
    ToolCallRequest,
    UsageStatistics,
)
from tether.protocol.messages import Usage
from tether.protocol.stream_json import NO_RESPONSE, StreamJsonEncoder
from tether.protocol.tool_calls import ToolCall, ToolReturn
from tether.protocol.turns import (
    LocalToolCall,
    LocalToolReturn,
    SubagentProgress,
    TurnError,
    TurnOutcome,
)
from tether.server.protocol_v2 import RuntimeScope
from tether.server.v2_frames import EventStream, TurnFinished

ENV = wire.Envelope("agent-1", "conv-1")


def _lines(partial: bool, events: list) -> list[dict]:
    encoder = StreamJsonEncoder(ENV, partial=partial)
    out = [line for event in events for line in encoder.encode(event)]
    return out + encoder.flush()


def _turn() -> list:
    return [
        Reasoning("r1", "think ", None, "run-1"),
        Reasoning("r1", "more", "sig", "run-1"),
        AssistantText("a1", "Hel", "run-1"),
        AssistantText("a1", "lo", "run-1"),
        ToolCallRequest(ToolCall.parse("call-1", "Bash", '{"command": "ls"}'), run_id="run-1"),
        LocalToolCall(ToolCall.parse("call-1", "Bash", '{"command": "ls"}')),
        LocalToolReturn(ToolReturn("call-1", "Bash", "a\nb", False)),
        AssistantText("a2", "done", "run-1"),
        UsageStatistics(Usage(10, 5), run_id="run-1"),
        StopReason("end_turn", "run-1"),
    ]


def test_runs_are_merged_into_one_line_each_and_approval_requests_dropped() -> None:
    lines = _lines(False, _turn())
    kinds = [(line["type"], line.get("message_type")) for line in lines]
    assert kinds == [
        ("message", "reasoning_message"),
        ("message", "assistant_message"),
        ("message", "tool_call_message"),
        ("message", "tool_return_message"),
        ("message", "assistant_message"),
        ("message", "usage_statistics"),
        ("message", "stop_reason"),
    ]
    assert lines[0]["reasoning"] == "think more" and lines[0]["signature"] == "sig"
    assert lines[1]["content"] == "Hello" and lines[4]["content"] == "done"
    assert all(line["session_id"] == "agent-1" and line["conversation_id"] == "conv-1"
               for line in lines)


def test_partial_messages_pass_every_chunk_through_as_it_comes() -> None:
    lines = _lines(True, _turn())
    deltas = [line["event"] for line in lines if line["type"] == "stream_event"]
    assert [d.get("content") for d in deltas if d["message_type"] == "assistant_message"] == [
        "Hel", "lo", "done"]
    assert not any(d["message_type"] == "approval_request_message" for d in deltas)


def test_the_provider_error_is_the_same_api_error_on_both_wires() -> None:
    chunk = ErrorChunk("overloaded", "llm_overloaded", "529 from upstream", True, "run-9")
    error = TurnError("overloaded", "llm_api_error", "run-9", chunk)
    expected = {"message_type": "error_message", "message": "overloaded",
                "error_type": "llm_overloaded", "detail": "529 from upstream", "run_id": "run-9"}
    (line,) = _lines(False, [chunk, error])  # the chunk itself is no line: the turn error is
    assert line["type"] == "error" and line["api_error"] == expected
    stream = EventStream(RuntimeScope("agent-1", "conv-1"), "inst")
    assert stream.delta(chunk) is None
    delta = stream.delta(error)
    assert delta is not None and delta["message_type"] == "loop_error"
    assert delta["api_error"] == expected and delta["run_id"] == "run-9"


def _outcome(**fields) -> TurnOutcome:
    return TurnOutcome(steps=2, usage=Usage(10, 5), run_ids=["run-1"], **fields)


@pytest.mark.parametrize(
    ("outcome", "subtype", "stop_reason"),
    [
        (_outcome(last_text="hi"), "success", None),
        (_outcome(stop_reason="requires_approval"), "success", None),
        (_outcome(stop_reason="cancelled", error=TurnError("Interrupted", "cancelled")),
         "interrupted", "cancelled"),
        (_outcome(stop_reason="max_steps", error=TurnError("limit", "max_steps")),
         "error", "max_steps"),
        (_outcome(stop_reason="llm_api_error"), "error", "llm_api_error"),
    ],
)
def test_each_bidirectional_turn_ends_with_its_result_line(
    outcome: TurnOutcome, subtype: str, stop_reason: str | None
) -> None:
    line = StreamJsonEncoder(ENV, partial=False).turn_result(
        outcome, duration_ms=7, api_ms=3
    )
    assert line["type"] == "result" and line["subtype"] == subtype
    assert line.get("stop_reason") == stop_reason
    if subtype == "success":
        assert line["usage"]["total_tokens"] == 15 and line["duration_api_ms"] == 3
    else:
        assert line["usage"] is None and line["duration_api_ms"] == 0


def test_a_one_shot_error_ends_on_its_error_line_unless_tether_itself_failed() -> None:
    encoder = StreamJsonEncoder(ENV, partial=False)
    failed = _outcome(stop_reason="error", error=TurnError("disk full", "error"))
    assert encoder.run_result(failed, duration_ms=1, api_ms=0) is None
    line = encoder.run_result(failed, duration_ms=1, api_ms=0, result_on_error=True)
    assert line is not None and (line["subtype"], line["result"]) == ("error", "disk full")
    empty = encoder.run_result(_outcome(), duration_ms=1, api_ms=0)
    assert empty is not None and empty["result"] == NO_RESPONSE


def test_control_lines_and_subagent_lines_carry_the_envelope() -> None:
    ok = wire.control_response(ENV, "req-1", {"registered": 2})
    assert ok["response"] == {"subtype": "success", "request_id": "req-1",
                              "response": {"registered": 2}}
    bad = wire.control_response(ENV, "req-2", error="nope")
    assert bad["response"] == {"subtype": "error", "request_id": "req-2", "error": "nope"}
    ask = wire.control_request(ENV, "perm-1", {"subtype": "can_use_tool"})
    assert (ask["type"], ask["request_id"], ask["session_id"]) == (
        "control_request", "perm-1", "agent-1")
    # Key order too: the reference's clients see these exact objects.
    asked = wire.can_use_tool(tool_name="Write", tool_call_id="c1", args={"file_path": "a"},
                              decision_reason="no rule allows it", diffs=[{"path": "a"}])
    assert list(asked.items()) == [
        ("subtype", "can_use_tool"), ("tool_name", "Write"), ("input", {"file_path": "a"}),
        ("tool_call_id", "c1"), ("permission_suggestions", []), ("blocked_path", None),
        ("decision_reason", "no rule allows it"), ("diffs", [{"path": "a"}])]
    question = wire.can_use_tool(tool_name="AskUserQuestion", tool_call_id="ask-1", args={})
    assert "decision_reason" not in question and "diffs" not in question
    assert list(wire.execute_external_tool("c2", "lookup", {"q": 1}).items()) == [
        ("subtype", "execute_external_tool"), ("tool_call_id", "c2"), ("tool_name", "lookup"),
        ("input", {"q": 1})]
    progress = SubagentProgress({"message_type": "assistant_message"}, "task-1", "explore", None,
                                "call-7")
    line = ENV.wrap(wire.subagent_line(progress))
    assert line["type"] == "stream_event" and line["parent_tool_call_id"] == "call-7"
    assert line["event"] == {"message_type": "assistant_message"}


def test_v2_turn_finished_from_the_typed_end_of_a_turn() -> None:
    stream = EventStream(RuntimeScope("agent-1", "conv-1"), "inst")
    frame = stream.turn_finished(TurnFinished("turn-1", "end_turn", ("r1", "r2"), "req-1"))
    assert frame["type"] == "turn_finished" and frame["run_id"] == "r2"
    assert frame["run_ids"] == ["r1", "r2"] and "error" not in frame
    assert frame["event_seq"] == 1 and frame["idempotency_key"] == "inst:conv-1:1"
