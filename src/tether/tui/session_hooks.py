"""The hooks only an interactive session runs (reference §9): SessionStart, UserPromptSubmit, Stop
and SessionEnd, over the session's settings `HookRunner`.

Allowing hooks' stdout becomes context for the model (a `<system-reminder>` part of the next user
message); a blocking hook's feedback stops the prompt (UserPromptSubmit) or becomes the next
prompt (Stop); hook errors are shown and otherwise ignored. Claude Code's JSON output counts
too: `additionalContext` is the context (the JSON itself never is), `decision: "block"` blocks,
and `continue: false` keeps a prompt from the model or ends a Stop without continuing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tether.protocol.messages import TextPart


def reminder(event: str, text: str) -> TextPart:
    return TextPart(f"<system-reminder>\n{event} hook says:\n{text.strip()}\n</system-reminder>")


@dataclass(slots=True)
class HookOutcome:
    blocked: str | None = None  # the feedback of the hook that blocked
    context: list[TextPart] = field(default_factory=list)  # for the model
    notices: list[tuple[str, str]] = field(default_factory=list)  # (text, kind) for the transcript


class SessionHooks:
    def __init__(self, runner: Any) -> None:  # runtime.hooks.HookRunner | None
        self.runner = runner

    def _has(self, event: str) -> bool:
        return self.runner is not None and bool(self.runner.config.commands(event))

    async def _sequential(self, event: str, **fields: Any) -> HookOutcome:
        out = HookOutcome()
        if not self._has(event):
            return out
        for r in await self.runner.run_sequential(event, self.runner.payload(event, **fields)):
            if r.output.stop_reason is not None:  # Claude Code's `continue: false`
                if event == "UserPromptSubmit":  # the prompt is not sent; a Stop just ends
                    out.blocked = f"[{r.command}]: {r.output.stop_reason}"
                out.notices.append((f"{event} hook stopped: {r.output.stop_reason}", "error"))
                return out
            if r.decision == "block":
                out.blocked = r.feedback
                return out
            if r.decision == "error":
                out.notices.append((r.feedback, "error"))
            elif r.context:  # additionalContext, or plain stdout (never the hook's JSON itself)
                out.context.append(reminder(event, r.context))
                out.notices.append((f"{event} hook: {r.context}", "dim"))
        return out

    async def session_start(self, *, is_new: bool, agent_name: str) -> HookOutcome:
        out = await self._sequential("SessionStart", is_new_session=is_new, agent_name=agent_name)
        if out.blocked:  # SessionStart cannot block: its feedback is only shown
            out.notices.append((out.blocked, "error"))
            out.blocked = None
        return out

    async def prompt_submit(self, prompt: str) -> HookOutcome:
        out = await self._sequential("UserPromptSubmit", prompt=prompt, is_command=False)
        out.notices = [n for n in out.notices if n[1] == "error"]  # the context goes to the model
        return out

    async def stop(self, *, stop_reason: str, tool_call_count: int, assistant_message: str,
                   user_message: str, active: bool) -> HookOutcome:
        out = await self._sequential(
            "Stop", stop_reason=stop_reason, tool_call_count=tool_call_count,
            assistant_message=assistant_message, user_message=user_message, stop_hook_active=active,
        )
        out.context, out.notices = [], [n for n in out.notices if n[1] == "error"]
        return out

    async def session_end(self) -> None:
        if self._has("SessionEnd"):
            await self.runner.run_parallel("SessionEnd", self.runner.payload("SessionEnd"))
