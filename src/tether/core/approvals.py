"""Approval classification: for each proposed tool call, check it and sort it into a JudgedCall.

Every call the model proposes ends up in exactly one bucket: auto-allowed (run it), auto-denied
(answer with a denial), or needs-input (ask an `Approver`). Nothing here runs a tool.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from tether.core.permissions import Decision
from tether.core.tools import Tool, ToolContext
from tether.protocol.tool_calls import ToolCall


@dataclass(frozen=True, slots=True)
class JudgedCall:
    """A proposed call and what was decided about it: the one shape classification, approvers,
    hooks, execution and checkpoints share.

    `args` is what runs: the call's own arguments, or what an approver or a hook changed them
    to (the `ToolCall` itself never changes). `confined`: admitted only by the read-only
    auto-allow, so it runs kernel-confined.
    """

    call: ToolCall
    tool: Tool | None  # None: the name is unknown (executing it reports "Tool not found")
    decision: Decision
    args: Mapping[str, Any]
    confined: bool = False

    @classmethod
    def of(cls, call: ToolCall, tool: Tool | None, decision: Decision) -> JudgedCall:
        """The call as proposed, with its own arguments."""
        return cls(call, tool, decision, call.arguments)

    @property
    def verdict(self) -> str:
        return self.decision.verdict

    @property
    def tool_call_id(self) -> str:
        return self.call.id

    @property
    def name(self) -> str:
        return self.call.name

    @property
    def judged(self) -> tuple[str, ...]:
        """The real paths the decision judged (Decision.judged)."""
        return self.decision.judged


DecideFn = Callable[[Tool, Mapping[str, Any], ToolContext], Decision]


def missing_required(tool: Tool, args: Mapping[str, Any]) -> list[str]:
    required = tool.parameters.get("required", [])
    return [name for name in required if name not in args or args[name] is None]


def classify_approvals(
    calls: list[ToolCall], ctx: ToolContext, decide: DecideFn
) -> list[JudgedCall]:
    out: list[JudgedCall] = []
    for call in calls:
        if not call.name:
            out.append(
                JudgedCall.of(call, None, Decision("deny", "Tool call incomplete - missing name"))
            )
            continue
        tool = ctx.tools.get(call.name)
        if tool is None:
            out.append(JudgedCall.of(call, None, Decision("allow", "unknown tool: report it")))
            continue
        missing = missing_required(tool, call.arguments)
        if missing:
            why = _missing_message(tool, missing, call.arguments, call.error)
            out.append(JudgedCall.of(call, tool, Decision("deny", why)))
            continue
        out.append(JudgedCall.of(call, tool, decide(tool, call.arguments, ctx)))
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
