"""The conversation vocabulary: messages and their parts, as stored and as sent to providers.

The on-disk shape is the reference's pi-ai message shape (`role: user | assistant | toolResult`,
camelCase keys), so transcripts written by tether read like the reference's. Everything inside
the runtime uses these frozen dataclasses; `message_to_dict` / `message_from_dict` are the only
places that know the dict shape.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from tether.errors import ProtocolError
from tether.protocol.tool_calls import ToolCall


@dataclass(frozen=True, slots=True)
class TextPart:
    text: str
    kind: Literal["text"] = "text"


@dataclass(frozen=True, slots=True)
class ThinkingPart:
    thinking: str
    signature: str | None = None  # Anthropic replays thinking only with its signature
    kind: Literal["thinking"] = "thinking"


@dataclass(frozen=True, slots=True)
class ImagePart:
    data: str  # base64
    mime_type: str
    kind: Literal["image"] = "image"



UserPart = TextPart | ImagePart
AssistantPart = TextPart | ThinkingPart | ToolCall
ResultPart = TextPart | ImagePart


@dataclass(frozen=True, slots=True)
class Usage:
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    reasoning_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        return (
            self.input_tokens
            + self.output_tokens
            + self.cache_read_tokens
            + self.cache_write_tokens
        )

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.input_tokens + other.input_tokens,
            self.output_tokens + other.output_tokens,
            self.cache_read_tokens + other.cache_read_tokens,
            self.cache_write_tokens + other.cache_write_tokens,
            self.reasoning_tokens + other.reasoning_tokens,
        )


@dataclass(frozen=True, slots=True)
class UserMessage:
    id: str
    content: tuple[UserPart, ...]
    timestamp: int  # ms since epoch
    otid: str | None = None
    role: Literal["user"] = "user"


@dataclass(frozen=True, slots=True)
class AssistantMessage:
    id: str
    content: tuple[AssistantPart, ...]
    timestamp: int
    api: str = ""
    provider: str = ""
    model: str = ""
    usage: Usage | None = None
    stop_reason: str | None = None  # None: the provider call never finished
    error_message: str | None = None
    role: Literal["assistant"] = "assistant"

    @property
    def tool_calls(self) -> tuple[ToolCall, ...]:
        return tuple(p for p in self.content if isinstance(p, ToolCall))

    @property
    def text(self) -> str:
        return "".join(p.text for p in self.content if isinstance(p, TextPart))


@dataclass(frozen=True, slots=True)
class ToolResultMessage:
    id: str
    tool_call_id: str
    tool_name: str
    content: tuple[ResultPart, ...]
    is_error: bool
    timestamp: int
    role: Literal["toolResult"] = "toolResult"

    @property
    def text(self) -> str:
        return "".join(p.text for p in self.content if isinstance(p, TextPart))


Message = UserMessage | AssistantMessage | ToolResultMessage


# --- dict shape (pi-ai) --------------------------------------------------------------------


def part_to_dict(part: UserPart | AssistantPart) -> dict[str, Any]:
    if isinstance(part, TextPart):
        return {"type": "text", "text": part.text}
    if isinstance(part, ThinkingPart):
        d: dict[str, Any] = {"type": "thinking", "thinking": part.thinking}
        if part.signature is not None:
            d["thinkingSignature"] = part.signature
        return d
    if isinstance(part, ImagePart):
        return {"type": "image", "data": part.data, "mimeType": part.mime_type}
    return {"type": "toolCall", "id": part.id, "name": part.name, "arguments": dict(part.arguments)}


def part_from_dict(d: Any, where: str) -> UserPart | AssistantPart:
    if not isinstance(d, dict):
        raise ProtocolError(f"{where}: content part must be an object, got {type(d).__name__}")
    kind = d.get("type")
    try:
        if kind == "text":
            return TextPart(_str(d, "text", where))
        if kind == "thinking":
            sig = d.get("thinkingSignature")
            return ThinkingPart(_str(d, "thinking", where), sig if isinstance(sig, str) else None)
        if kind == "image":
            return ImagePart(_str(d, "data", where), _str(d, "mimeType", where))
        if kind == "toolCall":
            args = d.get("arguments", {})
            if not isinstance(args, dict):
                raise ProtocolError(f"{where}: toolCall.arguments must be an object")
            return ToolCall(_str(d, "id", where), _str(d, "name", where), args)
    except KeyError as exc:
        raise ProtocolError(
            f"{where}: content part of type {kind!r} lacks {exc.args[0]!r}"
        ) from None
    raise ProtocolError(f"{where}: unknown content part type {kind!r}")


def usage_to_dict(u: Usage) -> dict[str, int]:
    return {
        "input": u.input_tokens,
        "output": u.output_tokens,
        "cacheRead": u.cache_read_tokens,
        "cacheWrite": u.cache_write_tokens,
        "reasoning": u.reasoning_tokens,
        "totalTokens": u.total_tokens,
    }


def usage_wire(u: Usage, steps: int) -> dict[str, int]:
    """Usage under the reference's wire names (usage_statistics, result events, step counts)."""
    return {
        "prompt_tokens": u.input_tokens,
        "completion_tokens": u.output_tokens,
        "total_tokens": u.total_tokens,
        "step_count": steps,
        "cached_input_tokens": u.cache_read_tokens,
        "cache_write_tokens": u.cache_write_tokens,
        "reasoning_tokens": u.reasoning_tokens,
    }


