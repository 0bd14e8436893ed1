"""The stream-json wire: every line tether writes in `--output-format stream-json` (one-shot and
bidirectional) and the `--output-format json` result, field for field as the reference.

Pure: typed turn events and runtime values in, dicts out (`StreamJsonEncoder` keeps the one
piece of state, the text/reasoning run being merged); writers (cli/) add nothing but the line end.
"""

from __future__ import annotations

import uuid as _uuid
from collections.abc import Mapping, Sequence
from typing import Any

from tether.protocol.chunks import AssistantText, Chunk, ErrorChunk, Reasoning, RetryNotice, iso_now
from tether.protocol.messages import Usage
from tether.protocol.turns import (
    ApprovalResult,
    LocalToolCall,
    LocalToolReturn,
    SubagentProgress,
    TurnError,
    TurnEvent,
    TurnOutcome,
)


class Envelope:
    """The per-session fields every stream-json line carries."""

    def __init__(self, agent_id: str | None, conversation_id: str | None) -> None:
        self.agent_id = agent_id
        self.conversation_id = conversation_id

    @property
    def session_id(self) -> str:
        return self.agent_id or "startup"

    def wrap(self, event: dict[str, Any], uuid: str | None = None) -> dict[str, Any]:
        event.setdefault("session_id", self.session_id)
        event.setdefault("uuid", uuid or str(_uuid.uuid4()))
        if self.agent_id is not None:
            event.setdefault("agent_id", self.agent_id)
        if self.conversation_id is not None:
            event.setdefault("conversation_id", self.conversation_id)
        event.setdefault("timestamp", iso_now())
        return event


def system_init(
    env: Envelope,
    *,
    model: str,
    tools: Sequence[str],
    cwd: str,
    permission_mode: str,
    memfs_enabled: bool = False,
    skill_sources: Sequence[str] = (),
    reflection_trigger: str = "off",
    reflection_step_count: int = 25,
    mcp_servers: Sequence[Mapping[str, Any]] = (),  # {"name", "status", "error"?, "tools"?}
) -> dict[str, Any]:
    return env.wrap(
        {
            "type": "system",
            "subtype": "init",
            "agent_id": env.agent_id,
            "conversation_id": env.conversation_id,
            "model": model,
            "tools": list(tools),
            "cwd": cwd,
            "mcp_servers": [dict(m) for m in mcp_servers],
            "permission_mode": permission_mode,
            "slash_commands": [],
            "memfs_enabled": memfs_enabled,
            "skill_sources": list(skill_sources),
            "system_info_reminder_enabled": True,
            "reflection_trigger": reflection_trigger,
            "reflection_step_count": reflection_step_count,
        },
        uuid=f"init-{env.agent_id}",
    )


def chunk_event(env: Envelope, chunk: Chunk, *, partial: bool) -> dict[str, Any]:
    """A model chunk as a `message` line (or a `stream_event` with --include-partial-messages)."""
    wire = chunk.to_wire()
    uid = wire.get("otid") or wire.get("id") or str(_uuid.uuid4())
    if partial:
        return env.wrap({"type": "stream_event", "event": wire}, uuid=uid)
    return env.wrap({"type": "message", **wire}, uuid=uid)


def retry_event(env: Envelope, notice: RetryNotice) -> dict[str, Any]:
    event: dict[str, Any] = {
        "type": "retry",
        "reason": "llm_api_error",
        "attempt": notice.attempt,
        "max_attempts": notice.max_attempts,
        "delay_ms": notice.delay_ms,
        "message": notice.message,
    }
    if notice.run_id:
        event["run_id"] = notice.run_id
    return env.wrap(event)


def tool_call_event(env: Envelope, call: LocalToolCall) -> dict[str, Any]:
    ident = f"tool-call-{call.tool_call_id}"
    return env.wrap(
        {
            "type": "message",
            "message_type": "tool_call_message",
            "id": ident,
            "date": call.date,
            "tool_call": {
                "name": call.name,
                "tool_call_id": call.tool_call_id,
                "arguments": call.arguments or "{}",
            },
        },
        uuid=ident,
    )


def tool_return_text(result: ApprovalResult) -> str:
    if result.denied:
        return f"Error: request to call tool denied. User reason: {result.output}"
    return result.output


def tool_return_event(env: Envelope, ret: LocalToolReturn) -> dict[str, Any]:
    r = ret.result
    ident = f"tool-return-{r.tool_call_id}"
    event: dict[str, Any] = {
        "type": "message",
        "message_type": "tool_return_message",
        "id": ident,
        "date": ret.date,
        "status": r.status,
        "tool_call_id": r.tool_call_id,
        "tool_return": tool_return_text(r),
    }
    if r.stdout is not None:
        event["stdout"] = list(r.stdout)
    if r.stderr is not None:
        event["stderr"] = list(r.stderr)
    return env.wrap(event, uuid=ident)


