"""Headless wire envelopes: stream-json events and the json result, field for field as the reference.

Pure builders from runtime values to dicts; writers (cli/output.py) add nothing but the line end.
"""

from __future__ import annotations

import uuid as _uuid
from collections.abc import Mapping, Sequence
from typing import Any

from tether.protocol.chunks import Chunk, RetryNotice, iso_now
from tether.protocol.messages import Usage
from tether.protocol.turns import ApprovalResult, LocalToolCall, LocalToolReturn, TurnError


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


def error_event(env: Envelope, err: TurnError) -> dict[str, Any]:
    event: dict[str, Any] = {
        "type": "error",
        "message": err.message,
        "stop_reason": err.stop_reason,
    }
    if err.run_id:
        event["run_id"] = err.run_id
    if err.api_error:
        event["api_error"] = err.api_error
    return env.wrap(event)


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
