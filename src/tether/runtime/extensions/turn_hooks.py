"""The session hooks around turns — SessionStart, UserPromptSubmit, Stop, SessionEnd — read the
same way for every frontend (the TUI, headless `-p`, the SDK's stream-json session), each run
through the session's one `HookRunner` (`runtime/extensions/hooks.py`). A session starts before its first
prompt (SessionStart's context goes with that prompt) and ends before the run shuts down.

What a frontend does with the answer: allowing hooks' context goes to the model (a
`<system-reminder>` part of the user message); a UserPromptSubmit block keeps the prompt from the
model; a Stop block's feedback becomes the next user message of the same run, with
`stop_hook_active` true on the Stop that follows it, at most `MAX_STOP_CONTINUATIONS` times in a
row; hook errors are notices and otherwise ignored. Claude Code's JSON output counts too:
`additionalContext` is the context (the JSON itself never is), `decision: "block"` blocks, and
`continue: false` keeps a prompt from the model or ends a Stop without continuing.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from tether.protocol.messages import TextPart

if TYPE_CHECKING:
    from tether.runtime.extensions.hooks import HookResult, HookRunner
    from tether.runtime.session.prepared import Prepared

MAX_STOP_CONTINUATIONS = 3  # a Stop hook that keeps blocking cannot loop forever
STOP_HOOK = "stop_hook"  # the inbox source of a Stop hook's continuation


def reminder(event: str, text: str) -> TextPart:
    return TextPart(f"<system-reminder>\n{event} hook says:\n{text.strip()}\n</system-reminder>")


@dataclass(slots=True)
class HookOutcome:
    blocked: str | None = None  # the feedback of the hook that blocked
    context: list[TextPart] = field(default_factory=list)  # for the model
    notices: list[tuple[str, str]] = field(default_factory=list)  # (text, kind) for the user


class TurnHooks:
    """The session events of one session's `HookRunner` (None: no hooks configured)."""

    def __init__(self, runner: HookRunner | None) -> None:
        self.runner = runner

    def has(self, event: str) -> bool:
        return self.runner is not None and bool(self.runner.config.commands(event))

    async def session_start(self, *, is_new: bool, agent_name: str) -> HookOutcome:
        if self.runner is None or not self.has("SessionStart"):
            return HookOutcome()
        out = _read("SessionStart", await self.runner.session_start(is_new_session=is_new, agent_name=agent_name))
        if out.blocked:  # SessionStart cannot block: its feedback is only shown
            out.notices.append((out.blocked, "error"))
            out.blocked = None
        return out

    async def open_session(self, prepared: Prepared) -> HookOutcome:
        """SessionStart for a headless or SDK session on `prepared`'s conversation: a new
        session when its transcript holds no message yet (read only when such hooks exist)."""
        if not self.has("SessionStart"):
            return HookOutcome()
        session = prepared.session
        transcript = prepared.store.transcript(session.agent.id, session.conversation_id)
        return await self.session_start(is_new=not transcript.tail(1), agent_name=session.agent.name)

    async def prompt_submit(self, prompt: str) -> HookOutcome:
        if self.runner is None or not self.has("UserPromptSubmit"):
            return HookOutcome()
        out = _read("UserPromptSubmit", await self.runner.user_prompt_submit(prompt))
        out.notices = [n for n in out.notices if n[1] == "error"]  # the context goes to the model
        return out

    async def stop(self, *, stop_reason: str, tool_call_count: int, assistant_message: str,
                   user_message: str, active: bool) -> HookOutcome:
        if self.runner is None or not self.has("Stop"):
            return HookOutcome()
        stopped = await self.runner.stop(
            stop_reason, tool_call_count=tool_call_count, assistant_message=assistant_message,
            user_message=user_message, stop_hook_active=active,
        )
        out = _read("Stop", stopped)
        out.context, out.notices = [], [n for n in out.notices if n[1] == "error"]
        return out

    async def session_end(self) -> None:
        if self.runner is not None and self.has("SessionEnd"):
            await self.runner.session_end()


def _read(event: str, results: Sequence[HookResult]) -> HookOutcome:
    """The hooks' results in order, up to the first that blocks or says `continue: false`."""
    out = HookOutcome()
    for r in results:
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
