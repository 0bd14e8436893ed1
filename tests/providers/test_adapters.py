"""All three adapters against the fake provider over real loopback HTTP: the same behaviour each."""

from __future__ import annotations

import pytest

from tether.errors import ProviderHTTPError, ProviderTimeout, StreamCut
from tether.protocol.chunks import (
    AssistantText,
    Reasoning,
    RetryNotice,
    StopReason,
    UsageStatistics,
)
from tether.protocol.messages import AssistantMessage, TextPart, ToolResultMessage
from tether.protocol.tool_calls import ToolCall
from tether.providers.retry import RetryPolicy
from tether.testing.fake_provider import FakeProvider

from .support import (
    DIALECTS,
    collect,
    collect_until_error,
    kinds,
    make_provider,
    reasoning_of,
    request,
    text_of,
    tool_calls,
    user,
)

pytestmark = pytest.mark.parametrize("dialect", DIALECTS)
CALL_PREFIX = {"anthropic": "toolu_", "openai": "call_", "openai-chat": "call_"}
# How many events of a one-piece text reply come before its first text delta, per dialect.
EVENTS_BEFORE_TEXT = {"anthropic": 3, "openai": 4, "openai-chat": 1}


def test_text_reply_is_one_run_then_usage_then_stop(dialect: str) -> None:
    script = [{"text": "Hello, world. How are you today?", "usage": {"input": 12, "output": 5}}]
    with FakeProvider(script) as fake:
        chunks = collect(make_provider(dialect, fake), request())
    assert text_of(chunks) == "Hello, world. How are you today?"
    texts = [c for c in chunks if isinstance(c, AssistantText)]
    assert len(texts) == 5  # default chunk_size 7
    assert len({c.otid for c in texts}) == 1
    assert kinds(chunks[-2:]) == ["UsageStatistics", "StopReason"]
    usage, stop = chunks[-2], chunks[-1]
    assert isinstance(usage, UsageStatistics) and isinstance(stop, StopReason)
    assert (usage.usage.input_tokens, usage.usage.output_tokens) == (12, 5)
    assert stop.stop_reason == "end_turn"
    assert kinds(chunks).count("UsageStatistics") == kinds(chunks).count("StopReason") == 1


def test_thinking_then_text_are_separate_runs(dialect: str) -> None:
    script = [{"thinking": "The user greets me; greet back.", "text": "Hi there!"}]
    with FakeProvider(script) as fake:
        chunks = collect(make_provider(dialect, fake), request())
    assert reasoning_of(chunks) == "The user greets me; greet back."
    assert text_of(chunks) == "Hi there!"
    reasoning = [c for c in chunks if isinstance(c, Reasoning)]
    texts = [c for c in chunks if isinstance(c, AssistantText)]
    assert len({c.otid for c in reasoning}) == 1
    assert {c.otid for c in reasoning}.isdisjoint({c.otid for c in texts})
    assert chunks.index(reasoning[-1]) < chunks.index(texts[0])
    if dialect == "anthropic":  # the signature rides on the reasoning run, for replay
        assert any(c.signature and c.signature.startswith("sig_") for c in reasoning)


@pytest.mark.parametrize("chunk_size", [1, 2, 3])
def test_tool_call_arguments_split_anywhere_reassemble_exactly(
    dialect: str, chunk_size: int
) -> None:
    raw = (
        '{"command": "echo \\"h\u00e9llo\\" && ls -la /tmp", "timeout": 5, "nested": {"a": [1, 2]}}'
    )
    script = [{"tool_calls": [{"name": "Bash", "arguments": raw}], "chunk_size": chunk_size}]
    with FakeProvider(script) as fake:
        chunks = collect(make_provider(dialect, fake), request())
    (call,) = tool_calls(chunks)
    assert call.arguments == raw
    assert call.name == "Bash"
    assert call.tool_call_id.startswith(CALL_PREFIX[dialect])
    assert chunks[-1] == StopReason("requires_approval")


def test_empty_tool_arguments_become_an_empty_object(dialect: str) -> None:
    with FakeProvider([{"tool_calls": [{"name": "LS", "arguments": ""}]}]) as fake:
        (call,) = tool_calls(collect(make_provider(dialect, fake), request()))
    assert call.arguments == "{}"


