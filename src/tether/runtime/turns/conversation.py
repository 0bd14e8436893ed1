"""One conversation's turns, the same for every frontend: the cross-process turn lock, what a
crashed run left (effect recovery, task notifications), the turn engine, the checkpoints a turn
left open settled, and the after-turn reflection trigger.

Headless, stream-json, the TUI and the App Server each render events and answer approvals; they
submit input to the conversation's inbox (`runtime/turns/inbox.py`), whose one worker calls `turn`, so
none of them runs a turn itself and the paths cannot drift apart again (issue 15).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from tether.core.turn import Approver, Event, TurnOutcome, run_turn
from tether.protocol.messages import UserMessage
from tether.protocol.turns import LocalToolReturn

if TYPE_CHECKING:
    from tether.protocol.tool_calls import ToolReturn
    from tether.runtime.session.prepared import Prepared


class Conversation:
    """The turns of the conversation `prepared` names, one at a time (the turn lock also holds
    other processes out), and its background reflection."""

    def __init__(self, prepared: Prepared) -> None:
        self.p = prepared
        self.reflection: asyncio.Future[Any] | None = None
        # Why the effect store failed during the last turn (None: it did not).
        self.store_unavailable: str | None = None

    async def turn(
        self,
        user: UserMessage,
        *,
        emit: Callable[[Event], None],
        approver: Approver,
        abort: asyncio.Event,
        max_turns: int | None = None,
        emit_recovered: Callable[[Event], None] | None = None,
        take_notifications: bool = True,
        on_tool_start: Callable[[str], None] | None = None,
        on_tool_end: Callable[[str], None] | None = None,
        on_store_unavailable: Callable[[str], None] | None = None,
        on_send: Callable[[], None] | None = None,
    ) -> TurnOutcome:
        """Run one turn under the conversation's lock. First what a crashed run left is settled
        (shown through `emit_recovered`, default `emit`) and, with `take_notifications`, ended
        background tasks are put in front of `user`; after, checkpoints of calls answered
        without running are closed with that answer on every way out. Errors of the lock, the
        transcript or the disk propagate for the frontend to report its own way."""
        from tether.runtime.turns.checkpoints import CheckpointHooks

        p = self.p
        self.store_unavailable = None
        results: dict[str, ToolReturn] = {}

        def emit_and_note(event: Event) -> None:
            if isinstance(event, LocalToolReturn):
                results[event.result.tool_call_id] = event.result
            emit(event)

        def unavailable(why: str) -> None:
            self.store_unavailable = why
            if on_store_unavailable is not None:
                on_store_unavailable(why)

        deps = p.turn_deps(emit=emit_and_note, approver=approver, abort=abort, max_turns=max_turns,
                           on_tool_start=on_tool_start, on_tool_end=on_tool_end,
                           on_store_unavailable=unavailable, on_send=on_send)
        hooks = deps.tool_hooks
        assert isinstance(hooks, CheckpointHooks)  # the effect checkpoints of every path
        recovered_to = emit_recovered or emit
        with p.store.turn_lock(p.session.agent.id, p.session.conversation_id):
            if take_notifications:
                user = p.begin_turn(user, recovered_to)
            else:
                p.recover_effects(recovered_to)
            try:
                return await run_turn(deps, p.conversation, user)
            finally:
                await hooks.settle_leftovers(results)

    def start_reflection(self) -> asyncio.Future[Any] | None:
        """The after-turn memory review, in the background, unless one is still running or the
        run has none; call after a turn that ended well."""
        trigger = self.p.services.reflection
        if trigger is None or (self.reflection is not None and not self.reflection.done()):
            return None
        self.reflection = asyncio.ensure_future(trigger.after_turn())
        return self.reflection

    async def reflect(self, abort: asyncio.Event | None = None) -> None:
        """The after-turn memory review, awaited (a one-shot run ends after it)."""
        trigger = self.p.services.reflection
        if trigger is not None:
            await trigger.after_turn(abort)