def usage_from_dict(d: Any) -> Usage | None:
    if not isinstance(d, dict):
        return None

    def n(key: str) -> int:
        v = d.get(key, 0)
        return v if isinstance(v, int) else 0

    return Usage(n("input"), n("output"), n("cacheRead"), n("cacheWrite"), n("reasoning"))


def message_to_dict(m: Message) -> dict[str, Any]:
    if isinstance(m, UserMessage):
        d: dict[str, Any] = {
            "role": "user",
            "id": m.id,
            "content": [part_to_dict(p) for p in m.content],
            "timestamp": m.timestamp,
        }
        if m.otid is not None:
            d["otid"] = m.otid
        return d
    if isinstance(m, AssistantMessage):
        d = {
            "role": "assistant",
            "id": m.id,
            "content": [part_to_dict(p) for p in m.content],
            "api": m.api,
            "provider": m.provider,
            "model": m.model,
            "usage": usage_to_dict(m.usage) if m.usage else None,
            "stopReason": m.stop_reason,
            "timestamp": m.timestamp,
        }
        if m.error_message is not None:
            d["errorMessage"] = m.error_message
        return d
    return {
        "role": "toolResult",
        "id": m.id,
        "toolCallId": m.tool_call_id,
        "toolName": m.tool_name,
        "content": [part_to_dict(p) for p in m.content],
        "isError": m.is_error,
        "timestamp": m.timestamp,
    }


def message_from_dict(d: Any, where: str = "message") -> Message:
    """Parse one stored message; `where` names the place in errors (file and line)."""
    if not isinstance(d, dict):
        raise ProtocolError(f"{where}: message must be an object")
    role = d.get("role")
    try:
        mid = _str(d, "id", where)
        ts = d.get("timestamp", 0)
        ts = ts if isinstance(ts, int) else 0
        content = d.get("content", [])
        if isinstance(content, str):  # tolerated: plain-string content
            content = [{"type": "text", "text": content}]
        if not isinstance(content, list):
            raise ProtocolError(f"{where}: content must be a list")
        parts = _parts(content, where)
        if role == "user":
            otid = d.get("otid")
            return UserMessage(
                mid,
                _only(parts, (TextPart, ImagePart), where),
                ts,
                otid if isinstance(otid, str) else None,
            )
        if role == "assistant":
            err = d.get("errorMessage")
            stop = d.get("stopReason")
            return AssistantMessage(
                mid,
                _only(parts, (TextPart, ThinkingPart, ToolCall), where),
                ts,
                api=str(d.get("api", "")),
                provider=str(d.get("provider", "")),
                model=str(d.get("model", "")),
                usage=usage_from_dict(d.get("usage")),
                stop_reason=stop if isinstance(stop, str) else None,
                error_message=err if isinstance(err, str) else None,
            )
        if role == "toolResult":
            return ToolResultMessage(
                mid,
                _str(d, "toolCallId", where),
                str(d.get("toolName", "")),
                _only(parts, (TextPart, ImagePart), where),
                bool(d.get("isError", False)),
                ts,
            )
    except KeyError as exc:
        raise ProtocolError(f"{where}: {role} message lacks {exc.args[0]!r}") from None
    raise ProtocolError(f"{where}: unknown message role {role!r}")


def _parts(content: list[Any], where: str) -> tuple[Any, ...]:
    """Parts of one message; plain text parts (most of any transcript) take a fast path."""
    out: list[Any] = []
    for p in content:
        if type(p) is dict and p.get("type") == "text" and type(p.get("text")) is str:
            out.append(TextPart(p["text"]))
        else:
            out.append(part_from_dict(p, where))
    return tuple(out)


def _str(d: dict[str, Any], key: str, where: str) -> str:
    v = d[key]
    if not isinstance(v, str):
        raise ProtocolError(f"{where}: {key!r} must be a string")
    return v


def _only(parts: tuple[Any, ...], kinds: tuple[type, ...], where: str) -> tuple[Any, ...]:
    for p in parts:
        if not isinstance(p, kinds):
            raise ProtocolError(f"{where}: part of type {p.kind!r} is not allowed in this message")
    return parts
