"""The stream-json wire: every line tether writes in `--output-format stream-json` (one-shot and
bidirectional) and the `--output-format json` result, field for field as the reference.

Pure builders: typed turn events and runtime values in, dicts out; `stream_json.py` decides which
events become which lines, and writers (cli/) add nothing but the line end.
"""

from __future__ import annotations

import uuid as _uuid
from collections.abc import Mapping, Sequence
from typing import Any

from tether.protocol.chunks import Chunk, ErrorChunk, RetryNotice, iso_now
from tether.protocol.messages import Usage, usage_wire
from tether.protocol.tool_calls import ToolReturn
from tether.protocol.turns import (
    LocalToolCall,
    LocalToolReturn,
    SubagentProgress,
    TurnError,
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


def tool_return_text(result: ToolReturn) -> str:
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
    return usage_wire(usage, steps)


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
    """A question to the client: a `can_use_tool` or `execute_external_tool` request below."""
    return env.wrap({"type": "control_request", "request_id": request_id, "request": request})


def can_use_tool(
    *,
    tool_name: str,
    tool_call_id: str,
    args: Mapping[str, Any],
    decision_reason: str | None = None,
    diffs: Sequence[Mapping[str, Any]] | None = None,
) -> dict[str, Any]:
    """The `can_use_tool` request (reference §3.4), as stream-json and the App Server send it:
    the call, why it asks (when a decision asked), a diff preview for edits."""
    request: dict[str, Any] = {
        "subtype": "can_use_tool",
        "tool_name": tool_name,
        "input": args,
        "tool_call_id": tool_call_id,
        "permission_suggestions": [],
        "blocked_path": None,
    }
    if decision_reason is not None:
        request["decision_reason"] = decision_reason
    if diffs is not None:
        request["diffs"] = diffs
    return request


def execute_external_tool(tool_call_id: str, tool_name: str, args: Mapping[str, Any]) -> dict[str, Any]:
    """The request that has the client run a tool it registered (`register_external_tools`)."""
    return {
        "subtype": "execute_external_tool",
        "tool_call_id": tool_call_id,
        "tool_name": tool_name,
        "input": dict(args),
    }


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
