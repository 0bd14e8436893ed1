"""The Anthropic Messages API adapter: request building and the SSE event mapping onto chunks."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from tether.errors import ProviderError
from tether.protocol.chunks import Chunk, UsageStatistics
from tether.protocol.llm import ProviderRequest, ToolSpec
from tether.protocol.messages import (
    AssistantMessage,
    ImagePart,
    Message,
    TextPart,
    ThinkingPart,
    ToolResultMessage,
    Usage,
    UserMessage,
)
from tether.protocol.tool_calls import ToolCall
from tether.providers.adapter import SSEAdapter
from tether.providers.http import TurnAssembler, as_int, event_json
from tether.providers.sse import SSEEvent

DEFAULT_BASE_URL = "https://api.anthropic.com"
API_VERSION = "2023-06-01"
# Extended-thinking budgets per effort; Anthropic requires 1024 <= budget < max_tokens.
_THINKING_BUDGET = {"minimal": 1024, "low": 2048, "medium": 8192, "high": 24576}
_RETRYABLE_ERRORS = frozenset(
    {"overloaded_error", "api_error", "rate_limit_error", "timeout_error"}
)


class AnthropicProvider(SSEAdapter):
    api = "anthropic-messages"
    path = "/v1/messages"
    terminal = "message_stop"

    def headers(self) -> dict[str, str]:
        headers = {"anthropic-version": API_VERSION}
        if self.endpoint.api_key:
            headers["x-api-key"] = self.endpoint.api_key
        return headers

    def body(self, request: ProviderRequest) -> dict[str, Any]:
        return build_body(request)

    def events(self) -> AnthropicEvents:
        return AnthropicEvents(self.endpoint.provider)


def build_body(request: ProviderRequest) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": request.model,
        "max_tokens": request.max_tokens,
        "stream": True,
        "messages": to_anthropic_messages(request.messages),
    }
    if request.system:
        body["system"] = [{"type": "text", "text": request.system}]
    if request.tools:
        body["tools"] = [_tool(t) for t in request.tools]
    mark_cache_breakpoints(body)
    if request.memory_update:
        # After the last breakpoint: a memory change costs its own tokens, never the cache.
        _append_after_breakpoints(body["messages"], request.memory_update)
    budget = _THINKING_BUDGET.get(request.reasoning_effort or "")
    if budget is not None:
        budget = min(budget, request.max_tokens - 1)
        if budget >= 1024:
            body["thinking"] = {"type": "enabled", "budget_tokens": budget}
    body.update(request.extra)
    return body


_EPHEMERAL = {"type": "ephemeral"}
_UNMARKABLE = frozenset({"thinking", "redacted_thinking"})  # the API refuses cache_control there


def mark_cache_breakpoints(body: dict[str, Any]) -> None:
    """Anthropic's prompt cache, as its rules ask (at most four breakpoints; the cached prefix
    runs tools -> system -> messages and is read back at any earlier breakpoint position):

    1. the end of the stable prefix: the system prompt's last block, else the last tool;
    2. the last block of the latest message, so the next step reads everything sent so far
       from the cache and pays full price only for what it adds;
    3. the last block of the message that ended the previous request (the user message before
       the latest assistant turn): the entry step 2 wrote last time, found even when a step
       adds more blocks than the API's 20-block lookback.

    Everything volatile (the newest tool results, a reminder) sits after the breakpoints it
    would otherwise invalidate, since messages only ever grow at the end.
    """
    system, tools = body.get("system"), body.get("tools")
    if isinstance(system, list) and system:
        system[-1]["cache_control"] = _EPHEMERAL
    elif isinstance(tools, list) and tools:
        tools[-1]["cache_control"] = _EPHEMERAL
    messages = body.get("messages") or []
    latest = len(messages) - 1
    _mark_last_block(messages, latest)
    assistant = next(
        (i for i in range(latest - 1, -1, -1) if messages[i].get("role") == "assistant"), None
    )
    if assistant is not None and assistant > 0:
        _mark_last_block(messages, assistant - 1)


def _append_after_breakpoints(messages: list[dict[str, Any]], text: str) -> None:
    block = {"type": "text", "text": text}
    if messages and messages[-1].get("role") == "user":
        messages[-1]["content"].append(block)
    else:
        messages.append({"role": "user", "content": [block]})


def _mark_last_block(messages: list[dict[str, Any]], index: int) -> None:
    if index < 0:
        return
    content = messages[index].get("content")
    if isinstance(content, str):
        content = messages[index]["content"] = [{"type": "text", "text": content}]
    for block in reversed(content or []):
        if block.get("type") not in _UNMARKABLE:
            block["cache_control"] = _EPHEMERAL
            return


def _tool(tool: ToolSpec) -> dict[str, Any]:
    return {"name": tool.name, "description": tool.description, "input_schema": tool.parameters}


def to_anthropic_messages(messages: tuple[Message, ...]) -> list[dict[str, Any]]:
    """Consecutive tool results become one user message of tool_result blocks, as the API requires."""
    out: list[dict[str, Any]] = []
    results: list[dict[str, Any]] = []
    for message in messages:
        if isinstance(message, ToolResultMessage):
            results.append(_tool_result(message))
            continue
        if results:
            out.append({"role": "user", "content": results})
            results = []
        if isinstance(message, UserMessage):
            blocks = [
                _block(p) for p in message.content if not (isinstance(p, TextPart) and not p.text)
            ]
            if blocks:
                out.append({"role": "user", "content": blocks})
        else:
            blocks = _assistant_blocks(message)
            if blocks:  # the API rejects an assistant turn with no content
                out.append({"role": "assistant", "content": blocks})
    if results:
        out.append({"role": "user", "content": results})
    return out


def _assistant_blocks(message: AssistantMessage) -> list[dict[str, Any]]:
    blocks: list[dict[str, Any]] = []
    for part in message.content:
        if isinstance(part, TextPart):
            if part.text:
                blocks.append({"type": "text", "text": part.text})
        elif isinstance(part, ThinkingPart):
            # Unsigned thinking (another provider's, or a cut stream's) is rejected on replay.
            if part.signature:
                blocks.append(
                    {"type": "thinking", "thinking": part.thinking, "signature": part.signature}
                )
        elif isinstance(part, ToolCall):
            blocks.append(
                {"type": "tool_use", "id": part.id, "name": part.name, "input": part.arguments}
            )
    return blocks


def _block(part: TextPart | ImagePart) -> dict[str, Any]:
    if isinstance(part, TextPart):
        return {"type": "text", "text": part.text}
    return {
        "type": "image",
        "source": {"type": "base64", "media_type": part.mime_type, "data": part.data},
    }


def _tool_result(message: ToolResultMessage) -> dict[str, Any]:
    block: dict[str, Any] = {"type": "tool_result", "tool_use_id": message.tool_call_id}
    if any(isinstance(p, ImagePart) for p in message.content):
        block["content"] = [_block(p) for p in message.content]
    else:
        block["content"] = message.text
    if message.is_error:
        block["is_error"] = True
    return block


@dataclass(slots=True)
class _ToolBlock:
    id: str
    name: str
    initial_input: Any
    json_parts: list[str] = field(default_factory=list)


class AnthropicEvents:
    """Maps one Messages stream's events to chunks; `done` once `message_stop` arrived."""

    def __init__(self, provider: str = "anthropic") -> None:
        self.provider = provider
        self.out = TurnAssembler()
        self.done = False
        self._tools: dict[int, _ToolBlock] = {}
        self._usage: dict[str, int] = {}
        self._stop_reason: str | None = None

    def feed(self, event: SSEEvent) -> list[Chunk]:
        if event.event == "ping":
            return []
        data = event_json(self.provider, event)
        kind = data.get("type", event.event)
        if kind == "message_start":
            message = data.get("message")
            self._add_usage(message.get("usage") if isinstance(message, dict) else None)
        elif kind == "content_block_start":
            return self._block_start(as_int(data.get("index")), data.get("content_block") or {})
        elif kind == "content_block_delta":
            return self._delta(as_int(data.get("index")), data.get("delta") or {})
        elif kind == "content_block_stop":
            return self._block_stop(as_int(data.get("index")))
        elif kind == "message_delta":
            delta = data.get("delta") or {}
            if isinstance(delta.get("stop_reason"), str):
                self._stop_reason = delta["stop_reason"]
            self._add_usage(data.get("usage"))
        elif kind == "message_stop":
            self.done = True
            return self.out.finish(
                self._usage_chunk(), hit_max_tokens=self._stop_reason == "max_tokens"
            )
        elif kind == "error":
            raise self._error(data.get("error"))
        return []

    def _block_start(self, index: int, block: dict[str, Any]) -> list[Chunk]:
        btype = block.get("type")
        if btype == "text":
            return self.out.text(block.get("text") or "")
        if btype == "thinking":
            return self.out.reasoning(block.get("thinking") or "", block.get("signature") or None)
        if btype == "tool_use":
            self.out.break_run()
            self._tools[index] = _ToolBlock(
                str(block.get("id", "")), str(block.get("name", "")), block.get("input")
            )
        return []

    def _delta(self, index: int, delta: dict[str, Any]) -> list[Chunk]:
        dtype = delta.get("type")
        if dtype == "text_delta":
            return self.out.text(delta.get("text") or "")
        if dtype == "thinking_delta":
            return self.out.reasoning(delta.get("thinking") or "")
        if dtype == "signature_delta":
            return self.out.reasoning("", delta.get("signature") or None)
        if dtype == "input_json_delta" and index in self._tools:
            self._tools[index].json_parts.append(delta.get("partial_json") or "")
        return []

    def _block_stop(self, index: int) -> list[Chunk]:
        tool = self._tools.pop(index, None)
        if tool is None:
            return []
        arguments = "".join(tool.json_parts)
        if not arguments.strip() and tool.initial_input:
            arguments = json.dumps(tool.initial_input)  # a non-streamed input, seen from proxies
        return self.out.tool_call(tool.id, tool.name, arguments)

    def _add_usage(self, usage: Any) -> None:
        if isinstance(usage, dict):
            for key, value in usage.items():
                if isinstance(value, int) and value:
                    self._usage[key] = value  # message_delta repeats totals, it does not add

    def _usage_chunk(self) -> UsageStatistics:
        u = self._usage
        return UsageStatistics(Usage(
            input_tokens=u.get("input_tokens", 0),
            output_tokens=u.get("output_tokens", 0),
            cache_read_tokens=u.get("cache_read_input_tokens", 0),
            cache_write_tokens=u.get("cache_creation_input_tokens", 0),
        ))

    def _error(self, error: Any) -> ProviderError:
        error = error if isinstance(error, dict) else {}
        etype = str(error.get("type", "error"))
        message = str(error.get("message", "unknown error"))
        return ProviderError(
            f"{self.provider} stream error ({etype}): {message}",
            detail=json.dumps(error),
            retryable=etype in _RETRYABLE_ERRORS,
        )
