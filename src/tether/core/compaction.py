"""Compaction planning (reference §4.6, §16): when a conversation must shrink, and what to keep.

Pure: estimates, thresholds, plans and the summariser's request text. The local backend runs
the plan (`backends/local/compaction.py`): one tool-less summary call, then a `compaction`
transcript entry. Invariant every plan keeps: a tool call and its result are on the same side
of the cut, so no history sent to a provider ever holds an unanswered call or an orphan result.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import orjson

from tether.protocol.messages import (
    AssistantMessage,
    ImagePart,
    Message,
    TextPart,
    ThinkingPart,
    ToolResultMessage,
    UserMessage,
)
from tether.protocol.tool_calls import ToolCall

Trigger = Literal["manual", "context_window_limit", "context_window_overflow"]
Mode = Literal["sliding_window", "all"]

IMAGE_TOKENS = 1200
TOOL_RESULT_CLIP = 2000  # characters of each tool result the summariser sees
DEFAULT_SLIDING_PERCENTAGE = 0.3
DEFAULT_CLIP_CHARS = 50_000
# On overflow the summariser is retried with the transcript cut in the middle to these sizes.
TRUNCATION_LEVELS = (120_000, 90_000, 60_000, 40_000, 25_000, 15_000, 10_000, 6_000, 4_000, 2_000)
MAX_COMPACTIONS_PER_TURN = 3


def threshold(window: int) -> int:
    """The context size past which a conversation is compacted before the next call."""
    return window - min(16384, max(1, window // 5))


def message_tokens(message: Message) -> int:
    chars = 0
    images = 0
    for part in message.content:
        if isinstance(part, ImagePart):
            images += 1
        elif isinstance(part, TextPart):
            chars += len(part.text)
        elif isinstance(part, ThinkingPart):
            chars += len(part.thinking)
        elif isinstance(part, ToolCall):
            chars += len(part.name) + len(orjson.dumps(part.arguments))
    return math.ceil(chars / 4) + images * IMAGE_TOKENS


def estimate(system: str, messages: Sequence[Message], tools_json: str = "") -> int:
    """chars/4 (images 1200), anchored on the newest assistant usage when there is one: the
    provider's own count of everything up to that reply, plus what came after it."""
    for index in range(len(messages) - 1, -1, -1):
        message = messages[index]
        if isinstance(message, AssistantMessage) and message.usage and message.usage.total_tokens:
            trailing = sum(message_tokens(m) for m in messages[index + 1 :])
            return message.usage.total_tokens + trailing
        if _is_summary(message):
            break  # usage from before a compaction counts what is gone
    return (
        math.ceil((len(system) + len(tools_json)) / 4)
        + sum(message_tokens(m) for m in messages)
    )


def _is_summary(message: Message) -> bool:
    if not isinstance(message, UserMessage) or len(message.content) != 1:
        return False
    part = message.content[0]
    return isinstance(part, TextPart) and part.text.startswith('{"type":"system_alert"')


@dataclass(frozen=True, slots=True)
class Plan:
    mode: Mode
    evicted: tuple[Message, ...]  # summarised and dropped from the context
    kept: tuple[Message, ...]  # stay verbatim after the summary


def _pending_call(message: Message) -> bool:
    return isinstance(message, AssistantMessage) and bool(message.tool_calls)


def plan_all(messages: Sequence[Message]) -> Plan:
    """Summarise everything, keeping only a trailing assistant whose tool calls await results."""
    if messages and _pending_call(messages[-1]):
        return Plan("all", tuple(messages[:-1]), (messages[-1],))
    return Plan("all", tuple(messages), ())


def plan_sliding(
    messages: Sequence[Message], window: int, percentage: float = DEFAULT_SLIDING_PERCENTAGE
) -> Plan:
    """Evict the oldest share of the conversation, cutting just before an assistant message (so
    every tool call keeps its results); grow the share by 0.1 until what is kept fits in
    (1 - share) of the window; fall back to `all` when no cut works."""
    if len(messages) < 4:
        return plan_all(messages)
    last = len(messages) - (2 if _pending_call(messages[-1]) else 1)
    cuts = [i for i in range(1, last) if isinstance(messages[i], AssistantMessage)]
    cuts = [i for i in cuts if _answers_complete(messages, i)]
    if not cuts:
        return plan_all(messages)
    total = sum(message_tokens(m) for m in messages)
    share = percentage
    while share <= 1.0 + 1e-9:
        target = total * share
        evicted = 0
        cut = None
        for i in cuts:
            evicted = sum(message_tokens(m) for m in messages[:i])
            cut = i
            if evicted >= target:
                break
        if cut is not None:
            kept = messages[cut:]
            if sum(message_tokens(m) for m in kept) < (1 - min(share, 0.99)) * window:
                return Plan("sliding_window", tuple(messages[:cut]), tuple(kept))
        share += 0.1
    return plan_all(messages)


