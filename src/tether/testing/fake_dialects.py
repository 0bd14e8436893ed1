"""The fake provider's three OpenAI/Anthropic wire dialects: SSE event streams built from one
script turn (Gemini's are in `fake_gemini.py`, Bedrock's frames in `fake_bedrock.py`).

Each builder returns the encoded SSE events of a complete, realistic streamed answer (Anthropic
Messages, OpenAI Responses, Chat Completions), so a fault can cut it after any event. Standard
library only: this module ships in the package and runs in test subprocesses.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

NextId = Callable[[], int]


@dataclass(frozen=True, slots=True)
class PlannedCall:
    name: str
    arguments: str  # the exact JSON text the stream will carry
    id: str | None


@dataclass(frozen=True, slots=True)
class Plan:
    """One script turn, normalised: what the model 'says' in every dialect."""

    text: str
    thinking: str
    tool_calls: tuple[PlannedCall, ...]
    usage_in: int
    usage_out: int
    cached: int
    chunk_size: int
    max_tokens: bool
    cache_write: int = 0  # tokens the answer reports as written to the prompt cache

    @staticmethod
    def from_turn(turn: dict[str, Any], request_body: Any) -> Plan:
        calls = tuple(
            PlannedCall(
                str(c["name"]),
                c["arguments"]
                if isinstance(c.get("arguments"), str)
                else json.dumps(c.get("arguments", {}), separators=(",", ":")),
                c.get("id"),
            )
            for c in turn.get("tool_calls") or []
        )
        text, thinking = str(turn.get("text") or ""), str(turn.get("thinking") or "")
        usage = turn.get("usage") or {}
        said = len(text) + len(thinking) + sum(len(c.arguments) + len(c.name) for c in calls)
        return Plan(
            text=text,
            thinking=thinking,
            tool_calls=calls,
            # Rough 4-characters-a-token estimates, so usage looks like a real server's.
            usage_in=int(usage.get("input", max(1, len(json.dumps(request_body)) // 4))),
            usage_out=int(usage.get("output", max(1, said // 4))),
            cached=int(usage.get("cached", 0)),
            chunk_size=max(1, int(turn.get("chunk_size", 7))),
            max_tokens=turn.get("stop") == "max_tokens",
            cache_write=int(usage.get("cache_write", 0)),
        )

    def pieces(self, s: str) -> list[str]:
        n = self.chunk_size
        return [s[i : i + n] for i in range(0, len(s), n)]


def _sse(name: str | None, data: Any) -> bytes:
    payload = data if isinstance(data, str) else json.dumps(data, separators=(",", ":"))
    head = f"event: {name}\n" if name else ""
    return f"{head}data: {payload}\n\n".encode()


# --- Anthropic Messages --------------------------------------------------------------------


def anthropic_events(plan: Plan, body: dict[str, Any], next_id: NextId) -> list[bytes]:
    model = str(body.get("model", "fake"))
    ev: list[bytes] = []

    def emit(kind: str, **fields: Any) -> None:
        ev.append(_sse(kind, {"type": kind, **fields}))

    usage = {
        "input_tokens": plan.usage_in,
        "cache_creation_input_tokens": plan.cache_write,
        "cache_read_input_tokens": plan.cached,
        "output_tokens": 1,
    }
    message: dict[str, Any] = {
        "id": f"msg_{next_id()}",
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": usage,
    }
    emit("message_start", message=message)
    emit("ping")
    index = 0
    if plan.thinking:
        emit(
            "content_block_start",
            index=index,
            content_block={"type": "thinking", "thinking": "", "signature": ""},
        )
        for piece in plan.pieces(plan.thinking):
            emit(
                "content_block_delta",
                index=index,
                delta={"type": "thinking_delta", "thinking": piece},
            )
        emit(
            "content_block_delta",
            index=index,
            delta={"type": "signature_delta", "signature": f"sig_{next_id()}"},
        )
        emit("content_block_stop", index=index)
        index += 1
    if plan.text:
        emit("content_block_start", index=index, content_block={"type": "text", "text": ""})
        for piece in plan.pieces(plan.text):
            emit("content_block_delta", index=index, delta={"type": "text_delta", "text": piece})
        emit("content_block_stop", index=index)
        index += 1
    for call in plan.tool_calls:
        block = {
            "type": "tool_use",
            "id": call.id or f"toolu_{next_id()}",
            "name": call.name,
            "input": {},
        }
        emit("content_block_start", index=index, content_block=block)
        for piece in plan.pieces(call.arguments) or [""]:
            emit(
                "content_block_delta",
                index=index,
                delta={"type": "input_json_delta", "partial_json": piece},
            )
        emit("content_block_stop", index=index)
        index += 1
    stop = "max_tokens" if plan.max_tokens else "tool_use" if plan.tool_calls else "end_turn"
    emit(
        "message_delta",
        delta={"stop_reason": stop, "stop_sequence": None},
        usage={"output_tokens": plan.usage_out},
    )
    emit("message_stop")
    return ev


# --- OpenAI Responses ----------------------------------------------------------------------


def responses_events(plan: Plan, body: dict[str, Any], next_id: NextId) -> list[bytes]:
    response_id = f"resp_{next_id()}"
    ev: list[bytes] = []
    output: list[dict[str, Any]] = []

    def emit(kind: str, **fields: Any) -> None:
        ev.append(_sse(kind, {"type": kind, "sequence_number": len(ev), **fields}))

    def response(status: str, **extra: Any) -> dict[str, Any]:
        return {
            "id": response_id,
            "object": "response",
            "created_at": int(time.time()),
            "status": status,
            "model": body.get("model", "fake"),
            "output": list(output),
            **extra,
        }

    emit("response.created", response=response("in_progress"))
    emit("response.in_progress", response=response("in_progress"))
    if plan.thinking:
        output.append(_reasoning_item(plan, emit, len(output), f"rs_{next_id()}"))
    if plan.text:
        output.append(_message_item(plan, emit, len(output), f"msg_{next_id()}"))
    for call in plan.tool_calls:
        output.append(_call_item(plan, emit, len(output), call, next_id()))
    usage = {
        "input_tokens": plan.usage_in + plan.cached + plan.cache_write,
        "input_tokens_details": _input_details(plan, "cached_tokens"),
        "output_tokens": plan.usage_out,
        "output_tokens_details": {"reasoning_tokens": len(plan.thinking) // 4},
        "total_tokens": plan.usage_in + plan.cached + plan.cache_write + plan.usage_out,
    }
    if plan.max_tokens:
        final = response(
            "incomplete", incomplete_details={"reason": "max_output_tokens"}, usage=usage
        )
        emit("response.incomplete", response=final)
    else:
        emit("response.completed", response=response("completed", usage=usage))
    return ev


Emit = Callable[..., None]


def _input_details(plan: Plan, cached_key: str) -> dict[str, int]:
    # OpenAI reports reads only; gateways that bill cache writes (OpenRouter) add them here.
    details = {cached_key: plan.cached}
    if plan.cache_write:
        details["cache_write_tokens"] = plan.cache_write
    return details


def _reasoning_item(plan: Plan, emit: Emit, n: int, item_id: str) -> dict[str, Any]:
    item: dict[str, Any] = {"id": item_id, "type": "reasoning", "summary": []}
    emit("response.output_item.added", output_index=n, item=item)
    common: dict[str, Any] = {"item_id": item_id, "output_index": n, "summary_index": 0}
    emit(
        "response.reasoning_summary_part.added", **common, part={"type": "summary_text", "text": ""}
    )
    for piece in plan.pieces(plan.thinking):
        emit("response.reasoning_summary_text.delta", **common, delta=piece)
    emit("response.reasoning_summary_text.done", **common, text=plan.thinking)
    done_part = {"type": "summary_text", "text": plan.thinking}
    emit("response.reasoning_summary_part.done", **common, part=done_part)
    item = {**item, "summary": [done_part]}
    emit("response.output_item.done", output_index=n, item=item)
    return item


def _message_item(plan: Plan, emit: Emit, n: int, item_id: str) -> dict[str, Any]:
    item: dict[str, Any] = {
        "id": item_id,
        "type": "message",
        "role": "assistant",
        "status": "in_progress",
        "content": [],
    }
    emit("response.output_item.added", output_index=n, item=item)
    common: dict[str, Any] = {"item_id": item_id, "output_index": n, "content_index": 0}
    part = {"type": "output_text", "text": "", "annotations": []}
    emit("response.content_part.added", **common, part=part)
    for piece in plan.pieces(plan.text):
        emit("response.output_text.delta", **common, delta=piece)
    emit("response.output_text.done", **common, text=plan.text)
    done_part = {**part, "text": plan.text}
    emit("response.content_part.done", **common, part=done_part)
    item = {**item, "status": "completed", "content": [done_part]}
    emit("response.output_item.done", output_index=n, item=item)
    return item


def _call_item(plan: Plan, emit: Emit, n: int, call: PlannedCall, number: int) -> dict[str, Any]:
    item: dict[str, Any] = {
        "id": f"fc_{number}",
        "type": "function_call",
        "status": "in_progress",
        "call_id": call.id or f"call_{number}",
        "name": call.name,
        "arguments": "",
    }
    emit("response.output_item.added", output_index=n, item=item)
    common: dict[str, Any] = {"item_id": item["id"], "output_index": n}
    for piece in plan.pieces(call.arguments):
        emit("response.function_call_arguments.delta", **common, delta=piece)
    emit("response.function_call_arguments.done", **common, arguments=call.arguments)
    item = {**item, "status": "completed", "arguments": call.arguments}
    emit("response.output_item.done", output_index=n, item=item)
    return item


# --- Chat Completions ----------------------------------------------------------------------


def chat_events(plan: Plan, body: dict[str, Any], next_id: NextId) -> list[bytes]:
    include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
    base = {
        "id": f"chatcmpl-{next_id()}",
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": body.get("model", "fake"),
    }
    ev: list[bytes] = []

    def emit(delta: dict[str, Any], finish: str | None = None) -> None:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
        ev.append(_sse(None, {**base, "choices": [choice]}))

    emit({"role": "assistant", "content": ""})
    for piece in plan.pieces(plan.thinking):
        emit({"reasoning_content": piece})
    for piece in plan.pieces(plan.text):
        emit({"content": piece})
    for i, call in enumerate(plan.tool_calls):
        call_id = call.id or f"call_{next_id()}"
        first = {
            "index": i,
            "id": call_id,
            "type": "function",
            "function": {"name": call.name, "arguments": ""},
        }
        emit({"tool_calls": [first]})
        for piece in plan.pieces(call.arguments):
            emit({"tool_calls": [{"index": i, "function": {"arguments": piece}}]})
    finish = "length" if plan.max_tokens else "tool_calls" if plan.tool_calls else "stop"
    emit({}, finish)
    if include_usage:
        usage = {
            "prompt_tokens": plan.usage_in + plan.cached + plan.cache_write,
            "completion_tokens": plan.usage_out,
            "total_tokens": plan.usage_in + plan.cached + plan.cache_write + plan.usage_out,
            "prompt_tokens_details": _input_details(plan, "cached_tokens"),
            "completion_tokens_details": {"reasoning_tokens": len(plan.thinking) // 4},
        }
        ev.append(_sse(None, {**base, "choices": [], "usage": usage}))
    ev.append(_sse(None, "[DONE]"))
    return ev


def error_body(
    dialect: str, status: int, message: str, error_type: str | None = None
) -> dict[str, Any]:
    """An error body in the dialect's own shape, as the real APIs send it."""
    if error_type is None:
        error_type = {
            400: "invalid_request_error",
            401: "authentication_error",
            404: "not_found_error",
            429: "rate_limit_error",
            529: "overloaded_error",
        }.get(status, "api_error")
    if dialect == "anthropic":
        return {"type": "error", "error": {"type": error_type, "message": message}}
    code = "rate_limit_exceeded" if status == 429 else "server_error" if status >= 500 else None
    return {"error": {"message": message, "type": error_type, "param": None, "code": code}}


EVENT_BUILDERS = {"anthropic": anthropic_events, "responses": responses_events, "chat": chat_events}
