"""Prompt caching by each provider's rules, read off the request bodies the fake provider
recorded: Anthropic breakpoints (stable prefix, rolling latest turn, previous request's tail,
never more than four), OpenAI's `prompt_cache_key`, and cache usage in `usage_statistics`."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.support import run_tether, tether_env
from tests.providers.support import collect, make_provider, request, user
from tether.protocol.chunks import UsageStatistics
from tether.protocol.llm import ProviderRequest
from tether.protocol.messages import (
    AssistantMessage,
    Message,
    TextPart,
    ThinkingPart,
    ToolResultMessage,
)
from tether.protocol.tool_calls import ToolCall
from tether.providers.anthropic import build_body
from tether.testing.fake_provider import FakeProvider


def tool_step(n: int, calls: int = 1) -> tuple[Message, ...]:
    """One model step of a tool loop: an assistant turn with `calls` calls and their results."""
    ids = [f"t{n}-{k}" for k in range(calls)]
    assistant = AssistantMessage(
        f"a{n}",
        (
            ThinkingPart(f"step {n}", signature=f"sig-{n}"),
            TextPart(f"looking ({n})"),
            *(ToolCall(i, "Bash", {"command": f"ls {i}"}) for i in ids),
        ),
        0,
    )
    results = tuple(
        ToolResultMessage(f"r-{i}", i, "Bash", (TextPart(f"output of {i}"),), False, 0) for i in ids
    )
    return (assistant, *results)


def session(steps: int, calls: int = 1) -> list[tuple[Message, ...]]:
    """The history each of `steps` requests of one turn carries."""
    history: tuple[Message, ...] = (user("fix the bug"),)
    out = [history]
    for n in range(1, steps):
        history = history + tool_step(n, calls)
        out.append(history)
    return out


def marks(body: dict[str, Any]) -> list[str]:
    """Where the cache breakpoints are: `system`, `tools`, or `messages.I.J`."""
    found = [f"system.{j}" for j, b in enumerate(body.get("system") or []) if "cache_control" in b]
    found += [f"tools.{j}" for j, t in enumerate(body.get("tools") or []) if "cache_control" in t]
    for i, message in enumerate(body["messages"]):
        for j, block in enumerate(message["content"]):
            if "cache_control" in block:
                found.append(f"messages.{i}.{j}")
    return found


def without_marks(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: without_marks(v) for k, v in value.items() if k != "cache_control"}
    if isinstance(value, list):
        return [without_marks(v) for v in value]
    return value


def prefix_through(body: dict[str, Any], message: int, block: int) -> str:
    """The cached prefix up to and including one block, in the API's order, marks removed."""
    messages = body["messages"][:message] + [
        {**body["messages"][message], "content": body["messages"][message]["content"][: block + 1]}
    ]
    return json.dumps(without_marks([body.get("tools"), body.get("system"), messages]))


@pytest.mark.parametrize("calls", [1, 12])  # 12 parallel calls: more than the 20-block lookback
def test_anthropic_breakpoints_roll_with_the_conversation(calls: int) -> None:
    histories = session(6, calls)
    with FakeProvider([{"text": "ok"}] * len(histories)) as fake:
        provider = make_provider("anthropic", fake)
        for history in histories:
            collect(provider, request(*history))
        bodies = [r["body"] for r in fake.requests]
    assert fake.violations == []
    for n, body in enumerate(bodies):
        found = marks(body)
        assert len(found) <= 4, found
        assert found[0] == "system.0"  # tools + system: the stable prefix
        last = len(body["messages"]) - 1
        assert f"messages.{last}.{len(body['messages'][last]['content']) - 1}" in found
        if n:
            # The previous request's last breakpoint is marked again, and the prefix through it
            # is byte for byte what that request sent: the cache entry it wrote is read back.
            prev = bodies[n - 1]
            prev_last = len(prev["messages"]) - 1
            prev_block = len(prev["messages"][prev_last]["content"]) - 1
            assert f"messages.{prev_last}.{prev_block}" in found
            assert prefix_through(body, prev_last, prev_block) == prefix_through(
                prev, prev_last, prev_block
            )


def test_without_a_system_prompt_the_last_tool_ends_the_stable_prefix() -> None:
    body = build_body(ProviderRequest("m", "", (user("hi"),), tools=request().tools))
    assert marks(body) == ["tools.0", "messages.0.0"]


def test_thinking_blocks_never_carry_a_breakpoint() -> None:
    history = (user("go"), *tool_step(1))
    body = build_body(ProviderRequest("m", "sys", history))
    for message in body["messages"]:
        for block in message["content"]:
            assert not (block["type"] == "thinking" and "cache_control" in block)
    assert marks(body) == ["system.0", "messages.0.0", "messages.2.0"]


