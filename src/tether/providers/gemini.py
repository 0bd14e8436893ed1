"""The Google Gemini adapter: `models/{model}:streamGenerateContent?alt=sse`, request and mapping.

Gemini has no terminal event: a stream is complete once a candidate carried a `finishReason`
(the connection may then end). Thinking arrives as `thought: true` text parts; a part may carry a
`thoughtSignature`, which Gemini wants back on the same part when the history is replayed, so it
travels as the signature of a (possibly empty) reasoning chunk just before that part. A function
call's `id`, when Gemini gave one, goes back on the call and on its `functionResponse` (how
Gemini tells apart parallel calls of one function); a call without one gets an id of tether's
own (`gemini-local-…`), which is never sent. A stop for
safety, recitation or prohibited content, or a blocked prompt, is an error that names the reason.
"""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator
from contextlib import aclosing
from typing import Any
from urllib.parse import quote

from tether.errors import ProviderError, StreamCut
from tether.protocol.chunks import Chunk, UsageStatistics
from tether.protocol.llm import ProviderRequest
from tether.protocol.messages import (
    AssistantMessage,
    ImagePart,
    Message,
    TextPart,
    ThinkingPart,
    ToolResultMessage,
    Usage,
)
from tether.protocol.tool_calls import ToolCall
from tether.providers.adapter import EventMapper, SSEAdapter
from tether.providers.gemini_schema import tool_parameters
from tether.providers.http import TurnAssembler, as_int, cut, event_json, post_sse
from tether.providers.sse import SSEEvent

DEFAULT_BASE_URL = "https://generativelanguage.googleapis.com/v1beta"
# thinkingBudget per effort (Gemini 2.5); Gemini 3 takes a thinkingLevel instead.
_THINKING_BUDGET = {"minimal": 512, "low": 2048, "medium": 8192, "high": 24576}
# Why a candidate stopped, for the stops that are not a normal end.
STOP_EXPLAINED = {
    "SAFETY": "Gemini's safety filters blocked the answer",
    "RECITATION": "the answer was stopped for reciting existing material (copyright)",
    "PROHIBITED_CONTENT": "the answer was stopped for prohibited content",
    "BLOCKLIST": "the answer contained a term from a blocklist",
    "SPII": "the answer contained sensitive personal information",
    "IMAGE_SAFETY": "Gemini's safety filters blocked a generated image",
    "LANGUAGE": "the answer was in a language Gemini does not support",
    "MALFORMED_FUNCTION_CALL": "the model produced a malformed function call",
    "UNEXPECTED_TOOL_CALL": "the model called a tool it was not given",
    "OTHER": "Gemini stopped the answer for an unspecified reason",
}
_OWN_ID = "gemini-local-"  # ids tether made for calls Gemini sent without one


def _own_call_id() -> str:
    import uuid

    return f"{_OWN_ID}{uuid.uuid4().hex[:24]}"


def _gemini_id(call_id: str) -> dict[str, str]:
    """`{"id": …}` for an id Gemini issued, `{}` for one tether made."""
    return {} if not call_id or call_id.startswith(_OWN_ID) else {"id": call_id}


_RETRYABLE_STATUS = frozenset(
    {"RESOURCE_EXHAUSTED", "UNAVAILABLE", "INTERNAL", "DEADLINE_EXCEEDED"}
)


class GeminiProvider(SSEAdapter):
    api = "google-generative-ai"
    terminal = "a finishReason"

    def headers(self) -> dict[str, str]:
        return {"x-goog-api-key": self.endpoint.api_key} if self.endpoint.api_key else {}

    def body(self, request: ProviderRequest) -> dict[str, Any]:
        return build_body(request)

    def events(self) -> GeminiEvents:
        return GeminiEvents(self.endpoint.provider)

    def url(self, model: str) -> str:
        model = model.removeprefix("models/")
        return f"{self.endpoint.base_url.rstrip('/')}/models/{quote(model, safe='.-_')}:streamGenerateContent?alt=sse"

    async def finish(self, events: EventMapper, error: BaseException | None) -> list[Chunk]:
        assert isinstance(events, GeminiEvents)
        if events.finished and (error is None or isinstance(error, StreamCut)):
            return events.complete()
        return await super().finish(events, error)

    async def _attempt(self, request: ProviderRequest) -> AsyncGenerator[Chunk, None]:
        # The model is part of Gemini's path, so the skeleton's fixed `path` does not fit.
        events = self.events()
        error: BaseException | None = None
        try:
            async with aclosing(
                post_sse(self.endpoint, self.url(request.model), self.headers(), self.body(request))
            ) as sse:
                async for event in sse:
                    for chunk in events.feed(event):
                        yield chunk
        except Exception as exc:  # handed to `finish`, which knows a finished stream from a cut one
            error = exc
        for chunk in await self.finish(events, error):
            yield chunk