def api_error(chunk: ErrorChunk) -> dict[str, Any]:
    """The provider's own error as both wires carry it (`api_error` of `error` / `loop_error`)."""
    return {
        "message_type": "error_message",
        "message": chunk.message,
        "error_type": chunk.error_type,
        "detail": chunk.detail,
        "run_id": chunk.run_id,
    }


def error_event(env: Envelope, err: TurnError) -> dict[str, Any]:
    event: dict[str, Any] = {
        "type": "error",
        "message": err.message,
        "stop_reason": err.stop_reason,
    }
    if err.run_id:
        event["run_id"] = err.run_id
    if err.provider_error is not None:
        event["api_error"] = api_error(err.provider_error)
    return env.wrap(event)


def error_line(env: Envelope, message: str) -> dict[str, Any]:
    """An `error` line outside any turn's events (bad input, a failure before the turn)."""
    return error_event(env, TurnError(message, "error"))


def usage_dict(usage: Usage, steps: int) -> dict[str, int]:
    return {
        "prompt_tokens": usage.input_tokens,
        "completion_tokens": usage.output_tokens,
        "total_tokens": usage.total_tokens,
        "step_count": steps,
        "cached_input_tokens": usage.cache_read_tokens,
        "cache_write_tokens": usage.cache_write_tokens,
        "reasoning_tokens": usage.reasoning_tokens,
    }


def result_event(
    env: Envelope,
    *,
    subtype: str,
    duration_ms: int,
    duration_api_ms: int,
    num_turns: int,
    result: str,
    run_ids: Sequence[str],
    usage: dict[str, int] | None,
    stop_reason: str | None = None,
) -> dict[str, Any]:
    event: dict[str, Any] = {
        "type": "result",
        "subtype": subtype,
        "agent_id": env.agent_id,
        "conversation_id": env.conversation_id,
        "duration_ms": duration_ms,
        "duration_api_ms": duration_api_ms,
        "num_turns": num_turns,
        "result": result,
        "run_ids": list(run_ids),
        "usage": usage,
        "total_cost_usd": 0,
    }
    if stop_reason is not None:
        event["stop_reason"] = stop_reason
    return env.wrap(event, uuid=f"result-{run_ids[-1] if run_ids else env.agent_id}")


def json_result(
    env: Envelope,
    *,
    duration_ms: int,
    duration_api_ms: int,
    num_turns: int,
    result: str,
    usage: dict[str, int],
) -> dict[str, Any]:
    """The `--output-format json` document (printed 2-space indented)."""
    return {
        "type": "result",
        "subtype": "success",
        "is_error": False,
        "duration_ms": duration_ms,
        "duration_api_ms": duration_api_ms,
        "num_turns": num_turns,
        "result": result,
        "agent_id": env.agent_id,
        "conversation_id": env.conversation_id,
        "usage": usage,
    }


def failure_results(env: Envelope, message: str, *, duration_ms: int = 0) -> list[dict[str, Any]]:
    """A run that failed before any turn (tether's own state unreadable or unwritable): an
    `error` line and a `result` line with subtype `error`."""
    result = result_event(
        env,
        subtype="error",
        duration_ms=duration_ms,
        duration_api_ms=0,
        num_turns=0,
        result=message,
        run_ids=(),
        usage=None,
        stop_reason="error",
    )
    result["uuid"] = f"result-{env.session_id}"  # no agent yet at start-up: "startup"
    return [error_line(env, message), result]


# --- the bidirectional control protocol (reference §2.6, §3.4) ----------------------------------


def control_response(
    env: Envelope,
    request_id: str,
    payload: dict[str, Any] | None = None,
    *,
    error: str | None = None,
) -> dict[str, Any]:
    """tether's answer to a client's `control_request`: success (with a payload) or an error."""
    if error is not None:
        response: dict[str, Any] = {"subtype": "error", "request_id": request_id, "error": error}
    else:
        response = {"subtype": "success", "request_id": request_id}
        if payload is not None:
            response["response"] = payload
    return env.wrap({"type": "control_response", "response": response})


def control_request(env: Envelope, request_id: str, request: dict[str, Any]) -> dict[str, Any]:
    """A question to the client (`can_use_tool`, `execute_external_tool`, AskUserQuestion)."""
    return env.wrap({"type": "control_request", "request_id": request_id, "request": request})


def subagent_line(progress: SubagentProgress) -> dict[str, Any]:
    """A running subagent's own line relayed on the parent's stream (the reference's
    `stream_delta{delta, subagent_id}`): a `stream_event` with the child's message under
    `event`, so a client reading the parent's `message` lines never mixes them up. The
    frontend writing it adds its envelope (`Envelope.wrap`)."""
    line: dict[str, Any] = {
        "type": "stream_event",
        "event": dict(progress.event),
        "subagent_id": progress.subagent_id,
        "subagent_type": progress.subagent_type,
        "subagent_agent_id": progress.subagent_agent_id,
    }
    if progress.parent_tool_call_id is not None:
        line["parent_tool_call_id"] = progress.parent_tool_call_id
    return line