def _answers_complete(messages: Sequence[Message], cut: int) -> bool:
    """No tool result at or after `cut` answers a call made before it."""
    before = {c.id for m in messages[:cut] if isinstance(m, AssistantMessage) for c in m.tool_calls}
    return not any(
        isinstance(m, ToolResultMessage) and m.tool_call_id in before for m in messages[cut:]
    )


def paired(messages: Sequence[Message]) -> bool:
    """Every tool result answers an earlier call, and every call but a trailing one's is answered."""
    open_calls: set[str] = set()
    for index, message in enumerate(messages):
        if isinstance(message, AssistantMessage):
            if open_calls:
                return False
            open_calls = {c.id for c in message.tool_calls}
            if index == len(messages) - 1:
                return True
        elif isinstance(message, ToolResultMessage):
            if message.tool_call_id not in open_calls:
                return False
            open_calls.discard(message.tool_call_id)
    return not open_calls


# -- the summariser's request ----------------------------------------------------------------

SLIDING_PROMPT = """\
You are summarising the earlier part of a conversation between a user and a coding agent so the \
agent can continue without it. Write in the first person, as the agent, at most 300 words, with \
these sections:
1. Goal: what the user asked for and why.
2. Progress: what I did, the files and commands involved, and their results.
3. Decisions: choices made and constraints learned.
4. Open items: what is unfinished or pending.
5. Facts to keep: names, paths, values and errors I will need again."""

ALL_PROMPT = """\
You are summarising a whole conversation between a user and a coding agent so the agent can \
continue from the summary alone. Write in the first person, as the agent, at most 500 words, \
with these sections:
1. Goal: what the user asked for and why.
2. Context: the project, its layout and conventions as I learned them.
3. Progress: what I did, the files and commands involved, and their results.
4. Decisions: choices made and why.
5. Problems: errors met and how they were resolved, or not.
6. Open items: what is unfinished or pending, and the next step.
7. Facts to keep: names, paths, values and identifiers I will need again."""

NO_MESSAGES = "No prior conversation messages."


def render_transcript(messages: Sequence[Message]) -> str:
    """The conversation as the summariser reads it: roles, text, tool calls, clipped results."""
    lines: list[str] = []
    for message in messages:
        if isinstance(message, UserMessage):
            text = "".join(p.text if isinstance(p, TextPart) else "[image]" for p in message.content)
            lines.append(f"[user]\n{text}")
        elif isinstance(message, AssistantMessage):
            for part in message.content:
                if isinstance(part, TextPart) and part.text:
                    lines.append(f"[assistant]\n{part.text}")
                elif isinstance(part, ToolCall):
                    args = orjson.dumps(part.arguments).decode()
                    lines.append(f"[tool call {part.name}]\n{args}")
        elif isinstance(message, ToolResultMessage):
            text = message.text
            if len(text) > TOOL_RESULT_CLIP:
                text = text[:TOOL_RESULT_CLIP] + f"\n… [{len(message.text) - TOOL_RESULT_CLIP} more characters]"
            status = "error" if message.is_error else "result"
            lines.append(f"[tool {status} {message.tool_name}]\n{text}")
    return "\n\n".join(lines) if lines else NO_MESSAGES


def truncate_middle(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    marker = "\n\n… [middle of the conversation omitted to fit] …\n\n"
    keep = max(0, limit - len(marker))
    head = keep // 2
    return text[:head] + marker + text[len(text) - (keep - head) :]


def clip_summary(summary: str, clip_chars: int | None) -> str:
    if clip_chars is None or len(summary) <= clip_chars:
        return summary
    suffix = "... [summary truncated to fit]"
    return summary[: max(0, clip_chars - len(suffix))] + suffix


def summary_text(summary: str, stats: dict[str, object], time: str) -> str:
    """The text of the message that stands in for the evicted history."""
    note = (
        "Note: prior messages have been hidden from view to fit the context window. "
        f"The following is a summary of them:\n{summary}"
    )
    return orjson.dumps(
        {"type": "system_alert", "message": note, "time": time, "compaction_stats": stats}
    ).decode()