def build_body(request: ProviderRequest) -> dict[str, Any]:
    body: dict[str, Any] = {"contents": to_gemini_contents(request.messages)}
    system = request.system + (f"\n\n{request.memory_update}" if request.memory_update else "")
    if system:
        body["systemInstruction"] = {"parts": [{"text": system}]}
    if request.tools:
        declarations = []
        for tool in request.tools:
            declaration: dict[str, Any] = {"name": tool.name, "description": tool.description}
            parameters = tool_parameters(tool.parameters)
            if parameters is not None:
                declaration["parameters"] = parameters
            declarations.append(declaration)
        body["tools"] = [{"functionDeclarations": declarations}]
    config: dict[str, Any] = {"maxOutputTokens": request.max_tokens}
    effort = request.reasoning_effort
    if effort in _THINKING_BUDGET:
        if request.model.removeprefix("models/").startswith("gemini-3"):
            config["thinkingConfig"] = {
                "includeThoughts": True,
                "thinkingLevel": "high" if effort == "high" else "low",
            }
        else:
            budget = min(_THINKING_BUDGET[effort], max(0, request.max_tokens - 1))
            config["thinkingConfig"] = {"includeThoughts": True, "thinkingBudget": budget}
    body["generationConfig"] = config
    body.update(request.extra)
    return body


def to_gemini_contents(messages: tuple[Message, ...]) -> list[dict[str, Any]]:
    """Roles `user` and `model`; one turn's function responses together in one `user` content,
    in call order, as Gemini pairs them with the calls of the model turn before."""
    out: list[dict[str, Any]] = []

    def add(role: str, parts: list[dict[str, Any]]) -> None:
        if not parts:
            return
        if out and out[-1]["role"] == role:
            out[-1]["parts"].extend(parts)  # Gemini wants the roles to alternate
        else:
            out.append({"role": role, "parts": parts})

    for message in messages:
        if isinstance(message, AssistantMessage):
            add("model", _model_parts(message))
        elif isinstance(message, ToolResultMessage):
            add("user", _function_response(message))
        else:
            add(
                "user",
                [_part(p) for p in message.content if not (isinstance(p, TextPart) and not p.text)],
            )
    return out


def _part(part: TextPart | ImagePart) -> dict[str, Any]:
    if isinstance(part, TextPart):
        return {"text": part.text}
    return {"inlineData": {"mimeType": part.mime_type, "data": part.data}}


def _model_parts(message: AssistantMessage) -> list[dict[str, Any]]:
    parts: list[dict[str, Any]] = []
    signature: str | None = None  # a thought signature waiting for the part it belongs to
    for part in message.content:
        if isinstance(part, ThinkingPart):
            # Thought text is not replayed (Gemini ignores it); its signature goes on the next part.
            signature = part.signature or signature
            continue
        if isinstance(part, TextPart):
            if not part.text:
                continue
            out: dict[str, Any] = {"text": part.text}
        elif isinstance(part, ToolCall):
            call = {"name": part.name, "args": part.arguments, **_gemini_id(part.id)}
            out = {"functionCall": call}
        else:
            continue
        if signature:
            out["thoughtSignature"] = signature
            signature = None
        parts.append(out)
    return parts


def _function_response(message: ToolResultMessage) -> list[dict[str, Any]]:
    key = "error" if message.is_error else "output"
    parts: list[dict[str, Any]] = [
        {
            "functionResponse": {
                "name": message.tool_name,
                "response": {key: message.text},
                **_gemini_id(message.tool_call_id),
            }
        }
    ]
    parts += [_part(p) for p in message.content if isinstance(p, ImagePart)]
    return parts


