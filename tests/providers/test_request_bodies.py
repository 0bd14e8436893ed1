"""What each adapter puts on the wire, as the fake provider recorded it (llama.cpp rules for Chat)."""

from __future__ import annotations

import json
from typing import Any

from tether.protocol.chunks import StopReason, UsageStatistics
from tether.protocol.messages import (
    AssistantMessage,
    ImagePart,
    TextPart,
    ThinkingPart,
    ToolResultMessage,
    UserMessage,
)
from tether.protocol.tool_calls import ToolCall
from tether.testing.fake_provider import FakeProvider

from .support import collect, make_provider, request, user

PARALLEL_HISTORY = (
    UserMessage("u1", (TextPart("look around"),), 0),
    AssistantMessage(
        "a1",
        (
            ThinkingPart("unsigned musing"),
            ThinkingPart("signed musing", signature="sig-abc"),
            ToolCall("t1", "Bash", {"command": "ls"}),
            ToolCall("t2", "Read", {"file_path": "a.txt"}),
        ),
        0,
    ),
    ToolResultMessage("r1", "t1", "Bash", (TextPart("a.txt"),), False, 0),
    ToolResultMessage("r2", "t2", "Read", (TextPart("no such file"),), True, 0),
)


def _sent(dialect: str, *messages: Any, **kw: Any) -> dict[str, Any]:
    with FakeProvider([{"text": "ok"}]) as fake:
        collect(make_provider(dialect, fake), request(*messages, **kw))
        assert fake.violations == []
        (recorded,) = fake.requests
    return recorded


def test_anthropic_request_shape() -> None:
    sent = _sent("anthropic", *PARALLEL_HISTORY)
    assert sent["path"] == "/v1/messages"
    assert sent["headers"]["x-api-key"] == "sk-ant-test"
    assert sent["headers"]["anthropic-version"] == "2023-06-01"
    body = sent["body"]
    assert body["stream"] is True and body["model"] == "test-model"
    assert body["system"][0]["text"] == "You are terse."
    assert body["tools"] == [
        {
            "name": "Bash",
            "description": "Run a shell command",
            "input_schema": {"type": "object", "properties": {"command": {"type": "string"}}},
        }
    ]
    assistant, results = body["messages"][1], body["messages"][2]
    # Unsigned thinking is dropped; signed thinking is replayed with its signature.
    assert assistant["content"][0] == {
        "type": "thinking",
        "thinking": "signed musing",
        "signature": "sig-abc",
    }
    assert [b["type"] for b in assistant["content"]] == ["thinking", "tool_use", "tool_use"]
    assert assistant["content"][1]["input"] == {"command": "ls"}
    # Consecutive tool results: one user message of tool_result blocks.
    assert len(body["messages"]) == 3
    assert results == {
        "role": "user",
        "content": [
            {"type": "tool_result", "tool_use_id": "t1", "content": "a.txt"},
            {
                "type": "tool_result",
                "tool_use_id": "t2",
                "content": "no such file",
                "is_error": True,
                "cache_control": {"type": "ephemeral"},  # the rolling breakpoint
            },
        ],
    }


def test_anthropic_thinking_budget_follows_reasoning_effort() -> None:
    body = _sent("anthropic", user("hi"), reasoning_effort="medium", max_tokens=4096)["body"]
    assert body["thinking"] == {"type": "enabled", "budget_tokens": 4095}


def test_responses_request_shape() -> None:
    sent = _sent("openai", *PARALLEL_HISTORY, session_id="conv-1")
    assert sent["path"] == "/v1/responses"
    assert sent["headers"]["authorization"] == "Bearer sk-test"
    body = sent["body"]
    assert (body["stream"], body["store"]) == (True, False)
    assert body["instructions"] == "You are terse."
    assert body["prompt_cache_key"] == "conv-1"
    assert body["tools"] == [
        {
            "type": "function",
            "name": "Bash",
            "description": "Run a shell command",
            "parameters": {"type": "object", "properties": {"command": {"type": "string"}}},
        }
    ]
    assert body["input"] == [
        {
            "type": "message",
            "role": "user",
            "content": [{"type": "input_text", "text": "look around"}],
        },
        {
            "type": "function_call",
            "call_id": "t1",
            "name": "Bash",
            "arguments": '{"command": "ls"}',
        },
        {
            "type": "function_call",
            "call_id": "t2",
            "name": "Read",
            "arguments": '{"file_path": "a.txt"}',
        },
        {"type": "function_call_output", "call_id": "t1", "output": "a.txt"},
        {"type": "function_call_output", "call_id": "t2", "output": "no such file"},
    ]


