"""Plan mode's half of `decide` (Claude Code's `plan` permission mode): the model may look but
not touch until the user approves its plan.

In plan mode a call is judged as in `standard` mode with no allow rule of any kind, and then only
what reads is let through: the read tools (inside the workspace; outside they ask, as in
standard), the read-only shell commands that run confined, MCP tools marked read-only, skills,
conversation-state tools (todos, task output) and the history-reading subagents. Everything else
— edits, writes, any other shell command, other MCP tools, memory writes — is denied with a reason
that names plan mode and the way out: `ExitPlanMode(plan)`, which always asks (its approval is the
user's yes to the plan; the tool then switches the mode back). Deny rules still deny.
"""

from __future__ import annotations

from dataclasses import replace

from tether.core.permissions.checker import (
    DEFAULT_ALLOWED,
    READ_ONLY_SUBAGENTS,
    Call,
    Policy,
    RuleSet,
    decide,
)
from tether.core.permissions.modes import Decision
from tether.core.permissions.rules import READ_FAMILIES, SHELL_FAMILY, canonical_tool_name

EXIT_PLAN_MODE = "ExitPlanMode"
# Conversation-state tools that stay usable while planning (memory writes do not).
PLAN_STATE_TOOLS = DEFAULT_ALLOWED - {"memory", "memory_apply_patch"}
PLAN_DENIAL = ("Permission denied: plan mode allows only read-only tools ({tool} is not one); "
               "finish the plan and call ExitPlanMode with it to ask the user to approve it")


def decide_in_plan_mode(call: Call, policy: Policy) -> Decision:
    family = canonical_tool_name(call.tool)
    if call.tool == EXIT_PLAN_MODE:
        return Decision("ask", "leaving plan mode needs the user's approval of the plan",
                        sticky=True)
    rules = policy.rules
    only_limits = RuleSet(deny=rules.deny, cli_deny=rules.cli_deny, always_ask=rules.always_ask,
                          ask=rules.ask)
    judged = decide(call, replace(policy, mode="standard", rules=only_limits))
    if judged.verdict == "deny":
        return judged
    reads = (
        family in READ_FAMILIES or family == "Skill" or family in PLAN_STATE_TOOLS
        or call.read_only_hint
        or (family == "Task" and call.args.get("subagent_type") in READ_ONLY_SUBAGENTS)
        or (family == SHELL_FAMILY and judged.verdict == "allow" and judged.confine)
    )
    if not reads or call.external:
        return Decision("deny", PLAN_DENIAL.format(tool=call.tool))
    return judged