class GeminiEvents:
    """Maps one streamGenerateContent SSE stream to chunks; `finished` once a finishReason came."""

    def __init__(self, provider: str = "google") -> None:
        self.provider = provider
        self.out = TurnAssembler()
        self.done = False  # never set: the stream's end (after `finished`) completes the turn
        self._finish_reason: str | None = None
        self._usage = UsageStatistics()
        # A thought run still open and unsigned: the signature on the part after it is that
        # run's, so it joins the run instead of opening a second reasoning message.
        self._unsigned_thoughts = False

    @property
    def finished(self) -> bool:
        return self._finish_reason is not None

    def feed(self, event: SSEEvent) -> list[Chunk]:
        data = event_json(self.provider, event)
        if "error" in data:
            raise self._error(data["error"])
        if isinstance(data.get("usageMetadata"), dict):
            self._usage = _usage(data["usageMetadata"])
        feedback = data.get("promptFeedback")
        if isinstance(feedback, dict) and feedback.get("blockReason"):
            reason = str(feedback["blockReason"])
            raise ProviderError(
                f"{self.provider} blocked the prompt (blockReason {reason}): "
                f"{STOP_EXPLAINED.get(reason, 'Gemini refused the prompt')}; rephrase the request "
                "or remove the content that triggered it",
                detail=json.dumps(feedback),
                retryable=False,
            )
        chunks: list[Chunk] = []
        candidates = data.get("candidates") or []
        candidate = candidates[0] if candidates and isinstance(candidates[0], dict) else {}
        content = candidate.get("content")
        parts = content.get("parts") if isinstance(content, dict) else None
        for part in parts if isinstance(parts, list) else []:
            if isinstance(part, dict):
                chunks += self._part(part)
        finish = candidate.get("finishReason")
        reason = finish if isinstance(finish, str) else ""
        if reason and self._finish_reason is None:
            if reason not in ("STOP", "MAX_TOKENS", "FINISH_REASON_UNSPECIFIED"):
                raise self._stopped(reason, candidate)
            self._finish_reason = reason
        return chunks

    def _part(self, part: dict[str, Any]) -> list[Chunk]:
        signature = part.get("thoughtSignature") or None
        if part.get("thought") is True:
            self._unsigned_thoughts = signature is None
            return self.out.reasoning(str(part.get("text") or ""), signature)
        chunks: list[Chunk] = []
        if signature:  # the signature of the part that follows (text or a function call)
            if not self._unsigned_thoughts:
                self.out.break_run()
            chunks += self.out.reasoning("", signature)
        self._unsigned_thoughts = False
        call = part.get("functionCall")
        if isinstance(call, dict):
            args = call.get("args")
            # Arguments arrive as an object; non-ASCII text stays as the model wrote it.
            arguments = json.dumps(args if isinstance(args, dict) else {}, ensure_ascii=False)
            call_id = call.get("id") if isinstance(call.get("id"), str) and call["id"] else None
            return chunks + self.out.tool_call(
                call_id or _own_call_id(), str(call.get("name", "")), arguments
            )
        if isinstance(part.get("text"), str):
            return chunks + self.out.text(part["text"])
        return chunks

    def complete(self) -> list[Chunk]:
        if self._finish_reason is None:
            raise cut(self.provider, "a finishReason")
        self.done = True
        return self.out.finish(self._usage, hit_max_tokens=self._finish_reason == "MAX_TOKENS")

    def _stopped(self, reason: str, candidate: dict[str, Any]) -> ProviderError:
        blocked = [
            str(r.get("category"))
            for r in candidate.get("safetyRatings") or []
            if isinstance(r, dict) and r.get("blocked")
        ]
        why = STOP_EXPLAINED.get(reason, "Gemini stopped the answer early")
        if blocked:
            why += f" (categories: {', '.join(blocked)})"
        return ProviderError(
            f"{self.provider} stopped the answer (finishReason {reason}): {why}",
            detail=json.dumps(
                {k: candidate.get(k) for k in ("finishReason", "safetyRatings", "finishMessage")}
            ),
            # A malformed call is a fluke of sampling; a filter's verdict is not.
            retryable=reason == "MALFORMED_FUNCTION_CALL",
        )

    def _error(self, error: Any) -> ProviderError:
        error = error if isinstance(error, dict) else {"message": str(error)}
        status = str(error.get("status") or error.get("code") or "error")
        return ProviderError(
            f"{self.provider} stream error ({status}): {error.get('message') or 'unknown error'}",
            detail=json.dumps(error),
            retryable=status in _RETRYABLE_STATUS or as_int(error.get("code")) in (429, 500, 503),
        )


def _usage(usage: dict[str, Any]) -> UsageStatistics:
    cached = as_int(usage.get("cachedContentTokenCount"))
    thoughts = as_int(usage.get("thoughtsTokenCount"))
    return UsageStatistics(Usage(
        # promptTokenCount includes the cached tokens; Usage counts them apart.
        input_tokens=max(0, as_int(usage.get("promptTokenCount")) - cached),
        output_tokens=as_int(usage.get("candidatesTokenCount")) + thoughts,
        cache_read_tokens=cached,
        reasoning_tokens=thoughts,
    ))
