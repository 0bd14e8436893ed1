"""Approval classification: for each proposed tool call, parse it, check it, and sort it.

Every call the model proposes ends up in exactly one bucket: auto-allowed (run it), auto-denied
(answer with a denial), or needs-input (ask an `Approver`). Nothing here runs a tool.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from tether.core.permissions import Decision
from tether.core.tools import Tool, ToolContext
from tether.protocol.chunks import ToolCallRequest


@dataclass(frozen=True, slots=True)
class Classified:
    call: ToolCallRequest
    tool: Tool | None  # None: the name is unknown (executing it reports "Tool not found")
    args: dict[str, Any]
    decision: Decision

    @property
    def verdict(self) -> str:
        return self.decision.verdict


DecideFn = Callable[[Tool, Mapping[str, Any], ToolContext], Decision]


def parse_arguments(raw: str) -> tuple[dict[str, Any], str | None]:
    """Arguments as a dict, plus why they were unusable (None when they parsed to an object)."""
    if not raw.strip():
        return {}, "the arguments were empty"
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return {}, "the arguments were not valid JSON"
    if not isinstance(value, dict):
        return {}, "the arguments were not a JSON object"
    return value, None


def missing_required(tool: Tool, args: Mapping[str, Any]) -> list[str]:
    required = tool.parameters.get("required", [])
    return [name for name in required if name not in args or args[name] is None]


def classify_approvals(
    calls: list[ToolCallRequest], ctx: ToolContext, decide: DecideFn
) -> list[Classified]:
    out: list[Classified] = []
    for call in calls:
        if not call.name:
            out.append(
                Classified(call, None, {}, Decision("deny", "Tool call incomplete - missing name"))
            )
            continue
        tool = ctx.tools.get(call.name)
        args, bad = parse_arguments(call.arguments)
        if tool is None:
            out.append(Classified(call, None, args, Decision("allow", "unknown tool: report it")))
            continue
        missing = missing_required(tool, args)
        if missing:
            out.append(
                Classified(
                    call, tool, args, Decision("deny", _missing_message(tool, missing, args, bad))
                )
            )
            continue
        out.append(Classified(call, tool, args, decide(tool, args, ctx)))
    return out


def _missing_message(
    tool: Tool, missing: list[str], args: Mapping[str, Any], bad: str | None
) -> str:
    received = ", ".join(sorted(args)) or "none"
    msg = (
        f"Invalid arguments for {tool.name}: missing required parameter(s): {', '.join(missing)}. "
        f"Received parameters: {received}."
    )
    if bad is not None:
        msg += f" Note: {bad}; do not resend the same call unchanged."
    return msg
