"""Stored messages (the transcript's pi-ai shape) as Letta API messages, for clients that read
Letta's shape (`message_type` user_message, reasoning_message, assistant_message,
tool_call_message, tool_return_message), with the field names tether's stream-json uses.

One stored message may become several Letta messages (an assistant turn with thinking, text
and two tool calls is four); each gets a stable id derived from the stored one.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import orjson

from tether.protocol.messages import (
    AssistantMessage,
    ImagePart,
    Message,
    TextPart,
    ThinkingPart,
    UserMessage,
)
from tether.protocol.tool_calls import ToolCall


def letta_messages(messages: Sequence[Message]) -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    for m in messages:
        date = _iso(m.timestamp)
        if isinstance(m, UserMessage):
            item: dict[str, Any] = {"message_type": "user_message", "id": m.id, "date": date,
                                    "content": _user_content(m)}
            if m.otid is not None:
                item["otid"] = m.otid
            out.append(item)
        elif isinstance(m, AssistantMessage):
            for i, part in enumerate(m.content):
                ident = m.id if i == 0 else f"{m.id}-{i}"
                if isinstance(part, TextPart):
                    out.append({"message_type": "assistant_message", "id": ident, "date": date,
                                "content": part.text})
                elif isinstance(part, ThinkingPart):
                    out.append({"message_type": "reasoning_message", "id": ident, "date": date,
                                "reasoning": part.thinking})
                elif isinstance(part, ToolCall):
                    out.append({"message_type": "tool_call_message", "id": ident, "date": date,
                                "tool_call": {"name": part.name, "tool_call_id": part.id,
                                              "arguments": orjson.dumps(part.arguments).decode()}})
        else:
            text = "".join(p.text for p in m.content if isinstance(p, TextPart))
            out.append({"message_type": "tool_return_message", "id": m.id, "date": date,
                        "tool_call_id": m.tool_call_id, "name": m.tool_name,
                        "status": "error" if m.is_error else "success", "tool_return": text})
    return out


def _user_content(m: UserMessage) -> str | list[dict[str, Any]]:
    """Plain text when the message is all text (Letta's common case), else typed parts."""
    if all(isinstance(p, TextPart) for p in m.content):
        return "".join(p.text for p in m.content if isinstance(p, TextPart))
    parts: list[dict[str, Any]] = []
    for p in m.content:
        if isinstance(p, TextPart):
            parts.append({"type": "text", "text": p.text})
        elif isinstance(p, ImagePart):
            parts.append({"type": "image", "source": {"type": "base64", "media_type": p.mime_type,
                                                      "data": p.data}})
    return parts


def _iso(ms: int) -> str:
    return datetime.fromtimestamp(ms / 1000, UTC).isoformat().replace("+00:00", "Z")
