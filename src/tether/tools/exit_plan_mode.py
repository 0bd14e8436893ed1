"""`ExitPlanMode(plan)`: the model, in plan mode, hands the user its plan. The permission check
always asks (`core/permissions/plan.py`): the user's yes is the approval of the plan, and only then
does the tool run and switch the session out of plan mode through the callback it was made with.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from tether.core.tools import Effect, ToolResult, ToolRunContext

NAME = "ExitPlanMode"
DESCRIPTION = (
    "Use in plan mode when the plan is ready: pass the whole plan (markdown) as `plan`. The user "
    "is asked to approve it; once approved, plan mode ends and you carry out the plan. Do not "
    "use it for research questions, or outside plan mode."
)
PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {"plan": {"type": "string", "description": "The plan to carry out, in markdown"}},
    "required": ["plan"],
    "additionalProperties": False,
}


class ExitPlanModeTool:
    name = NAME
    description = DESCRIPTION
    parameters = PARAMETERS
    effect = Effect.READ  # changes no file: the session's mode only

    def __init__(self, leave: Callable[[], str | None]) -> None:
        # Switches the session out of plan mode: the mode it is in now, or None when it was not
        # in plan mode.
        self.leave = leave
        self.switch: object = None  # the owner of `leave`, for whoever registered the tool

    def paths(self, args: Mapping[str, Any], cwd: Path) -> list[Path]:
        return []

    async def run(self, args: Mapping[str, Any], ctx: ToolRunContext) -> ToolResult:
        plan = args.get("plan")
        if not isinstance(plan, str) or not plan.strip():
            return ToolResult("Argument `plan` must be the plan, as a non-empty string", is_error=True)
        mode = self.leave()
        if mode is None:
            return ToolResult("Not in plan mode: there is no plan to approve; go ahead",
                              is_error=True)
        return ToolResult(f"The user approved the plan. Permission mode is now {mode}: carry the "
                          "plan out.")
