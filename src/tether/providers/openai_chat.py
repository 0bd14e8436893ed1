"""The Chat Completions adapter (`openai-chat/`, `openai-compatible/` and the local servers).

Requests are shaped for the strictest real server tether meets, llama.cpp: plain-string text
content (parts only when images are present), assistant `content: ""` never null, tool results
as `role: "tool"` with string content.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from tether.errors import ProviderError, StreamCut
from tether.protocol.chunks import Chunk, UsageStatistics
from tether.protocol.llm import ProviderRequest
from tether.protocol.messages import (
    AssistantMessage,
    ImagePart,
    Message,
    TextPart,
    ToolResultMessage,
    Usage,
    UserMessage,
)
from tether.protocol.tool_calls import ToolCall
from tether.providers.adapter import EventMapper, SSEAdapter
from tether.providers.http import TurnAssembler, as_int, cut, event_json, new_call_id
from tether.providers.sse import SSEEvent

DEFAULT_BASE_URL = "https://api.openai.com/v1"


class OpenAIChatProvider(SSEAdapter):
    api = "openai-completions"
    path = "/chat/completions"
    terminal = "finish_reason"

    def body(self, request: ProviderRequest) -> dict[str, Any]:
        return build_body(request, openai_hosted=self.endpoint.provider == "openai-chat")

    def events(self) -> ChatEvents:
        return ChatEvents(self.endpoint.provider)

    async def finish(self, events: EventMapper, error: BaseException | None) -> list[Chunk]:
        # The connection ending after a finish_reason, without [DONE] (even mid chunked body),
        # is a complete answer: some servers stop there.
        assert isinstance(events, ChatEvents)
        if events.finished and (error is None or isinstance(error, StreamCut)):
            return events.end_of_stream()
        return await super().finish(events, error)


def build_body(request: ProviderRequest, *, openai_hosted: bool = False) -> dict[str, Any]:
    messages: list[dict[str, Any]] = []
    if request.system:
        messages.append({"role": "system", "content": request.system})
    messages += to_chat_messages(request.messages)
    if request.memory_update:  # the last system message: newer memory wins
        messages.append({"role": "system", "content": request.memory_update})
    body: dict[str, Any] = {
        "model": request.model,
        "messages": messages,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    # OpenAI's reasoning models refuse `max_tokens`; llama.cpp and most compatible servers
    # know only `max_tokens`.
    body["max_completion_tokens" if openai_hosted else "max_tokens"] = request.max_tokens
    if request.tools:
        body["tools"] = [
            {
                "type": "function",
                "function": {
                    "name": t.name,
                    "description": t.description,
                    "parameters": t.parameters,
                },
            }
            for t in request.tools
        ]
    if request.reasoning_effort:
        body["reasoning_effort"] = request.reasoning_effort
    if openai_hosted and request.session_id:
        # Routes every step of a conversation to the same cache (OpenAI's prompt caching);
        # compatible servers may refuse unknown fields, so only OpenAI gets it.
        body["prompt_cache_key"] = request.session_id
    body.update(request.extra)
    return body


def to_chat_messages(messages: tuple[Message, ...]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    images: list[ImagePart] = []
    for message in messages:
        if images and not isinstance(message, ToolResultMessage):
            out.append({"role": "user", "content": _content(tuple(images))})
            images = []
        if isinstance(message, UserMessage):
            out.append({"role": "user", "content": _content(message.content)})
        elif isinstance(message, AssistantMessage):
            entry: dict[str, Any] = {"role": "assistant", "content": message.text}
            calls = [_tool_call(p) for p in message.content if isinstance(p, ToolCall)]
            if calls:
                entry["tool_calls"] = calls
            out.append(entry)
        else:
            out.append(
                {"role": "tool", "tool_call_id": message.tool_call_id, "content": message.text}
            )
            # Tool messages carry text only; images follow the whole run of tool messages as
            # one user message (a user message inside the run would orphan the later results).
            images += [p for p in message.content if isinstance(p, ImagePart)]
    if images:
        out.append({"role": "user", "content": _content(tuple(images))})
    return out


def _content(parts: tuple[TextPart | ImagePart, ...]) -> str | list[dict[str, Any]]:
    if not any(isinstance(p, ImagePart) for p in parts):
        return "\n".join(p.text for p in parts if isinstance(p, TextPart))
    out: list[dict[str, Any]] = []
    for p in parts:
        if isinstance(p, TextPart):
            out.append({"type": "text", "text": p.text})
        else:
            out.append(
                {"type": "image_url", "image_url": {"url": f"data:{p.mime_type};base64,{p.data}"}}
            )
    return out


def _tool_call(part: ToolCall) -> dict[str, Any]:
    return {
        "id": part.id,
        "type": "function",
        "function": {"name": part.name, "arguments": json.dumps(part.arguments)},
    }


@dataclass(slots=True)
class _Call:
    id: str
    name: str = ""
    arguments: list[str] = field(default_factory=list)


class ChatEvents:
    """Maps one Chat Completions stream to chunks. Tool calls go out whole at `finish_reason`;
    usage and the stop reason at `[DONE]` (or EOF after a finish_reason)."""

    def __init__(self, provider: str = "openai-chat") -> None:
        self.provider = provider
        self.out = TurnAssembler()
        self.done = False
        self._calls: list[_Call] = []
        self._slot: dict[int, int] = {}  # stream index -> position in _calls
        self._finish_reason: str | None = None
        self._usage = UsageStatistics()

    def feed(self, event: SSEEvent) -> list[Chunk]:
        if event.data.strip() == "[DONE]":
            return self._complete()
        data = event_json(self.provider, event)
        if "error" in data:
            raise self._error(data["error"])
        if isinstance(data.get("usage"), dict):
            self._usage = _usage(data["usage"])
        chunks: list[Chunk] = []
        for choice in data.get("choices") or []:
            if not isinstance(choice, dict) or as_int(choice.get("index")) != 0:
                continue
            delta = choice.get("delta") or {}
            reasoning = delta.get("reasoning_content") or delta.get("reasoning")
            if isinstance(reasoning, str):
                chunks += self.out.reasoning(reasoning)
            if isinstance(delta.get("content"), str):
                chunks += self.out.text(delta["content"])
            for call in delta.get("tool_calls") or []:
                if isinstance(call, dict):
                    self._call_delta(call)
            if isinstance(choice.get("finish_reason"), str) and self._finish_reason is None:
                self._finish_reason = choice["finish_reason"]
                for c in self._calls:
                    chunks += self.out.tool_call(c.id, c.name, "".join(c.arguments))
        return chunks

    def _call_delta(self, delta: dict[str, Any]) -> None:
        index = as_int(delta.get("index"))
        new_id = delta.get("id") if isinstance(delta.get("id"), str) and delta["id"] else None
        slot = self._slot.get(index)
        # Some servers send every parallel call at index 0, told apart only by a new id.
        if slot is None or (new_id is not None and new_id != self._calls[slot].id):
            self.out.break_run()
            self._calls.append(_Call(new_id or new_call_id()))
            slot = self._slot[index] = len(self._calls) - 1
        call = self._calls[slot]
        function = delta.get("function") or {}
        if isinstance(function.get("name"), str):
            call.name += function["name"]
        if isinstance(function.get("arguments"), str):
            call.arguments.append(function["arguments"])

    def _complete(self) -> list[Chunk]:
        self.done = True
        chunks: list[Chunk] = []
        if self._finish_reason is None:
            for c in self._calls:  # [DONE] without finish_reason: the server still finished
                chunks += self.out.tool_call(c.id, c.name, "".join(c.arguments))
        return chunks + self.out.finish(self._usage, hit_max_tokens=self._finish_reason == "length")

    @property
    def finished(self) -> bool:
        """A finish_reason arrived: what follows (usage, [DONE]) is optional."""
        return self._finish_reason is not None

    def end_of_stream(self) -> list[Chunk]:
        if self._finish_reason is None:
            raise cut(self.provider, "a finish_reason")
        return self._complete()

    def _error(self, error: Any) -> ProviderError:
        error = error if isinstance(error, dict) else {"message": str(error)}
        message = str(error.get("message") or "unknown error")
        code = error.get("code") or error.get("type") or "error"
        retryable = code in ("server_error", "rate_limit_exceeded") or (
            isinstance(code, int) and (code == 429 or code >= 500)
        )
        return ProviderError(
            f"{self.provider} stream error ({code}): {message}",
            detail=json.dumps(error),
            retryable=retryable,
        )


def _usage(usage: dict[str, Any]) -> UsageStatistics:
    details = usage.get("prompt_tokens_details") or {}
    # OpenAI and most servers: prompt_tokens_details.cached_tokens; DeepSeek:
    # prompt_cache_hit_tokens; OpenRouter adds prompt_tokens_details.cache_write_tokens.
    cached = as_int(details.get("cached_tokens")) or as_int(usage.get("prompt_cache_hit_tokens"))
    written = as_int(details.get("cache_write_tokens"))
    return UsageStatistics(Usage(
        # prompt_tokens includes the cached ones; Usage counts them apart.
        input_tokens=max(0, as_int(usage.get("prompt_tokens")) - cached - written),
        output_tokens=as_int(usage.get("completion_tokens")),
        cache_read_tokens=cached,
        cache_write_tokens=written,
        reasoning_tokens=as_int(
            (usage.get("completion_tokens_details") or {}).get("reasoning_tokens")
        ),
    ))
