"""The settlement of tool calls an interrupted turn left open (reference §4.4 step 1): what to
drop from the view and which error results to append, so every call has exactly one result."""

from __future__ import annotations

import time
from collections.abc import Sequence

from tether.protocol.messages import AssistantMessage, Message, ToolResultMessage
from tether.protocol.tool_calls import ToolCall, ToolReturn


def settle_orphaned_tool_calls(
    messages: Sequence[Message], reason: str = "Turn did not complete"
) -> tuple[list[Message], list[Message]]:
    """Close what an interrupted turn left open. Returns (messages to keep, results to append).

    A trailing assistant message without a stop reason never finished: it is dropped (the
    caller records that with `Transcript.rollback`). Then every tool call with no later tool
    result gets an error result whose text is `reason` (`Interrupted by user` after an
    interrupt), in call order, so every call has exactly one result.
    """
    kept = list(messages)
    last = kept[-1] if kept else None
    if isinstance(last, AssistantMessage) and last.stop_reason is None:
        kept.pop()
    answered: set[str] = set()
    unanswered: list[ToolCall] = []
    for message in reversed(kept):
        if isinstance(message, ToolResultMessage):
            answered.add(message.tool_call_id)
        elif isinstance(message, AssistantMessage):
            for call in reversed(message.tool_calls):
                if call.id not in answered:
                    answered.add(call.id)
                    unanswered.append(call)
    unanswered.reverse()
    now = int(time.time() * 1000)
    results: list[Message] = [
        ToolReturn(call.id, call.name, reason, True).to_message(now) for call in unanswered
    ]
    return kept, results
