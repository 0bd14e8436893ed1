"""The TUI as the conversation inbox's frontend (`runtime/turns/inbox.py`): what happens around each
turn on screen — the prompts shown and put to the UserPromptSubmit hook, events rendered, waiting
prompts back into the input box after an interrupt, the memory review and the Stop hook (whose
feedback runs next, ahead of waiting prompts) — and the waiting prompts as the status line lists
them."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator, Sequence
from typing import TYPE_CHECKING

from tether.errors import TetherError
from tether.protocol.chunks import UsageStatistics
from tether.protocol.messages import TextPart
from tether.protocol.turns import LocalToolCall
from tether.runtime.extensions.turn_hooks import MAX_STOP_CONTINUATIONS, STOP_HOOK, TurnHooks

if TYPE_CHECKING:
    from tether.core.turn import Event, TurnOutcome
    from tether.runtime.turns.inbox import Submission, TurnPlan
    from tether.tui.app import TetherApp

__all__ = ["MAX_STOP_CONTINUATIONS", "STOP_HOOK", "PromptQueue", "TuiTurns"]


class TuiTurns:
    """begin / failed / end around each turn the inbox runs for the app. A bug here is shown
    (and kept in `app.crashed_turn`); the session stays usable."""

    def __init__(self, app: TetherApp) -> None:
        self.app = app
        self.continuations = 0  # Stop hook continuations since the user's last prompt
        self.tool_calls = 0
        self._prompt = ""
        self._from_hook = False
        self._failed = False

    async def begin(self, batch: Sequence[Submission], abort: asyncio.Event) -> TurnPlan | None:
        try:
            return await self._begin(batch)
        except Exception as exc:  # shown, and the session stays usable
            self.crashed(exc)
            return None

    async def _begin(self, batch: Sequence[Submission]) -> TurnPlan | None:
        from tether.runtime.turns.inbox import TurnPlan, user_message

        app = self.app
        if app.quitting:
            return None
        app.refresh_status()  # the batch left the queue: no longer listed as waiting
        p = app.prepared
        app.inbox.rebind(p)  # a session rebuilt since (trust)
        texts = [str(s.payload) for s in batch]
        from_hook = batch[0].source == STOP_HOOK
        prompt = "\n\n".join(texts)
        extra: list[TextPart] = []
        if from_hook:
            app.notice(f"Stop hook asked to continue: {prompt}", "dim")
        else:
            self.continuations = 0
            for text in texts:
                app.transcript.add_user(text)
            submitted = app.show(await TurnHooks(p.hooks).prompt_submit(prompt))
            if submitted.blocked is not None:
                app.notice(f"Prompt blocked by a UserPromptSubmit hook: {submitted.blocked}", "error")
                return None
            extra = submitted.context
        parts = [TextPart(t) for t in texts] + app.take_session_context() + extra
        self.tool_calls = 0
        self._prompt, self._from_hook, self._failed = prompt, from_hook, False
        app.refresh_status()
        return TurnPlan(user=user_message(parts), emit=self.emit, approver=app.approver)

    def failed(self, batch: Sequence[Submission], exc: Exception) -> TurnOutcome:
        from tether.core.turn import TurnOutcome

        self._failed = True
        if isinstance(exc, TetherError):  # a busy conversation, a damaged transcript
            self.app.notice(str(exc), "error")
        else:
            self.crashed(exc)
        return TurnOutcome(stop_reason="error")

    async def end(self, batch: Sequence[Submission], outcome: TurnOutcome) -> bool:
        try:
            await self._end(outcome)
        except Exception as exc:
            self.crashed(exc)
        finally:
            self.app.refresh_status()
        return False  # the reflection is started in _end, where its errors are shown

    async def _end(self, outcome: TurnOutcome) -> None:
        from tether.runtime.turns.inbox import Submission

        app = self.app
        if self._failed:
            return
        if outcome.interrupted:
            self.requeue_into_prompt()
            return
        if outcome.stop_reason != "end_turn" or app.quitting:
            return
        reflection = app.inbox.conversation.start_reflection()
        if reflection is not None:  # memory review in the background; the prompt stays live
            app.spawn(reflection)
        stopped = app.show(await TurnHooks(app.prepared.hooks).stop(
            stop_reason=outcome.stop_reason, tool_call_count=self.tool_calls,
            assistant_message=outcome.last_text, user_message=self._prompt,
            active=self._from_hook,
        ))
        feedback = stopped.blocked
        if feedback is not None and self.continuations < MAX_STOP_CONTINUATIONS and not app.quitting:
            self.continuations += 1
            app.inbox.put(Submission(parts=(TextPart(feedback),), payload=feedback,
                                     source=STOP_HOOK, coalesce=False), front=True)

    def crashed(self, exc: Exception) -> None:
        app = self.app
        app.crashed_turn = f"{type(exc).__name__}: {exc}"
        app.notice(f"Internal error in the turn: {app.crashed_turn}", "error")

    def requeue_into_prompt(self) -> None:
        """After an interrupt queued prompts are not sent: they go back into the prompt box."""
        app = self.app
        dropped = app.inbox.cancel_queued("the turn was interrupted: back in the input box")
        texts = [str(s.payload) for s in dropped if s.source != STOP_HOOK]
        if not texts:
            return
        box = app.prompt_box
        box.load_text("\n\n".join([*texts, *([box.text] if box.text.strip() else [])]))
        app.notice("Queued prompts are back in the input box (not sent)", "dim")

    def emit(self, event: Event) -> None:
        app = self.app
        if app.ui_alive:
            app.transcript.render_event(event)
        if isinstance(event, UsageStatistics):
            app.context_tokens = event.usage.total_tokens
            app.refresh_status()
        elif isinstance(event, LocalToolCall):
            self.tool_calls += 1


class PromptQueue:
    """The prompts waiting for a turn, as the status line lists them: typed while the session
    was starting, or waiting in the inbox. `append` submits one as the prompt box does."""

    __hash__ = None  # type: ignore[assignment]

    def __init__(self, app: TetherApp) -> None:
        self.app = app

    def waiting(self) -> list[str]:
        inbox = self.app.inbox_if_made
        queued = [str(s.payload) for s in inbox.queue if s.source != STOP_HOOK] if inbox else []
        return [*self.app.early_prompts, *queued]

    def append(self, text: str) -> None:
        self.app.start_turn([text])

    def __iter__(self) -> Iterator[str]:
        return iter(self.waiting())

    def __len__(self) -> int:
        return len(self.waiting())

    def __eq__(self, other: object) -> bool:
        return list(self) == other if isinstance(other, list) else NotImplemented

    def __repr__(self) -> str:
        return repr(list(self))
