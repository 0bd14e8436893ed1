"""The OpenAI Responses API adapter (`openai/<model>`): input items out, stream events to chunks."""

from __future__ import annotations

import json
from typing import Any

from tether.errors import ProviderError
from tether.protocol.chunks import Chunk, UsageStatistics
from tether.protocol.llm import ProviderRequest
from tether.protocol.messages import (
    AssistantMessage,
    ImagePart,
    Message,
    TextPart,
    Usage,
    UserMessage,
)
from tether.protocol.tool_calls import ToolCall
from tether.providers.adapter import SSEAdapter
from tether.providers.http import TurnAssembler, as_int, event_json
from tether.providers.sse import SSEEvent

DEFAULT_BASE_URL = "https://api.openai.com/v1"
_RETRYABLE_CODES = frozenset({"server_error", "rate_limit_exceeded", "server_is_overloaded"})


class OpenAIResponsesProvider(SSEAdapter):
    api = "openai-responses"
    path = "/responses"
    terminal = "response.completed"

    def body(self, request: ProviderRequest) -> dict[str, Any]:
        return build_body(request)

    def events(self) -> ResponsesEvents:
        return ResponsesEvents(self.endpoint.provider)


def build_body(request: ProviderRequest) -> dict[str, Any]:
    body: dict[str, Any] = {
        "model": request.model,
        "input": to_input_items(request.messages),
        "stream": True,
        "store": False,  # tether keeps the history; nothing is stored server-side
        "max_output_tokens": request.max_tokens,
    }
    if request.system:
        body["instructions"] = request.system
    if request.tools:
        body["tools"] = [
            {
                "type": "function",
                "name": t.name,
                "description": t.description,
                "parameters": t.parameters,
            }
            for t in request.tools
        ]
    if request.reasoning_effort:
        body["reasoning"] = {"effort": request.reasoning_effort, "summary": "auto"}
    if request.session_id:
        body["prompt_cache_key"] = request.session_id
    body.update(request.extra)
    return body


def to_input_items(messages: tuple[Message, ...]) -> list[dict[str, Any]]:
    items: list[dict[str, Any]] = []
    for message in messages:
        if isinstance(message, UserMessage):
            content = [_user_part(p) for p in message.content]
            if content:
                items.append({"type": "message", "role": "user", "content": content})
        elif isinstance(message, AssistantMessage):
            items.extend(_assistant_items(message))
        else:
            items.append(
                {
                    "type": "function_call_output",
                    "call_id": message.tool_call_id,
                    "output": message.text,
                }
            )
            images = [_user_part(p) for p in message.content if isinstance(p, ImagePart)]
            if images:  # function outputs are text; images follow as a user message
                items.append({"type": "message", "role": "user", "content": images})
    return items


def _user_part(part: TextPart | ImagePart) -> dict[str, Any]:
    if isinstance(part, TextPart):
        return {"type": "input_text", "text": part.text}
    return {"type": "input_image", "image_url": f"data:{part.mime_type};base64,{part.data}"}


def _assistant_items(message: AssistantMessage) -> list[dict[str, Any]]:
    # Thinking is not replayed: with store:false the API needs encrypted reasoning tether lacks.
    items: list[dict[str, Any]] = []
    for part in message.content:
        if isinstance(part, TextPart) and part.text:
            items.append(
                {
                    "type": "message",
                    "role": "assistant",
                    "status": "completed",
                    "content": [{"type": "output_text", "text": part.text, "annotations": []}],
                }
            )
        elif isinstance(part, ToolCall):
            items.append(
                {
                    "type": "function_call",
                    "call_id": part.id,
                    "name": part.name,
                    "arguments": json.dumps(part.arguments),
                }
            )
    return items


