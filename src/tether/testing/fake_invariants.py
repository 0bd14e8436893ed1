"""What the fake provider refuses, as the real APIs do: tool results that answer no call, calls
left unanswered, and (Chat, llama.cpp's rule) message content that is null.

Each check takes a parsed request body and returns problems in the provider's own words; an
empty list means the request is acceptable.
"""

from __future__ import annotations

from typing import Any


def _blocks(message: Any, kind: str) -> list[dict[str, Any]]:
    content = message.get("content") if isinstance(message, dict) else None
    if not isinstance(content, list):
        return []
    return [b for b in content if isinstance(b, dict) and b.get("type") == kind]


def check_anthropic(body: dict[str, Any]) -> list[str]:
    """Every tool_use is answered in the very next (user) message, which answers nothing else."""
    messages = body.get("messages")
    if not isinstance(messages, list):
        return ["messages: field required (a list of messages)"]
    problems: list[str] = []
    for i, message in enumerate(messages):
        role = message.get("role") if isinstance(message, dict) else None
        if role == "assistant":
            calls = [str(b.get("id")) for b in _blocks(message, "tool_use")]
            following = messages[i + 1] if i + 1 < len(messages) else None
            answered = {str(b.get("tool_use_id")) for b in _blocks(following, "tool_result")}
            missing = [c for c in calls if c not in answered]
            if missing:
                problems.append(
                    f"messages.{i}: `tool_use` ids were found without `tool_result` blocks "
                    f"immediately after: {', '.join(missing)}. Each `tool_use` block must have a "
                    "corresponding `tool_result` block in the next message."
                )
        elif role == "user":
            previous = messages[i - 1] if i > 0 else None
            prev_role = previous.get("role") if isinstance(previous, dict) else None
            known = (
                {str(b.get("id")) for b in _blocks(previous, "tool_use")}
                if prev_role == "assistant"
                else set()
            )
            seen: set[str] = set()
            for block in _blocks(message, "tool_result"):
                result_id = str(block.get("tool_use_id"))
                if result_id not in known:
                    problems.append(
                        f"messages.{i}: unexpected `tool_use_id` found in `tool_result` blocks: "
                        f"{result_id}. Each `tool_result` block must have a corresponding "
                        "`tool_use` block in the previous message."
                    )
                elif result_id in seen:
                    problems.append(
                        f"messages.{i}: duplicate `tool_result` for tool_use_id {result_id}"
                    )
                seen.add(result_id)
    return problems


def check_responses(body: dict[str, Any]) -> list[str]:
    """Every function_call_output answers an earlier function_call; every call gets one output."""
    items = body.get("input")
    if isinstance(items, str):
        return []
    if not isinstance(items, list):
        return ["input: must be a string or a list of input items"]
    problems: list[str] = []
    calls: list[str] = []
    outputs: set[str] = set()
    for i, item in enumerate(items):
        kind = item.get("type") if isinstance(item, dict) else None
        if kind == "function_call":
            calls.append(str(item.get("call_id")))
        elif kind == "function_call_output":
            call_id = str(item.get("call_id"))
            if call_id not in calls:
                problems.append(
                    f"input[{i}]: No tool call found for function call output with call_id {call_id}."
                )
            elif call_id in outputs:
                problems.append(
                    f"input[{i}]: Duplicate function call output for call_id {call_id}."
                )
            outputs.add(call_id)
    problems += [f"No tool output found for function call {c}." for c in calls if c not in outputs]
    return problems


def check_chat(body: dict[str, Any]) -> list[str]:
    """Tool messages answer the assistant tool_calls right before them; no content is null."""
    messages = body.get("messages")
    if not isinstance(messages, list):
        return ["messages: field required (a list of messages)"]
    problems: list[str] = []
    open_calls: list[str] = []
    answered: set[str] = set()

    def close(at: str) -> None:
        missing = [c for c in open_calls if c not in answered]
        if missing:
            problems.append(
                f"{at}: an assistant message with 'tool_calls' must be followed by tool messages "
                f"responding to each 'tool_call_id'. The following tool_call_ids did not have "
                f"response messages: {', '.join(missing)}"
            )

    for i, message in enumerate(messages):
        if not isinstance(message, dict):
            problems.append(f"messages[{i}]: must be an object")
            continue
        role = message.get("role")
        if message.get("content") is None:
            problems.append(
                f"messages[{i}]: 'content' of the {role} message is null or missing "
                '(llama.cpp rejects it; send "")'
            )
        if role == "tool":
            call_id = str(message.get("tool_call_id"))
            if call_id not in open_calls:
                problems.append(
                    f"messages[{i}]: role 'tool' answers unknown tool_call_id {call_id}; it must "
                    "respond to a tool call of the preceding assistant message"
                )
            elif call_id in answered:
                problems.append(f"messages[{i}]: duplicate tool message for tool_call_id {call_id}")
            answered.add(call_id)
            continue
        close(f"messages[{i}]")
        calls = message.get("tool_calls") if role == "assistant" else None
        open_calls = (
            [str(c.get("id")) for c in calls if isinstance(c, dict)]
            if isinstance(calls, list)
            else []
        )
        answered = set()
    close("messages")
    return problems


CHECKS = {"anthropic": check_anthropic, "responses": check_responses, "chat": check_chat}
