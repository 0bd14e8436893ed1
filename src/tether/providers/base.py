"""The Provider contract: one wire API, one streaming call, Letta-style chunks out."""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from typing import Protocol

from tether.protocol.chunks import Chunk
from tether.protocol.llm import ProviderRequest


@dataclass(frozen=True, slots=True)
class Endpoint:
    """Where and how to reach a provider (resolved from env, `tether connect`, or a preset)."""

    provider: str  # handle prefix: anthropic | openai | openai-chat | openai-compatible | ...
    base_url: str
    api_key: str | None
    timeout_s: float | None = 300.0  # None: no timeout


class Provider(Protocol):
    """Streams one model call.

    `stream()` yields `AssistantText`, `Reasoning`, `ToolCallRequest` (complete calls only),
    `RetryNotice` (only before any model output), then exactly one `UsageStatistics` and one
    `StopReason` (`end_turn`, `requires_approval` when any tool was called, or
    `max_tokens_exceeded`). Failures raise `tether.errors.ProviderError`; a stream that ends
    without its final event raises `StreamCut`, never a silent success.
    """

    api: str  # "anthropic-messages" | "openai-responses" | "openai-completions"
    endpoint: Endpoint

    def stream(self, request: ProviderRequest) -> AsyncIterator[Chunk]: ...