def test_requests_are_not_mutated_by_marking() -> None:
    """Marks go on the body's own dicts: one request's breakpoints never leak into the next."""
    req = request(*session(3)[-1])
    first, second = build_body(req), build_body(req)
    assert first == second and marks(first) == marks(second)


def test_openai_chat_sends_a_stable_prompt_cache_key_and_compatible_servers_do_not() -> None:
    with FakeProvider([{"text": "ok"}] * 3) as fake:
        collect(make_provider("openai-chat", fake), request(user("a"), session_id="conv-7"))
        collect(make_provider("openai-chat", fake), request(user("b"), session_id="conv-7"))
        collect(make_provider("openai-compatible", fake), request(user("c"), session_id="conv-7"))
        keys = [r["body"].get("prompt_cache_key") for r in fake.requests]
    assert keys == ["conv-7", "conv-7", None]


def test_openai_responses_sends_the_conversation_as_prompt_cache_key() -> None:
    with FakeProvider([{"text": "ok"}] * 2) as fake:
        for text in ("a", "b"):
            collect(make_provider("openai", fake), request(user(text), session_id="conv-9"))
        assert [r["body"]["prompt_cache_key"] for r in fake.requests] == ["conv-9", "conv-9"]


@pytest.mark.parametrize("dialect", ["anthropic", "openai", "openai-chat"])
def test_usage_reports_cached_and_cache_write_tokens(dialect: str) -> None:
    usage = {"input": 30, "output": 5, "cached": 1200, "cache_write": 80}
    with FakeProvider([{"text": "ok", "usage": usage}]) as fake:
        chunks = collect(make_provider(dialect, fake), request())
    (stats,) = [c for c in chunks if isinstance(c, UsageStatistics)]
    assert (stats.usage.input_tokens, stats.usage.cache_read_tokens, stats.usage.cache_write_tokens) == (
        30,
        1200,
        80,
    )


def test_deepseek_cache_hits_count_as_cached() -> None:
    from tether.providers.openai_chat import _usage

    stats = _usage(
        {
            "prompt_tokens": 1000,
            "completion_tokens": 7,
            "prompt_cache_hit_tokens": 900,
            "prompt_cache_miss_tokens": 100,
        }
    )
    assert (stats.usage.input_tokens, stats.usage.cache_read_tokens) == (100, 900)


def test_a_headless_tool_turn_reports_cache_usage_per_step(tmp_path: Path) -> None:
    """The real console script: each step's usage carries what the provider said it cached."""
    workdir = tmp_path / "project"
    workdir.mkdir()
    (workdir / "a.txt").write_text("alpha\n")
    model = "anthropic/claude-test"
    read = {"name": "Read", "arguments": {"file_path": "a.txt"}}
    script = [
        {"tool_calls": [read], "usage": {"input": 2000, "output": 9, "cache_write": 1900}},
        {"tool_calls": [read], "usage": {"input": 60, "output": 9, "cached": 1900}},
        {"text": "done", "usage": {"input": 70, "output": 2, "cached": 1960}},
    ]
    with FakeProvider(script) as fake:
        run = run_tether(
            ["-p", "read", "--model", model, "--output-format", "stream-json"],
            env=tether_env(fake.url, model),
            cwd=workdir,
        )
        bodies = [r["body"] for r in fake.requests]
    assert run.code == 0, run.stderr
    steps = run.of_type("message", "usage_statistics")
    assert [(s["cached_input_tokens"], s["cache_write_tokens"]) for s in steps] == [
        (0, 1900),
        (1900, 0),
        (1960, 0),
    ]
    result = run.of_type("result")[0]["usage"]
    assert (result["cached_input_tokens"], result["cache_write_tokens"]) == (3860, 1900)
    # The real system prompt and tools: one breakpoint on the prefix, one rolling.
    for body in bodies:
        assert marks(body)[0] == "system.0" and 2 <= len(marks(body)) <= 4


def test_a_memory_update_follows_the_last_breakpoint() -> None:
    """A memory change sent mid-conversation goes after every breakpoint, so the cached
    prefix (and the previous step's entry) stays valid."""
    history = session(3)[-1]
    plain = build_body(ProviderRequest("m", "sys", history))
    updated = build_body(ProviderRequest("m", "sys", history, memory_update="<memory_update/>"))
    assert marks(updated) == marks(plain)
    last = updated["messages"][-1]["content"]
    assert last[-1] == {"type": "text", "text": "<memory_update/>"}
    assert "cache_control" in last[-2]
    assert without_marks(updated["messages"][:-1]) == without_marks(plain["messages"][:-1])
