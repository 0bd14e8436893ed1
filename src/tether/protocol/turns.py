"""What one backend send carries in, and the harness-level events a turn emits besides chunks."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tether.protocol.chunks import Chunk, ErrorChunk, iso_now
from tether.protocol.messages import Usage, UserMessage
from tether.protocol.tool_calls import ToolCall, ToolReturn


@dataclass(frozen=True, slots=True)
class ConversationRef:
    agent_id: str
    conversation_id: str  # "default" = the agent's primary history




@dataclass(frozen=True, slots=True)
class TurnInput:
    """Input of one send: answers to the previous step's tool calls, then maybe a user message."""

    approvals: tuple[ToolReturn, ...] = ()
    user: UserMessage | None = None


# --- harness events (emitted by the turn engine, rendered by frontends) ----------------------


@dataclass(frozen=True, slots=True)
class LocalToolCall:
    """A tool call about to run (or be answered) locally; emitted before execution."""

    call: ToolCall
    date: str = field(default_factory=iso_now)

    @property
    def tool_call_id(self) -> str:
        return self.call.id

    @property
    def name(self) -> str:
        return self.call.name

    @property
    def arguments(self) -> str:
        """The argument text as the model wrote it (what every wire shows)."""
        return self.call.text or "{}"


@dataclass(frozen=True, slots=True)
class LocalToolReturn:
    result: ToolReturn
    date: str = field(default_factory=iso_now)


@dataclass(frozen=True, slots=True)
class TurnError:
    """A turn-ending error as the reference's `error` event describes it; `provider_error` is
    the model's own error when the provider failed (each wire renders it as `api_error`)."""

    message: str
    stop_reason: str
    run_id: str | None = None
    provider_error: ErrorChunk | None = None


@dataclass(frozen=True, slots=True)
class SubagentProgress:
    """One line of a running subagent's own stream, for the parent's stream-json reader."""

    event: Mapping[str, Any]  # the child's line without its envelope and its `type`
    subagent_id: str
    subagent_type: str
    subagent_agent_id: str | None
    parent_tool_call_id: str | None = None  # the Agent call that started it


TurnEvent = Chunk | LocalToolCall | LocalToolReturn | TurnError
"""Everything a turn emits: what every frontend and both wire serialisers consume."""


@dataclass(slots=True)
class TurnOutcome:
    """How a turn ended: its stop reason, steps, usage, runs, last outputs and error."""

    stop_reason: str = "end_turn"
    steps: int = 0
    usage: Usage = field(default_factory=Usage)
    run_ids: list[str] = field(default_factory=list)
    last_text: str = ""
    last_reasoning: str = ""
    last_tool_result: str = ""
    error: TurnError | None = None
    vetoed: bool = False  # a mod's turn_start cancelled it: a refusal (exit 1), not an interrupt

    @property
    def interrupted(self) -> bool:
        return self.stop_reason == "cancelled" and not self.vetoed

    @property
    def result_text(self) -> str:
        return self.last_text or self.last_reasoning or self.last_tool_result
