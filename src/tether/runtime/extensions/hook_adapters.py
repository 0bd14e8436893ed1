"""The settings hooks as the turn engine sees them: PreToolUse/PostToolUse around a tool call and
PermissionRequest while a call is still `ask`, with Claude Code's JSON decisions honoured.

Never fail open: a PreToolUse hook that errs or denies (exit 2 or JSON) blocks the call; a
PermissionRequest hook approves only by saying so (`decision.behavior: "allow"`), so a notifier
that exits 0 approves nothing. `continue: false` from any tool hook stops the session's tool
calls: the call is blocked and so is every later one, with the hook's stopReason.

PreToolUse runs after tether's permission decision (the call is already admitted), so a hook's
`allow` adds nothing and can never lift a deny; its `ask` goes to whoever answers approvals (the
TUI, the SDK's `can_use_tool`, an App Server client), and where nobody can answer (one-shot
headless) the call is not run.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tether.runtime.extensions.hooks import HookResult, HookRunner

STOPPED = "Tool execution stopped: a hook ended this session ({reason})."


class SessionToolHooks:
    """PreToolUse / PostToolUse / PostToolUseFailure for the turn engine (`core.execution.ToolHooks`)."""

    def __init__(self, runner: HookRunner) -> None:
        self.runner = runner
        self._context: dict[str, str] = {}  # tool_call_id -> PreToolUse additionalContext

    async def before(self, call: Any) -> Any:
        from tether.core.execution import PreToolVerdict

        if self.runner.stopped is not None:
            return PreToolVerdict(blocked=STOPPED.format(reason=self.runner.stopped))
        payload = self.runner.payload(
            "PreToolUse", tool_name=call.name, tool_input=dict(call.args),
            tool_call_id=call.tool_call_id, tool_use_id=call.tool_call_id,
        )
        updated: dict[str, Any] = {}
        notes: list[str] = []
        for result in await self.runner.run_sequential("PreToolUse", payload, call.name):
            if result.output.stop_reason is not None:
                self.runner.stopped = result.output.stop_reason
                return PreToolVerdict(blocked=STOPPED.format(reason=result.output.stop_reason))
            if result.decision != "allow":  # block, or an error: a broken guard must not fail open
                return PreToolVerdict(blocked=result.feedback)
            if result.output.verdict == "ask":  # the approver is asked (headless: not run)
                why = result.output.context or "the hook asked for approval"
                return PreToolVerdict(ask=f"[{result.command}]: {why}")
            if result.output.updated_input is not None:
                updated.update(result.output.updated_input)
            if result.output.context:
                notes.append(result.output.context)
        if notes:
            self._context[call.tool_call_id] = "\n".join(notes)
        return PreToolVerdict(updated_args=updated or None)

    async def after(self, call: Any, result: Any) -> str | None:
        failed = result.is_error
        event = "PostToolUseFailure" if failed else "PostToolUse"
        fields: dict[str, Any] = {"tool_name": call.name, "tool_input": dict(call.args),
                                  "tool_call_id": call.tool_call_id, "tool_use_id": call.tool_call_id}
        if failed:
            fields["error_message"] = fields["error"] = result.output
        else:
            fields["tool_result"] = fields["tool_response"] = {"status": result.status, "output": result.output}
        notes: list[str] = []
        if early := self._context.pop(call.tool_call_id, None):
            notes.append(early)
        for r in await self.runner.run_parallel(event, self.runner.payload(event, **fields), call.name):
            if r.output.context:
                notes.append(r.output.context)
            if r.decision != "allow":
                notes.append(r.feedback)
            if r.output.stop_reason is not None and self.runner.stopped is None:
                self.runner.stopped = r.output.stop_reason
                notes.append(f"[{r.command}]: stopped the session: {r.output.stop_reason}")
        return "\n".join(notes) or None


class SessionPermissionHooks:
    """PermissionRequest hooks: exit 2 or a JSON deny denies; only a JSON allow allows."""

    def __init__(self, runner: HookRunner) -> None:
        self.runner = runner

    async def decide(self, item: Any) -> tuple[str, str] | None:
        call = item.call
        if self.runner.stopped is not None:
            return "deny", STOPPED.format(reason=self.runner.stopped)
        if not self.runner.config.commands("PermissionRequest", call.name):
            return None
        payload = self.runner.payload(
            "PermissionRequest", tool_name=call.name, tool_input=item.args,
            tool_call_id=item.tool_call_id, tool_use_id=item.tool_call_id,
            permission={"type": "tool", "scope": call.name},
        )
        results = await self.runner.run_sequential("PermissionRequest", payload, call.name)
        for r in results:
            if r.output.stop_reason is not None or r.output.interrupt:
                reason = r.output.stop_reason or r.output.block_reason or "interrupted by a hook"
                self.runner.stopped = reason
                return "deny", f"[{r.command}]: {reason}"
            if r.decision == "block":
                return "deny", r.feedback
        if _explicit_allow(results):
            return "allow", "allowed by a PermissionRequest hook"
        return None  # no decision, or a failing hook: the call stays `ask`


def _explicit_allow(results: list[HookResult]) -> bool:
    """Every hook exited cleanly, none errored, and at least one said `behavior: "allow"`
    without rewriting the input (the approver, not a hook, admits a rewritten call)."""
    if not results or any(r.decision != "allow" for r in results):
        return False
    if any(r.output.updated_input is not None for r in results):
        return False
    return any(r.output.verdict == "allow" for r in results)
