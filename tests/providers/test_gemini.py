"""Gemini on its native streaming API: request shape, stream mapping, safety stops, schemas."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import pytest

from tests.providers.support import (
    FAST_RETRY,
    collect,
    collect_until_error,
    reasoning_of,
    request,
    text_of,
    tool_calls,
    user,
)
from tether.errors import ProviderError, StreamCut, UsageError
from tether.protocol.chunks import Reasoning, StopReason, UsageStatistics
from tether.protocol.llm import ToolSpec
from tether.protocol.messages import AssistantMessage, TextPart, ThinkingPart, ToolResultMessage
from tether.protocol.tool_calls import ToolCall
from tether.providers.base import Endpoint
from tether.providers.catalog import parse_handle, resolve_provider
from tether.providers.gemini import GeminiProvider
from tether.providers.gemini_schema import to_gemini_schema, tool_parameters
from tether.testing.fake_provider import FakeProvider


def gemini(fake: FakeProvider) -> GeminiProvider:
    return GeminiProvider(Endpoint("google", f"{fake.url}/v1beta", "g-key", 10.0), retry=FAST_RETRY)


def test_text_thinking_usage_with_cached_tokens() -> None:
    turn = {
        "thinking": "let me think",
        "text": "Hello there",
        "usage": {"input": 30, "output": 4, "cached": 100},
    }
    with FakeProvider([turn]) as fake:
        chunks = collect(gemini(fake), request(user("hi"), reasoning_effort="high"))
        (sent,) = fake.of("gemini")
    assert fake.violations == []
    assert sent["path"] == "/v1beta/models/test-model:streamGenerateContent?alt=sse"
    assert sent["headers"]["x-goog-api-key"] == "g-key"
    body = sent["body"]
    assert body["contents"] == [{"role": "user", "parts": [{"text": "hi"}]}]
    assert body["systemInstruction"] == {"parts": [{"text": "You are terse."}]}
    assert body["generationConfig"]["maxOutputTokens"] == 8192
    assert body["generationConfig"]["thinkingConfig"] == {
        "includeThoughts": True,
        "thinkingBudget": 8191,
    }
    assert body["tools"][0]["functionDeclarations"][0]["name"] == "Bash"
    assert reasoning_of(chunks) == "let me think"
    assert text_of(chunks) == "Hello there"
    assert any(isinstance(c, Reasoning) and c.signature for c in chunks)  # to replay on the text
    usage = next(c for c in chunks if isinstance(c, UsageStatistics))
    thoughts = len("let me think") // 4
    assert (usage.usage.input_tokens, usage.usage.cache_read_tokens) == (30, 100)
    assert (usage.usage.output_tokens, usage.usage.reasoning_tokens) == (4 + thoughts, thoughts)
    assert chunks[-1] == StopReason("end_turn")


def test_gemini_3_takes_a_thinking_level() -> None:
    with FakeProvider([{"text": "ok"}]) as fake:
        req = replace(request(user("hi"), reasoning_effort="low"), model="gemini-3-pro")
        collect(gemini(fake), req)
        (sent,) = fake.of("gemini")
    assert sent["body"]["generationConfig"]["thinkingConfig"] == {
        "includeThoughts": True,
        "thinkingLevel": "low",
    }


def test_parallel_function_calls_then_results_replayed() -> None:
    calls = [
        {"name": "Bash", "arguments": {"command": "ls"}, "id": ""},  # an older model: no id
        {"name": "Read", "arguments": {"file_path": "/tmp/x"}, "id": "gem-call-2"},
    ]
    with FakeProvider([{"thinking": "two things", "tool_calls": calls}, {"text": "done"}]) as fake:
        first = collect(gemini(fake), request(user("go")))
        made = tool_calls(first)
        assert [(c.name, json.loads(c.arguments)) for c in made] == [
            ("Bash", {"command": "ls"}),
            ("Read", {"file_path": "/tmp/x"}),
        ]
        assert made[1].tool_call_id == "gem-call-2" and made[0].tool_call_id.startswith(
            "gemini-local-"
        )
        assert first[-1] == StopReason("requires_approval")
        signature = next(c.signature for c in first if isinstance(c, Reasoning) and c.signature)
        history = (
            user("go"),
            AssistantMessage("a1", (ThinkingPart("two things", signature),
                                    ToolCall(made[0].tool_call_id, "Bash", {"command": "ls"}),
                                    ToolCall("gem-call-2", "Read", {"file_path": "/tmp/x"})), 0),
            ToolResultMessage("r1", made[0].tool_call_id, "Bash", (TextPart("a.txt"),), False, 0),
            ToolResultMessage("r2", "gem-call-2", "Read", (TextPart("no such file"),), True, 0),
        )  # fmt: skip
        second = collect(gemini(fake), request(*history))
        replay = fake.of("gemini")[1]["body"]["contents"]
    assert fake.violations == []
    assert text_of(second) == "done"
    assert replay[1] == {
        "role": "model",
        "parts": [
            {
                "functionCall": {"name": "Bash", "args": {"command": "ls"}},
                "thoughtSignature": signature,
            },
            {"functionCall": {"name": "Read", "args": {"file_path": "/tmp/x"}, "id": "gem-call-2"}},
        ],
    }  # Gemini's own id goes back; the one tether made does not
    assert replay[2] == {
        "role": "user",
        "parts": [
            {"functionResponse": {"name": "Bash", "response": {"output": "a.txt"}}},
            {
                "functionResponse": {
                    "name": "Read",
                    "response": {"error": "no such file"},
                    "id": "gem-call-2",
                }
            },
        ],
    }


@pytest.mark.parametrize(
    ("turn", "words"),
    [
        (
            {"text": "partial", "finish": "SAFETY"},
            ["finishReason SAFETY", "safety", "HARM_CATEGORY_HARASSMENT"],
        ),
        ({"text": "quoted", "finish": "RECITATION"}, ["finishReason RECITATION", "reciting"]),
        ({"finish": "PROHIBITED_CONTENT"}, ["finishReason PROHIBITED_CONTENT", "prohibited"]),
        ({"block": "SAFETY"}, ["blocked the prompt", "blockReason SAFETY"]),
        ({"block": "PROHIBITED_CONTENT"}, ["blocked the prompt", "blockReason PROHIBITED_CONTENT"]),
    ],
)
def test_safety_stops_are_errors_naming_the_reason(turn: dict, words: list[str]) -> None:
    with FakeProvider([turn, {"text": "must not be used"}]) as fake:
        seen, error = collect_until_error(gemini(fake), request(user("hi")))
        assert len(fake.of("gemini")) == 1  # a filter's verdict is not retried
    assert isinstance(error, ProviderError) and not error.retryable
    for word in words:
        assert word in str(error)
    assert text_of(seen) == turn.get("text", "")


def test_max_tokens_and_cut_stream() -> None:
    with FakeProvider([{"text": "long", "stop": "max_tokens"}]) as fake:
        assert collect(gemini(fake), request(user("hi")))[-1] == StopReason("max_tokens_exceeded")
    # Cut before the finishReason chunk: incomplete, retried, then given up (not a success).
    cut = {"text": "abcdefghijklmnop", "chunk_size": 4, "fault": {"cut_after_events": 2}}
    with FakeProvider([cut] * 4) as fake:
        seen, error = collect_until_error(gemini(fake), request(user("hi")))
    assert isinstance(error, StreamCut) and text_of(seen) == "abcdefgh"


def test_http_errors_are_retried_before_output() -> None:
    with FakeProvider([{"fault": {"status": 503}}, {"text": "after retry"}]) as fake:
        chunks = collect(gemini(fake), request(user("hi")))
    assert text_of(chunks) == "after retry"
    assert [type(c).__name__ for c in chunks][0] == "RetryNotice"


def test_schema_conversion_drops_what_gemini_refuses() -> None:
    schema = {
        "$schema": "http://json-schema.org/draft-07/schema#",
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "mode": {"type": "string", "enum": ["a", "b"], "const": "a"},
            "limit": {"type": ["integer", "null"], "exclusiveMinimum": 0},
            "paths": {"type": "array", "items": {"type": "string", "format": "uri"}},
            "either": {"oneOf": [{"type": "string"}, {"type": "number"}]},
            "level": {"type": "integer", "enum": [1, 2]},
        },
        "required": ["mode", "ghost"],
    }
    assert to_gemini_schema(schema) == {
        "type": "object",
        "properties": {
            "mode": {"type": "string", "enum": ["a", "b"]},
            "limit": {"type": "integer", "nullable": True},
            "paths": {"type": "array", "items": {"type": "string"}},
            "either": {"anyOf": [{"type": "string"}, {"type": "number"}]},
            "level": {"type": "integer"},
        },
        "required": ["mode"],
    }
    assert (
        tool_parameters({"type": "object", "properties": {}, "additionalProperties": False}) is None
    )


def test_real_tool_schemas_pass_the_fake_gemini_checks() -> None:
    """Every built-in tool's schema, converted, is one Gemini accepts."""
    from tether.core.tools import ToolRegistry
    from tether.tools.builtin import register_builtin_tools

    registry = ToolRegistry()
    register_builtin_tools(registry)
    specs = tuple(
        ToolSpec(registry.get(n).name, registry.get(n).description, registry.get(n).parameters)
        for n in registry.names()
    )  # type: ignore[union-attr]
    with FakeProvider([{"text": "ok"}]) as fake:
        collect(gemini(fake), request(user("hi"), tools=specs))
        (sent,) = fake.of("gemini")
    assert fake.violations == []
    names = {d["name"] for d in sent["body"]["tools"][0]["functionDeclarations"]}
    assert {"Bash", "Read", "Edit"} <= names