def test_two_parallel_tool_calls_keep_order_ids_and_arguments(dialect: str) -> None:
    script = [
        {
            "text": "Running two.",
            "tool_calls": [
                {"name": "Bash", "arguments": {"command": "pwd"}, "id": "first-1"},
                {"name": "Read", "arguments": {"file_path": "/etc/hosts"}, "id": "second-2"},
            ],
            "chunk_size": 2,
        }
    ]
    with FakeProvider(script) as fake:
        chunks = collect(make_provider(dialect, fake), request())
    calls = tool_calls(chunks)
    assert [(c.tool_call_id, c.name, c.arguments) for c in calls] == [
        ("first-1", "Bash", '{"command":"pwd"}'),
        ("second-2", "Read", '{"file_path":"/etc/hosts"}'),
    ]
    assert text_of(chunks) == "Running two."
    assert chunks[-1] == StopReason("requires_approval")


def _history(call_id: str, result_id: str) -> tuple:
    assistant = AssistantMessage(
        "a1", (TextPart("Let me look."), ToolCall(call_id, "Bash", {"command": "ls"})), 0
    )
    result = ToolResultMessage("r1", result_id, "Bash", (TextPart("README.md\nsrc"),), False, 0)
    return (user("what is here?"), assistant, result)


def test_tool_result_round_trip_is_accepted(dialect: str) -> None:
    script = [
        {"tool_calls": [{"name": "Bash", "arguments": {"command": "ls"}}]},
        {"text": "A README and src."},
    ]
    with FakeProvider(script) as fake:
        provider = make_provider(dialect, fake)
        (call,) = tool_calls(collect(provider, request(user("what is here?"))))
        chunks = collect(provider, request(*_history(call.tool_call_id, call.tool_call_id)))
        assert fake.violations == []
    assert text_of(chunks) == "A README and src."


def test_tool_result_for_an_unknown_call_is_refused_by_the_fake(dialect: str) -> None:
    with FakeProvider([{"text": "never reached"}]) as fake:
        seen, exc = collect_until_error(
            make_provider(dialect, fake), request(*_history("call-a", "call-zzz"))
        )
        assert isinstance(exc, ProviderHTTPError) and exc.status == 400
        assert "call-zzz" in str(exc)
        assert len(fake.requests) == 1  # 400 is not retried
        assert fake.violations and "call-zzz" in " ".join(fake.violations[0]["problems"])
        assert fake.remaining == 1  # a refused request consumes no turn
    assert seen == []


def test_429_with_retry_after_zero_retries_once_then_answers(dialect: str) -> None:
    script = [{"fault": {"status": 429, "retry_after": 0}}, {"text": "after the wait"}]
    with FakeProvider(script) as fake:
        chunks = collect(make_provider(dialect, fake, retry=RetryPolicy()), request())
        assert len(fake.requests) == 2
    notice = chunks[0]
    assert isinstance(notice, RetryNotice)
    assert (notice.attempt, notice.max_attempts, notice.delay_ms) == (1, 3, 0)
    assert "429" in notice.message
    assert kinds(chunks).count("RetryNotice") == 1
    assert text_of(chunks) == "after the wait"


def test_500_four_times_fails_after_three_retries(dialect: str) -> None:
    script = [{"fault": {"status": 500, "retry_after": 0}}] * 4 + [{"text": "too late"}]
    with FakeProvider(script) as fake:
        seen, exc = collect_until_error(
            make_provider(dialect, fake, retry=RetryPolicy()), request()
        )
        assert len(fake.requests) == 4
    assert isinstance(exc, ProviderHTTPError) and exc.status == 500
    assert [c.attempt for c in seen if isinstance(c, RetryNotice)] == [1, 2, 3]
    assert kinds(seen) == ["RetryNotice"] * 3


def test_401_is_not_retried(dialect: str) -> None:
    script = [{"fault": {"status": 401, "body": '{"error": {"message": "invalid x-api-key"}}'}}]
    with FakeProvider(script) as fake:
        seen, exc = collect_until_error(make_provider(dialect, fake), request())
        assert len(fake.requests) == 1
    assert isinstance(exc, ProviderHTTPError) and exc.status == 401
    assert "invalid x-api-key" in str(exc)
    assert seen == []


