"""Each dialect's event mapper fed hand-written events: the quirks real servers have."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tether.errors import ProviderError, StreamCut
from tether.protocol.chunks import Chunk, StopReason, ToolCallRequest, UsageStatistics
from tether.protocol.messages import Usage
from tether.providers.anthropic import AnthropicEvents
from tether.providers.openai_chat import ChatEvents
from tether.providers.openai_responses import ResponsesEvents
from tether.providers.sse import SSEEvent

from .support import kinds, reasoning_of, text_of


def ev(data: Any, event: str = "message") -> SSEEvent:
    return SSEEvent(event, data if isinstance(data, str) else json.dumps(data))


def feed(mapper: Any, events: list[SSEEvent]) -> list[Chunk]:
    out: list[Chunk] = []
    for e in events:
        out += mapper.feed(e)
    return out


def chat(delta: dict[str, Any] | None = None, finish: str | None = None) -> SSEEvent:
    return ev({"choices": [{"index": 0, "delta": delta or {}, "finish_reason": finish}]})


# --- Chat Completions ----------------------------------------------------------------------


def test_chat_reasoning_field_and_split_tool_name() -> None:
    mapper = ChatEvents()
    chunks = feed(
        mapper,
        [
            chat({"reasoning": "think"}),
            chat({"reasoning_content": "ing"}),
            chat({"tool_calls": [{"index": 0, "id": "c1", "function": {"name": "Ba"}}]}),
            chat({"tool_calls": [{"index": 0, "function": {"name": "sh", "arguments": '{"a"'}}]}),
            chat({"tool_calls": [{"index": 0, "function": {"arguments": ":1}"}}]}),
            chat(finish="tool_calls"),
            ev("[DONE]"),
        ],
    )
    assert reasoning_of(chunks) == "thinking"
    assert [c for c in chunks if isinstance(c, ToolCallRequest)][0].name == "Bash"
    assert chunks[-1] == StopReason("requires_approval")
    assert mapper.done


def test_chat_parallel_calls_all_at_index_zero_are_told_apart_by_id() -> None:
    chunks = feed(
        ChatEvents(),
        [
            chat(
                {
                    "tool_calls": [
                        {"index": 0, "id": "a", "function": {"name": "X", "arguments": "{}"}}
                    ]
                }
            ),
            chat(
                {
                    "tool_calls": [
                        {"index": 0, "id": "b", "function": {"name": "Y", "arguments": "{}"}}
                    ]
                }
            ),
            chat(finish="tool_calls"),
            ev("[DONE]"),
        ],
    )
    assert [(c.tool_call_id, c.name) for c in chunks if isinstance(c, ToolCallRequest)] == [
        ("a", "X"),
        ("b", "Y"),
    ]


def test_chat_tool_call_without_id_gets_one() -> None:
    chunks = feed(
        ChatEvents(),
        [
            chat({"tool_calls": [{"index": 0, "function": {"name": "X", "arguments": ""}}]}),
            chat(finish="stop"),
            ev("[DONE]"),
        ],
    )
    (call,) = [c for c in chunks if isinstance(c, ToolCallRequest)]
    assert call.tool_call_id.startswith("call_") and call.arguments == "{}"


def test_chat_eof_without_finish_reason_is_a_cut() -> None:
    mapper = ChatEvents()
    feed(mapper, [chat({"content": "partial"})])
    with pytest.raises(StreamCut, match="finish_reason"):
        mapper.end_of_stream()


def test_chat_finish_then_eof_is_complete() -> None:
    mapper = ChatEvents()
    chunks = feed(mapper, [chat({"content": "done"}), chat(finish="length")])
    chunks += mapper.end_of_stream()
    assert text_of(chunks) == "done"
    assert chunks[-1] == StopReason("max_tokens_exceeded")


def test_chat_usage_chunk_subtracts_cached_tokens() -> None:
    usage = {
        "prompt_tokens": 100,
        "completion_tokens": 7,
        "prompt_tokens_details": {"cached_tokens": 60},
    }
    chunks = feed(
        ChatEvents(),
        [chat({"content": "x"}, "stop"), ev({"choices": [], "usage": usage}), ev("[DONE]")],
    )
    assert chunks[-2] == UsageStatistics(
        Usage(input_tokens=40, output_tokens=7, cache_read_tokens=60)
    )


def test_chat_error_payload_raises() -> None:
    with pytest.raises(ProviderError, match="context size exceeded"):
        ChatEvents().feed(ev({"error": {"code": 400, "message": "context size exceeded"}}))


def test_malformed_event_json_is_a_provider_error() -> None:
    with pytest.raises(ProviderError, match="malformed"):
        ChatEvents().feed(ev("{not json"))


# --- Anthropic -----------------------------------------------------------------------------


def test_anthropic_error_event_overloaded_is_retryable() -> None:
    with pytest.raises(ProviderError) as info:
        AnthropicEvents().feed(
            ev(
                {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}},
                "error",
            )
        )
    assert info.value.retryable and "Overloaded" in str(info.value)


def test_anthropic_usage_and_unknown_events() -> None:
    mapper = AnthropicEvents()
    start = {
        "type": "message_start",
        "message": {"usage": {"input_tokens": 9, "cache_read_input_tokens": 4, "output_tokens": 1}},
    }
    chunks = feed(
        mapper,
        [
            ev(start, "message_start"),
            ev(
                {
                    "type": "content_block_start",
                    "index": 0,
                    "content_block": {"type": "redacted_thinking", "data": "x"},
                }
            ),
            ev({"type": "content_block_stop", "index": 0}),
            ev({"type": "some_future_event"}),
            ev(
                {
                    "type": "message_delta",
                    "delta": {"stop_reason": "end_turn"},
                    "usage": {"output_tokens": 30},
                }
            ),
            ev({"type": "message_stop"}),
        ],
    )
    assert kinds(chunks) == ["UsageStatistics", "StopReason"]
    assert chunks[0] == UsageStatistics(
        Usage(input_tokens=9, output_tokens=30, cache_read_tokens=4)
    )


# --- Responses -----------------------------------------------------------------------------


def test_responses_failed_raises_with_the_message() -> None:
    failed = {
        "type": "response.failed",
        "response": {"error": {"code": "server_error", "message": "boom"}},
    }
    with pytest.raises(ProviderError, match="boom") as info:
        ResponsesEvents().feed(ev(failed))
    assert info.value.retryable


def test_responses_error_event_raises() -> None:
    with pytest.raises(ProviderError, match="bad key"):
        ResponsesEvents().feed(
            ev({"type": "error", "code": "invalid_api_key", "message": "bad key"})
        )


def test_responses_function_call_seen_only_in_completed_output() -> None:
    item = {
        "type": "function_call",
        "id": "fc_1",
        "call_id": "call_9",
        "name": "X",
        "arguments": '{"q":1}',
    }
    chunks = feed(
        ResponsesEvents(),
        [
            ev({"type": "response.reasoning_text.delta", "delta": "hmm"}),
            ev(
                {
                    "type": "response.completed",
                    "response": {"status": "completed", "output": [item]},
                }
            ),
        ],
    )
    assert reasoning_of(chunks) == "hmm"
    assert [(c.tool_call_id, c.arguments) for c in chunks if isinstance(c, ToolCallRequest)] == [
        ("call_9", '{"q":1}')
    ]
    assert chunks[-1] == StopReason("requires_approval")
