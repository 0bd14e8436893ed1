"""Stream chunks: the Letta-style vocabulary providers produce and every frontend renders.

Each chunk knows its wire form (`to_wire()`), which is field for field the reference's Letta
message chunk (`message_type` plus its fields). Provider adapters emit these; the backend stamps
run ids; headless, stream-json and the App Server render them unchanged.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, Literal

from tether.protocol.messages import Usage, usage_wire
from tether.protocol.tool_calls import ToolCall


def iso_now() -> str:
    """ISO-8601 UTC with milliseconds, the reference's `date` / `timestamp` form."""
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def now_ms() -> int:
    return int(time.time() * 1000)


@dataclass(frozen=True, slots=True)
class AssistantText:
    """A piece of assistant text; consecutive pieces of one text run share `otid`."""

    otid: str
    content: str
    run_id: str | None = None
    date: str = field(default_factory=iso_now)
    message_type: Literal["assistant_message"] = "assistant_message"

    def to_wire(self) -> dict[str, Any]:
        return _wire(self, id=self.otid, otid=self.otid, content=self.content)


@dataclass(frozen=True, slots=True)
class Reasoning:
    otid: str
    reasoning: str
    signature: str | None = None
    run_id: str | None = None
    date: str = field(default_factory=iso_now)
    message_type: Literal["reasoning_message"] = "reasoning_message"

    def to_wire(self) -> dict[str, Any]:
        extra: dict[str, Any] = {"signature": self.signature} if self.signature else {}
        return _wire(
            self,
            id=self.otid,
            otid=self.otid,
            reasoning=self.reasoning,
            source="reasoner_model",
            **extra,
        )


@dataclass(frozen=True, slots=True)
class ToolCallRequest:
    """A complete tool call the model proposed: the harness must approve and run it.

    The wire carries the call's argument text exactly as the model produced it (it may be
    invalid JSON; the call itself says so, and the model is told rather than guessed for).
    """

    call: ToolCall
    run_id: str | None = None
    date: str = field(default_factory=iso_now)
    message_type: Literal["approval_request_message"] = "approval_request_message"

    @property
    def tool_call_id(self) -> str:
        return self.call.id

    @property
    def name(self) -> str:
        return self.call.name

    @property
    def arguments(self) -> str:
        return self.call.text

    def to_wire(self) -> dict[str, Any]:
        c = self.call
        wire_call = {"name": c.name, "arguments": c.text, "tool_call_id": c.id}
        return _wire(self, id=f"approval-{c.id}", tool_call=wire_call, tool_calls=[wire_call])


@dataclass(frozen=True, slots=True)
class UsageStatistics:
    """One provider call's token usage, in the one `Usage` vocabulary; the wire names are the
    reference's (`prompt_tokens`, `completion_tokens`, ...), written by `usage_wire` only."""

    usage: Usage = field(default_factory=Usage)
    step_count: int = 1
    run_id: str | None = None
    message_type: Literal["usage_statistics"] = "usage_statistics"

    def to_wire(self) -> dict[str, Any]:
        return _wire(self, **usage_wire(self.usage, self.step_count))


StopReasonName = Literal[
    "end_turn",
    "requires_approval",
    "max_tokens_exceeded",
    "max_steps",
    "cancelled",
    "error",
    "llm_api_error",
    "no_tool_call",
]


@dataclass(frozen=True, slots=True)
class StopReason:
    stop_reason: StopReasonName
    run_id: str | None = None
    message_type: Literal["stop_reason"] = "stop_reason"

    def to_wire(self) -> dict[str, Any]:
        return _wire(self, stop_reason=self.stop_reason)


@dataclass(frozen=True, slots=True)
class ErrorChunk:
    message: str
    error_type: str = "llm_error"
    detail: str = ""
    retryable: bool = False
    run_id: str | None = None
    message_type: Literal["error_message"] = "error_message"

    def to_wire(self) -> dict[str, Any]:
        return _wire(self, message=self.message, error_type=self.error_type, detail=self.detail)


@dataclass(frozen=True, slots=True)
class RetryNotice:
    """The provider adapter is about to retry (only ever before any model output)."""

    attempt: int
    max_attempts: int
    delay_ms: int
    message: str
    run_id: str | None = None
    message_type: Literal["event_message"] = "event_message"

    def to_wire(self) -> dict[str, Any]:
        data = {
            "attempt": self.attempt,
            "max_attempts": self.max_attempts,
            "delay_ms": self.delay_ms,
            "message": self.message,
        }
        return _wire(self, event_type="retry", event_data=data)


@dataclass(frozen=True, slots=True)
class CompactionNotice:
    """The conversation was compacted before this call (`event_message{event_type:compaction}`)."""

    trigger: str
    stats: dict[str, Any]
    run_id: str | None = None
    message_type: Literal["event_message"] = "event_message"

    def to_wire(self) -> dict[str, Any]:
        return _wire(self, event_type="compaction", event_data={"trigger": self.trigger, **self.stats})


@dataclass(frozen=True, slots=True)
class SummaryMessage:
    """The summary that now stands in for the evicted history (`summary_message`)."""

    summary: str
    id: str
    run_id: str | None = None
    message_type: Literal["summary_message"] = "summary_message"

    def to_wire(self) -> dict[str, Any]:
        return _wire(self, id=self.id, summary=self.summary)


Chunk = (
    AssistantText
    | Reasoning
    | ToolCallRequest
    | UsageStatistics
    | StopReason
    | ErrorChunk
    | RetryNotice
    | CompactionNotice
    | SummaryMessage
)


def _wire(chunk: Any, **fields: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"message_type": chunk.message_type}
    date = getattr(chunk, "date", None)
    if date is not None:
        out["date"] = date
    out.update(fields)
    if chunk.run_id is not None:
        out["run_id"] = chunk.run_id
    return out