def test_quota_429_is_not_retried(dialect: str) -> None:
    body = '{"error": {"message": "You exceeded your current quota", "code": "insufficient_quota"}}'
    with FakeProvider([{"fault": {"status": 429, "retry_after": 0, "body": body}}]) as fake:
        _, exc = collect_until_error(make_provider(dialect, fake), request())
        assert len(fake.requests) == 1
    assert isinstance(exc, ProviderHTTPError) and not exc.retryable


def test_stream_cut_before_output_is_retried(dialect: str) -> None:
    script = [{"text": "lost", "fault": {"cut_after_events": 1}}, {"text": "second try"}]
    with FakeProvider(script) as fake:
        chunks = collect(make_provider(dialect, fake), request())
    assert kinds(chunks)[0] == "RetryNotice"
    assert text_of(chunks) == "second try"


def test_stream_cut_every_time_raises_stream_cut(dialect: str) -> None:
    with FakeProvider([{"text": "lost", "fault": {"cut_after_events": 1}}] * 4) as fake:
        seen, exc = collect_until_error(make_provider(dialect, fake), request())
        assert len(fake.requests) == 4
    assert isinstance(exc, StreamCut)
    assert kinds(seen) == ["RetryNotice"] * 3


@pytest.mark.parametrize("graceful", [False, True])
def test_stream_cut_after_text_propagates_without_retry(dialect: str, graceful: bool) -> None:
    cut_at = EVENTS_BEFORE_TEXT[dialect] + 2  # two text deltas went out
    fault = {"cut_after_events": cut_at, "graceful": graceful}
    script = [
        {"text": "abcdefghijkl", "chunk_size": 3, "fault": fault},
        {"text": "x"},
    ]
    with FakeProvider(script) as fake:
        seen, exc = collect_until_error(make_provider(dialect, fake), request())
        assert len(fake.requests) == 1
        assert fake.remaining == 1
    assert isinstance(exc, StreamCut)
    assert text_of(seen) == "abcdef"
    assert "RetryNotice" not in kinds(seen)


@pytest.mark.parametrize("graceful", [False, True])
def test_cut_just_before_the_terminal_event(dialect: str, graceful: bool) -> None:
    # One-piece text: anthropic 7 events (…message_delta, message_stop), responses 9
    # (…response.completed), chat 5 (role, text, finish, usage, [DONE]).
    events = {"anthropic": 7, "openai": 9, "openai-chat": 5}[dialect]
    cut_at = 3 if dialect == "openai-chat" else events - 1  # chat: right after finish_reason
    fault = {"cut_after_events": cut_at, "graceful": graceful}
    with FakeProvider([{"text": "hi", "fault": fault}]) as fake:
        provider = make_provider(dialect, fake)
        if dialect == "openai-chat":  # finish_reason then EOF without [DONE] is a complete answer
            chunks = collect(provider, request())
            assert text_of(chunks) == "hi" and chunks[-1] == StopReason("end_turn")
        else:
            seen, exc = collect_until_error(provider, request())
            assert isinstance(exc, StreamCut)
            assert text_of(seen) == "hi"
            assert "StopReason" not in kinds(seen)


def test_max_tokens_is_max_tokens_exceeded(dialect: str) -> None:
    with FakeProvider([{"text": "truncated answ", "stop": "max_tokens"}]) as fake:
        chunks = collect(make_provider(dialect, fake), request())
    assert chunks[-1] == StopReason("max_tokens_exceeded")
    assert text_of(chunks) == "truncated answ"


def test_hang_times_out_as_provider_timeout(dialect: str) -> None:
    with FakeProvider([{"fault": {"hang": True}}]) as fake:
        provider = make_provider(dialect, fake, retry=RetryPolicy(max_retries=0), timeout_s=0.3)
        _, exc = collect_until_error(provider, request())
    assert isinstance(exc, ProviderTimeout)
    assert "0.3 s" in str(exc)
