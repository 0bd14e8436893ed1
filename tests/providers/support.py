"""Helpers for the provider tests: build requests, run an adapter to completion, pick a dialect."""

from __future__ import annotations

import asyncio
from typing import Any

from tether.protocol.chunks import AssistantText, Chunk, Reasoning, ToolCallRequest
from tether.protocol.llm import ProviderRequest, ToolSpec
from tether.protocol.messages import Message, TextPart, UserMessage
from tether.providers.anthropic import AnthropicProvider
from tether.providers.base import Endpoint, Provider
from tether.providers.openai_chat import OpenAIChatProvider
from tether.providers.openai_responses import OpenAIResponsesProvider
from tether.providers.retry import RetryPolicy
from tether.testing.fake_provider import FakeProvider

FAST_RETRY = RetryPolicy(base_delay_s=0.01)
DIALECTS = ["anthropic", "openai", "openai-chat"]
BASH = ToolSpec(
    "Bash", "Run a shell command", {"type": "object", "properties": {"command": {"type": "string"}}}
)


def make_provider(
    dialect: str,
    fake: FakeProvider,
    *,
    retry: RetryPolicy = FAST_RETRY,
    timeout_s: float | None = 10.0,
) -> Provider:
    if dialect == "anthropic":
        return AnthropicProvider(
            Endpoint("anthropic", fake.url, "sk-ant-test", timeout_s), retry=retry
        )
    if dialect == "openai":
        return OpenAIResponsesProvider(
            Endpoint("openai", f"{fake.url}/v1", "sk-test", timeout_s), retry=retry
        )
    return OpenAIChatProvider(
        Endpoint(dialect, f"{fake.url}/v1", "sk-test", timeout_s), retry=retry
    )


def user(text: str, mid: str = "u1") -> UserMessage:
    return UserMessage(mid, (TextPart(text),), 0)


def request(
    *messages: Message, tools: tuple[ToolSpec, ...] = (BASH,), **kw: Any
) -> ProviderRequest:
    return ProviderRequest(
        model="test-model",
        system="You are terse.",
        messages=messages or (user("hi"),),
        tools=tools,
        **kw,
    )


def collect(provider: Provider, req: ProviderRequest) -> list[Chunk]:
    async def run() -> list[Chunk]:
        return [chunk async for chunk in provider.stream(req)]

    return asyncio.run(run())


def collect_until_error(
    provider: Provider, req: ProviderRequest
) -> tuple[list[Chunk], BaseException]:
    """The chunks that went out before the stream raised, and what it raised."""
    seen: list[Chunk] = []

    async def run() -> None:
        async for chunk in provider.stream(req):
            seen.append(chunk)

    try:
        asyncio.run(run())
    except Exception as exc:  # noqa: BLE001 - the caller asserts on the type
        return seen, exc
    raise AssertionError(f"the stream did not fail; it produced {seen}")


def text_of(chunks: list[Chunk]) -> str:
    return "".join(c.content for c in chunks if isinstance(c, AssistantText))


def reasoning_of(chunks: list[Chunk]) -> str:
    return "".join(c.reasoning for c in chunks if isinstance(c, Reasoning))


def tool_calls(chunks: list[Chunk]) -> list[ToolCallRequest]:
    return [c for c in chunks if isinstance(c, ToolCallRequest)]


def kinds(chunks: list[Chunk]) -> list[str]:
    return [type(c).__name__ for c in chunks]