def test_responses_replays_assistant_text_as_output_text() -> None:
    history = (user("hi"), AssistantMessage("a1", (TextPart("Hello!"),), 0), user("again", "u2"))
    item = _sent("openai", *history)["body"]["input"][1]
    assert item["role"] == "assistant"
    assert item["content"] == [{"type": "output_text", "text": "Hello!", "annotations": []}]


def test_chat_request_shape_suits_llama_cpp() -> None:
    sent = _sent("openai-chat", *PARALLEL_HISTORY)
    assert sent["path"] == "/v1/chat/completions"
    body = sent["body"]
    assert body["stream"] is True
    assert body["stream_options"] == {"include_usage": True}
    messages = body["messages"]
    assert messages[0] == {"role": "system", "content": "You are terse."}
    assert messages[1] == {"role": "user", "content": "look around"}  # a string, not parts
    assistant = messages[2]
    assert assistant["content"] == ""  # never null
    assert [json.loads(c["function"]["arguments"]) for c in assistant["tool_calls"]] == [
        {"command": "ls"},
        {"file_path": "a.txt"},
    ]
    assert all(isinstance(c["function"]["arguments"], str) for c in assistant["tool_calls"])
    assert messages[3:] == [
        {"role": "tool", "tool_call_id": "t1", "content": "a.txt"},
        {"role": "tool", "tool_call_id": "t2", "content": "no such file"},
    ]
    assert all(m["content"] is not None for m in messages)
    assert body["tools"][0]["function"]["name"] == "Bash"


def test_chat_uses_parts_only_when_images_are_present() -> None:
    pic = UserMessage("u1", (TextPart("what is this?"), ImagePart("aGVsbG8=", "image/png")), 0)
    content = _sent("openai-chat", pic)["body"]["messages"][1]["content"]
    assert content == [
        {"type": "text", "text": "what is this?"},
        {"type": "image_url", "image_url": {"url": "data:image/png;base64,aGVsbG8="}},
    ]


def test_chat_tool_result_images_follow_the_tool_messages() -> None:
    history = (
        user("shoot"),
        AssistantMessage("a1", (ToolCall("t1", "Shot", {}), ToolCall("t2", "Shot", {})), 0),
        ToolResultMessage(
            "r1", "t1", "Shot", (TextPart("one"), ImagePart("AA==", "image/png")), False, 0
        ),
        ToolResultMessage("r2", "t2", "Shot", (TextPart("two"),), False, 0),
    )
    roles = [m["role"] for m in _sent("openai-chat", *history)["body"]["messages"]]
    assert roles == ["system", "user", "assistant", "tool", "tool", "user"]


def test_hosted_openai_chat_sends_max_completion_tokens_local_sends_max_tokens() -> None:
    assert "max_completion_tokens" in _sent("openai-chat", user("hi"))["body"]
    body = _sent("llama.cpp", user("hi"))["body"]
    assert body["max_tokens"] == 8192 and "max_completion_tokens" not in body


def test_chat_stream_without_usage_chunk_is_success() -> None:
    # llama.cpp ignores include_usage: finish_reason then [DONE], no usage chunk.
    with FakeProvider([{"text": "no usage here"}]) as fake:
        chunks = collect(
            make_provider("llama.cpp", fake),
            request(user("hi"), extra={"stream_options": {"include_usage": False}}),
        )
        assert fake.requests[0]["body"]["stream_options"] == {"include_usage": False}
    assert chunks[-2] == UsageStatistics()
    assert chunks[-1] == StopReason("end_turn")