# --- turn events to lines -----------------------------------------------------------------------


class StreamJsonEncoder:
    """One session's turn events as stream-json lines.

    Which events become lines: model chunks (`message`, or `stream_event` with partial
    messages), retries, tool calls and returns, turn errors; approval requests are dropped (the
    reference does) and provider errors arrive as the turn's `error`. Without partial messages a
    text or reasoning run (one otid) is merged into one line, written when the run ends."""

    def __init__(self, env: Envelope, *, partial: bool) -> None:
        self.env = env
        self.partial = partial
        self._pending: list[AssistantText | Reasoning] = []

    def init(self, **fields: Any) -> dict[str, Any]:
        return system_init(self.env, **fields)

    def encode(self, event: TurnEvent) -> list[dict[str, Any]]:
        """The lines `event` completes (none while a run is still being merged)."""
        if isinstance(event, AssistantText | Reasoning) and not self.partial:
            lines = self.flush() if self._pending and self._pending[0].otid != event.otid else []
            self._pending.append(event)
            return lines
        lines = self.flush()
        line = self._line(event)
        if line is not None:
            lines.append(line)
        return lines

    def _line(self, event: TurnEvent) -> dict[str, Any] | None:
        env = self.env
        if isinstance(event, RetryNotice):
            return retry_event(env, event)
        if isinstance(event, LocalToolCall):
            return tool_call_event(env, event)
        if isinstance(event, LocalToolReturn):
            return tool_return_event(env, event)
        if isinstance(event, TurnError):
            return error_event(env, event)
        if event.message_type in ("approval_request_message", "error_message"):
            return None
        return chunk_event(env, event, partial=self.partial)

    def flush(self) -> list[dict[str, Any]]:
        """The merged text or reasoning run still held, as its line (or nothing)."""
        if not self._pending:
            return []
        first = self._pending[0]
        if isinstance(first, AssistantText):
            text = "".join(c.content for c in self._pending if isinstance(c, AssistantText))
            merged: Chunk = AssistantText(first.otid, text, first.run_id, first.date)
        else:
            text = "".join(c.reasoning for c in self._pending if isinstance(c, Reasoning))
            sig = next(
                (
                    c.signature
                    for c in reversed(self._pending)
                    if isinstance(c, Reasoning) and c.signature
                ),
                None,
            )
            merged = Reasoning(first.otid, text, sig, first.run_id, first.date)
        self._pending.clear()
        return [chunk_event(self.env, merged, partial=False)]

    def run_result(
        self,
        outcome: TurnOutcome,
        *,
        duration_ms: int,
        api_ms: int,
        result_on_error: bool = False,
    ) -> dict[str, Any] | None:
        """A one-shot run's `result` line. An error ends with its `error` line only, as in the
        reference, unless `result_on_error` (tether's own state failed): then a `result` with
        subtype `error` too."""
        if outcome.error is not None:
            if not result_on_error:
                return None
            return result_event(
                self.env,
                subtype="error",
                duration_ms=duration_ms,
                duration_api_ms=api_ms,
                num_turns=outcome.steps,
                result=outcome.error.message,
                run_ids=outcome.run_ids,
                usage=None,
                stop_reason=outcome.error.stop_reason,
            )
        return result_event(
            self.env,
            subtype="success",
            duration_ms=duration_ms,
            duration_api_ms=api_ms,
            num_turns=outcome.steps,
            result=outcome.result_text or NO_RESPONSE,
            run_ids=outcome.run_ids,
            usage=usage_dict(outcome.usage, outcome.steps),
        )

    def turn_result(
        self,
        outcome: TurnOutcome,
        *,
        duration_ms: int,
        api_ms: int,
        result: str | None = None,
    ) -> dict[str, Any]:
        """The `result` line that ends every turn of a bidirectional session: `success`,
        `interrupted` or `error` (no usage and no API time unless it succeeded). `result`
        overrides the turn's own result text (a failure that names itself)."""
        subtype = turn_subtype(outcome)
        success = subtype == "success"
        return result_event(
            self.env,
            subtype=subtype,
            duration_ms=duration_ms,
            duration_api_ms=api_ms if success else 0,
            num_turns=outcome.steps,
            result=outcome.result_text if result is None else result,
            run_ids=outcome.run_ids,
            usage=usage_dict(outcome.usage, outcome.steps) if success else None,
            stop_reason=None if success else outcome.stop_reason,
        )


NO_RESPONSE = "No assistant response found"  # the result of a turn that produced no text


def turn_subtype(outcome: TurnOutcome) -> str:
    """How a bidirectional turn's `result` line names its end: success, interrupted or error."""
    if outcome.interrupted:
        return "interrupted"
    if outcome.error is not None or outcome.stop_reason not in ("end_turn", "requires_approval"):
        return "error"
    return "success"