class ResponsesEvents:
    """Maps one Responses stream's events to chunks; `done` after completed / incomplete."""

    def __init__(self, provider: str = "openai") -> None:
        self.provider = provider
        self.out = TurnAssembler()
        self.done = False
        self._calls: dict[str, dict[str, Any]] = {}  # item id -> {call_id, name, parts}
        self._emitted: set[str] = set()  # call_ids already sent on

    def feed(self, event: SSEEvent) -> list[Chunk]:
        data = event_json(self.provider, event)
        kind = data.get("type", event.event)
        if kind in ("response.output_text.delta", "response.refusal.delta"):
            return self.out.text(str(data.get("delta") or ""))
        if kind in ("response.reasoning_summary_text.delta", "response.reasoning_text.delta"):
            return self.out.reasoning(str(data.get("delta") or ""))
        if kind == "response.output_item.added":
            self._item_added(data.get("item") or {})
        elif kind == "response.function_call_arguments.delta":
            call = self._calls.get(str(data.get("item_id", "")))
            if call is not None:
                call["parts"].append(str(data.get("delta") or ""))
        elif kind == "response.output_item.done":
            return self._item_done(data.get("item") or {})
        elif kind in ("response.completed", "response.incomplete"):
            return self._finish(data.get("response") or {})
        elif kind == "response.failed":
            error = (data.get("response") or {}).get("error")
            raise self._error(error if isinstance(error, dict) else {"message": "response failed"})
        elif kind == "error":
            error = data.get("error")
            raise self._error(error if isinstance(error, dict) else data)
        return []

    def _item_added(self, item: dict[str, Any]) -> None:
        if item.get("type") == "function_call":
            self.out.break_run()
            self._calls[str(item.get("id", ""))] = {
                "call_id": item.get("call_id"),
                "name": item.get("name"),
                "parts": [],
            }
        elif item.get("type") == "message":
            self.out.break_run()

    def _item_done(self, item: dict[str, Any]) -> list[Chunk]:
        if item.get("type") != "function_call":
            return []
        seen = self._calls.pop(str(item.get("id", "")), {"parts": []})
        call_id = str(item.get("call_id") or seen.get("call_id") or "")
        if call_id in self._emitted:
            return []
        self._emitted.add(call_id)
        streamed = "".join(seen["parts"])
        arguments = streamed or str(item.get("arguments") or "")
        return self.out.tool_call(
            call_id, str(item.get("name") or seen.get("name") or ""), arguments
        )

    def _finish(self, response: dict[str, Any]) -> list[Chunk]:
        chunks: list[Chunk] = []
        for item in response.get("output") or []:
            if isinstance(item, dict) and item.get("type") == "function_call":
                chunks += self._item_done(
                    item
                )  # calls the stream never closed with output_item.done
        self.done = True
        details = response.get("incomplete_details") or {}
        hit_max = (
            response.get("status") == "incomplete" and details.get("reason") == "max_output_tokens"
        )
        return chunks + self.out.finish(_usage(response.get("usage")), hit_max_tokens=hit_max)

    def _error(self, error: dict[str, Any]) -> ProviderError:
        code = str(error.get("code") or error.get("type") or "error")
        message = str(error.get("message") or "unknown error")
        return ProviderError(
            f"{self.provider} stream error ({code}): {message}",
            detail=json.dumps(error),
            retryable=code in _RETRYABLE_CODES,
        )


def _usage(usage: Any) -> UsageStatistics:
    if not isinstance(usage, dict):
        return UsageStatistics()
    details = usage.get("input_tokens_details") or {}
    cached = as_int(details.get("cached_tokens"))
    written = as_int(details.get("cache_write_tokens"))  # gateways that bill cache writes
    return UsageStatistics(Usage(
        # input_tokens includes the cached ones; Usage counts them apart.
        input_tokens=max(0, as_int(usage.get("input_tokens")) - cached - written),
        output_tokens=as_int(usage.get("output_tokens")),
        cache_read_tokens=cached,
        cache_write_tokens=written,
        reasoning_tokens=as_int((usage.get("output_tokens_details") or {}).get("reasoning_tokens")),
    ))
