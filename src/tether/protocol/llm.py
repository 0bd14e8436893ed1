"""What the runtime asks a model provider for: one request, independent of the wire dialect."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tether.protocol.messages import Message


@dataclass(frozen=True, slots=True)
class ToolSpec:
    """A tool as the model sees it: name, description and JSON-schema parameters."""

    name: str
    description: str
    parameters: dict[str, Any]


@dataclass(frozen=True, slots=True)
class ProviderRequest:
    model: str  # the provider's own model id (no `prefix/`)
    system: str
    messages: tuple[Message, ...]
    tools: tuple[ToolSpec, ...] = ()
    max_tokens: int = 8192
    reasoning_effort: str | None = None  # "low" | "medium" | "high" where the provider has it
    session_id: str | None = None  # conversation id, for provider-side prompt caching
    # Memory that changed after `system` was compiled, for providers that take a system message
    # mid-conversation (sent last); others get a recompiled `system` instead.
    memory_update: str | None = None
    extra: dict[str, Any] = field(default_factory=dict)
