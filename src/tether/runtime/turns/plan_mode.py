"""Entering and leaving plan mode for a session, the same for every frontend: the mode lives in
the session's flags (each send's tool context reads it), and `ExitPlanMode` is registered while
the session may be in plan mode, remembering the mode to go back to when the plan is approved.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tether.tools.exit_plan_mode import NAME, ExitPlanModeTool

if TYPE_CHECKING:
    from tether.runtime.session.prepared import Prepared

PLAN = "plan"


class PlanSwitch:
    """The session's way back out of plan mode (the mode before it; `standard` by default)."""

    def __init__(self, prepared: Prepared) -> None:
        self.prepared = prepared
        self.return_mode = "standard"

    def leave(self) -> str | None:
        flags = self.prepared.flags
        if flags.permission_mode != PLAN:
            return None
        flags.permission_mode = self.return_mode
        return flags.permission_mode


def offer_exit_tool(prepared: Prepared) -> PlanSwitch:
    """Register `ExitPlanMode` for this session (once); its switch back out of plan mode."""
    tool = prepared.registry.get(NAME)
    if isinstance(tool, ExitPlanModeTool) and isinstance(tool.switch, PlanSwitch):
        return tool.switch
    switch = PlanSwitch(prepared)
    registered = ExitPlanModeTool(switch.leave)
    registered.switch = switch
    prepared.registry.register(registered, override=True)
    return switch


def enter_plan_mode(prepared: Prepared) -> None:
    """Switch the session into plan mode; approving the plan returns to the mode it was in."""
    switch = offer_exit_tool(prepared)
    current = prepared.flags.permission_mode
    if current != PLAN:
        switch.return_mode = current
        prepared.flags.permission_mode = PLAN


def set_mode(prepared: Prepared, mode: str) -> None:
    """A frontend's mode change (the TUI's cycle, the SDK's `set_permission_mode`)."""
    if mode == PLAN:
        enter_plan_mode(prepared)
    else:
        prepared.flags.permission_mode = mode