def test_handles_keys_and_aliases(tmp_path: Path) -> None:
    assert parse_handle("google_ai/gemini-2.5-pro") == ("google", "gemini-2.5-pro")
    for var in ("GEMINI_API_KEY", "GOOGLE_API_KEY", "GOOGLE_GENERATIVE_AI_API_KEY"):
        provider = resolve_provider("google/gemini-2.5-flash", tmp_path, {var: f"k-{var}"})
        assert isinstance(provider, GeminiProvider)
        assert provider.endpoint.api_key == f"k-{var}"
        assert provider.endpoint.base_url == "https://generativelanguage.googleapis.com/v1beta"
    with pytest.raises(UsageError, match="GEMINI_API_KEY or GOOGLE_API_KEY"):
        resolve_provider("google/gemini-2.5-flash", tmp_path, {})
    with pytest.raises(UsageError, match="names no model"):
        parse_handle("google/")


def test_a_signature_after_thoughts_joins_their_run_and_arguments_keep_their_text() -> None:
    """Thinking then text is one reasoning message (the text's signature is the run's), and
    arguments Gemini sent as an object are JSON text with non-ASCII left as written."""
    call = {"name": "Bash", "arguments": {"command": 'echo "héllo"'}}
    with FakeProvider([{"thinking": "ponder", "text": "ok"}, {"tool_calls": [call]}]) as fake:
        first = collect(gemini(fake), request(user("hi")))
        second = collect(gemini(fake), request(user("hi")))
    runs = {c.otid for c in first if isinstance(c, Reasoning)}
    assert len(runs) == 1 and reasoning_of(first) == "ponder"
    assert [c.signature for c in first if isinstance(c, Reasoning) and c.signature]
    assert tool_calls(second)[0].arguments == '{"command": "echo \\"héllo\\""}'
