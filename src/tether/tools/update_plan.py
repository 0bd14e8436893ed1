"""The UpdatePlan tool (`update_plan` in codex_snake): Codex's step list, replaced on every call.

The plan lives in `ctx.services.plan` when the runtime provides a mutable sequence there (a
frontend can render it), otherwise on the tool instance, like TodoWrite's list.
"""

from __future__ import annotations

from collections.abc import Mapping, MutableSequence
from pathlib import Path
from typing import Any

from tether.core.tools import Effect, ToolResult, ToolRunContext
from tether.errors import ToolFailure
from tether.tools.arguments import checked_text, optional_str
from tether.tools.output import error_result

PLAN_STATUSES = ("pending", "in_progress", "completed")

DESCRIPTION = """\
Updates the task plan: a short list of steps, each pending, in_progress or completed (at most \
one in_progress). Each call replaces the whole plan. Skip it for single-step work."""

PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "explanation": {"type": "string"},
        "plan": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "step": {"type": "string"},
                    "status": {"type": "string", "enum": list(PLAN_STATUSES)},
                },
                "required": ["step", "status"],
                "additionalProperties": False,
            },
        },
    },
    "required": ["plan"],
    "additionalProperties": False,
}


def parse_plan(value: object) -> list[dict[str, str]]:
    if not isinstance(value, list):
        raise ToolFailure(
            f"Argument `plan` must be a list of {{step, status}} objects, got {type(value).__name__}."
        )
    plan: list[dict[str, str]] = []
    for index, item in enumerate(value):
        if not isinstance(item, Mapping):
            raise ToolFailure(f"plan[{index}] must be an object, got {type(item).__name__}.")
        step = item.get("step")
        if not isinstance(step, str) or not step.strip():
            raise ToolFailure(f"plan[{index}].step must be a non-empty string.")
        checked_text(f"plan[{index}].step", step)
        status = item.get("status")
        if status not in PLAN_STATUSES:
            raise ToolFailure(
                f"plan[{index}].status must be one of {', '.join(PLAN_STATUSES)}, got {status!r}."
            )
        plan.append({"step": step, "status": str(status)})
    if sum(1 for s in plan if s["status"] == "in_progress") > 1:
        raise ToolFailure("At most one step may be in_progress at a time.")
    return plan


class UpdatePlanTool:
    description = DESCRIPTION
    parameters = PARAMETERS
    effect = Effect.READ

    def __init__(self, name: str = "UpdatePlan") -> None:
        self.name = name
        self.plan: list[dict[str, str]] = []

    def paths(self, args: Mapping[str, Any], cwd: Path) -> list[Path]:
        return []

    async def run(self, args: Mapping[str, Any], ctx: ToolRunContext) -> ToolResult:
        try:
            plan = parse_plan(args.get("plan"))
            optional_str(args, "explanation", max_chars=10_000)
        except ToolFailure as exc:
            return error_result(str(exc))
        holder = ctx.services.plan
        if isinstance(holder, MutableSequence):
            holder[:] = plan
        else:
            self.plan = plan
        return ToolResult("Plan updated")
