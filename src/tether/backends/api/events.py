"""Letta's streamed message events mapped onto tether's chunks (one mapper per run stream).

`assistant_message` / `reasoning_message` deltas become text and reasoning chunks;
`approval_request_message` deltas (name first, then argument fragments, keyed by
`tool_call_id`) are assembled and become complete `ToolCallRequest`s when the step stops;
`usage_statistics`, `stop_reason` and `error_message` map one to one; pings, echoes of the
input and approval responses are dropped. Server-side tool calls and returns (memory edits,
conversation search) are passed on as `ServerToolCall` / `ServerToolReturn`: shown as what they
are, marked as run by the server, outside tether's permission engine and sandbox.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, cast

from tether.protocol.chunks import (
    AssistantText,
    Chunk,
    ErrorChunk,
    Reasoning,
    StopReason,
    StopReasonName,
    ToolCallRequest,
    UsageStatistics,
    iso_now,
)
from tether.protocol.messages import Usage
from tether.protocol.tool_calls import ToolCall

OUTSIDE_ENFORCEMENT = "server tool: run by the Letta server, outside tether's permissions and sandbox"
_STOPS: frozenset[str] = frozenset(
    {"end_turn", "requires_approval", "max_tokens_exceeded", "max_steps", "cancelled", "error",
     "llm_api_error", "no_tool_call"}
)
_DROPPED = frozenset(
    {"ping", "user_message", "system_message", "approval_response_message", "hidden_reasoning_message",
     "event_message", "summary_message", "loop_error"}
)


@dataclass(frozen=True, slots=True)
class ServerToolCall:
    """A tool the Letta server runs itself (`tool_call_message`); tether only shows it."""

    call: ToolCall
    run_id: str | None = None
    date: str = field(default_factory=iso_now)
    message_type: Literal["tool_call_message"] = "tool_call_message"

    @property
    def tool_call_id(self) -> str:
        return self.call.id

    @property
    def name(self) -> str:
        return self.call.name

    def to_wire(self) -> dict[str, Any]:
        call = {"name": self.call.name, "arguments": self.call.text, "tool_call_id": self.call.id}
        out: dict[str, Any] = {"message_type": self.message_type, "date": self.date,
                               "id": f"server-call-{self.tool_call_id}", "tool_call": call,
                               "tool_calls": [call], "server_side": True,
                               "note": OUTSIDE_ENFORCEMENT}
        if self.run_id is not None:
            out["run_id"] = self.run_id
        return out


@dataclass(frozen=True, slots=True)
class ServerToolReturn:
    """What a server-side tool returned (`tool_return_message`)."""

    tool_call_id: str
    name: str
    tool_return: str
    status: str
    run_id: str | None = None
    date: str = field(default_factory=iso_now)
    message_type: Literal["tool_return_message"] = "tool_return_message"

    def to_wire(self) -> dict[str, Any]:
        out: dict[str, Any] = {"message_type": self.message_type, "date": self.date,
                               "id": f"server-return-{self.tool_call_id}",
                               "tool_call_id": self.tool_call_id, "name": self.name,
                               "tool_return": self.tool_return, "status": self.status,
                               "server_side": True, "note": OUTSIDE_ENFORCEMENT}
        if self.run_id is not None:
            out["run_id"] = self.run_id
        return out


class _Call:
    __slots__ = ("name", "arguments")

    def __init__(self) -> None:
        self.name = ""
        self.arguments = ""


class EventMapper:
    """Feed each event's JSON with `feed()`; it returns the chunks it completes.

    `seq_id` of every event is remembered (`last_seq`) so a cut stream can re-attach after it;
    an event at or below it (a replay) is ignored. `client_answers` are the tool call ids tether
    answered itself: their echoed returns are not shown twice."""

    def __init__(self, client_answers: frozenset[str] = frozenset()) -> None:
        self.last_seq = 0
        self.run_id: str | None = None
        self.stop: StopReason | None = None
        self.output = False  # any model output (text, reasoning, tool call) seen
        self.error: ErrorChunk | None = None
        self._client_answers = client_answers
        self._calls: dict[str, _Call] = {}
        self._last_call: str | None = None
        self._server_calls: dict[str, _Call] = {}
        self._server_names: dict[str, str] = {}

    def feed(self, data: dict[str, Any], *, error_frame: bool = False) -> list[Chunk]:
        seq = data.get("seq_id")
        if isinstance(seq, int) and not isinstance(seq, bool):
            if seq <= self.last_seq:
                return []  # replayed by a re-attach
            self.last_seq = seq
        run_id = data.get("run_id") if isinstance(data.get("run_id"), str) else None
        if run_id:
            self.run_id = run_id
        kind = data.get("message_type")
        if error_frame or kind == "error_message" or kind == "error":
            return self._error(data)
        if kind in _DROPPED or kind is None:
            return []
        if kind == "assistant_message":
            text = _text(data.get("content"))
            if not text:
                return []
            self.output = True
            return [AssistantText(_otid(data), text, self.run_id)]
        if kind == "reasoning_message":
            text = str(data["reasoning"]) if isinstance(data.get("reasoning"), str) else ""
            sig = data.get("signature") if isinstance(data.get("signature"), str) else None
            if not text and not sig:
                return []
            self.output = True
            return [Reasoning(_otid(data), text, sig, self.run_id)]
        if kind == "approval_request_message":
            self.output = True
            for call in _calls(data):
                self._delta(self._calls, call, client=True)
            return []
        if kind == "tool_call_message":
            self.output = True
            for call in _calls(data):
                self._delta(self._server_calls, call, client=False)
            return []
        if kind == "tool_return_message":
            return self._tool_return(data)
        if kind == "usage_statistics":
            return [self._usage(data)]
        if kind == "stop_reason":
            return self._stop(data)
        return []  # a kind this version does not know: not shown rather than guessed

    def _delta(self, calls: dict[str, _Call], raw: dict[str, Any], *, client: bool) -> None:
        call_id = raw.get("tool_call_id") or raw.get("id")
        if not isinstance(call_id, str) or not call_id:
            call_id = self._last_call or "call-unnamed"
        self._last_call = call_id
        call = calls.setdefault(call_id, _Call())
        if isinstance(raw.get("name"), str) and raw["name"]:
            call.name = raw["name"]
        if isinstance(raw.get("arguments"), str):
            call.arguments += raw["arguments"]

    def _flush_server_calls(self) -> list[Chunk]:
        out: list[Chunk] = []
        for call_id, call in self._server_calls.items():
            self._server_names[call_id] = call.name
            out.append(cast(Chunk, ServerToolCall(ToolCall.parse(call_id, call.name, call.arguments or "{}"), self.run_id)))
        self._server_calls.clear()
        return out

    def _tool_return(self, data: dict[str, Any]) -> list[Chunk]:
        call_id = data.get("tool_call_id")
        if not isinstance(call_id, str):
            returns = data.get("tool_returns")
            first = returns[0] if isinstance(returns, list) and returns else {}
            call_id = first.get("tool_call_id") if isinstance(first, dict) else None
        if not isinstance(call_id, str) or call_id in self._client_answers:
            return []  # the echo of an answer tether sent: already shown when it ran
        out = self._flush_server_calls()
        status = str(data["status"]) if isinstance(data.get("status"), str) else "success"
        value = data.get("tool_return")
        text = value if isinstance(value, str) else _text(value)
        name = self._server_names.get(call_id) or str(data.get("name") or "")
        out.append(cast(Chunk, ServerToolReturn(call_id, name, text, status, self.run_id)))
        return out

    def _usage(self, data: dict[str, Any]) -> UsageStatistics:
        def n(key: str) -> int:
            v = data.get(key)
            return v if isinstance(v, int) and not isinstance(v, bool) else 0

        usage = Usage(
            input_tokens=n("prompt_tokens"), output_tokens=n("completion_tokens"),
            cache_read_tokens=n("cached_input_tokens"), cache_write_tokens=n("cache_write_tokens"),
            reasoning_tokens=n("reasoning_tokens"),
        )
        return UsageStatistics(usage, step_count=n("step_count") or 1, run_id=self.run_id)

    def _stop(self, data: dict[str, Any]) -> list[Chunk]:
        out = self._flush_server_calls()
        reason = data.get("stop_reason")
        if reason == "requires_approval":
            for call_id, call in self._calls.items():
                text = call.arguments or "{}"
                out.append(ToolCallRequest(ToolCall.parse(call_id, call.name, text), self.run_id))
            self._calls.clear()
        name: StopReasonName
        if isinstance(reason, str) and reason in _STOPS:
            name = cast(StopReasonName, reason)
        else:  # e.g. tool_rule, invalid_tool_call: the run ended, not the way a turn may end
            name = "error"
            if self.error is None:
                self.error = ErrorChunk(f"the Letta server ended the run with stop reason {reason!r}",
                                        "letta_stop_reason", "", False, self.run_id)
                out.append(self.error)
        self.stop = StopReason(name, self.run_id)
        out.append(self.stop)
        return out

    def _error(self, data: dict[str, Any]) -> list[Chunk]:
        message = data.get("message") or data.get("detail") or "the Letta server reported an error"
        detail = data.get("detail")
        self.error = ErrorChunk(
            str(message), str(data.get("error_type") or "internal_error"),
            detail if isinstance(detail, str) else "", False, self.run_id,
        )
        return [self.error]

    def finish(self) -> list[Chunk]:
        """The stream ended ([DONE]): server calls never answered in it are still shown."""
        return self._flush_server_calls()


def _calls(data: dict[str, Any]) -> list[dict[str, Any]]:
    many = data.get("tool_calls")
    if isinstance(many, list) and many:
        return [c for c in many if isinstance(c, dict)]
    one = data.get("tool_call")
    return [one] if isinstance(one, dict) else []


def _otid(data: dict[str, Any]) -> str:
    for key in ("otid", "id"):
        if isinstance(data.get(key), str) and data[key]:
            return str(data[key])
    return "letta-message"


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "".join(p.get("text", "") for p in content if isinstance(p, dict)
                       and isinstance(p.get("text"), str))
    return ""
