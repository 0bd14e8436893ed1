"""One conversation's inbox: what frontends submit, queued in arrival order (bounded), one worker
running it one turn at a time through `Conversation.turn`, the running turn's abort, the
after-turn reflection trigger, idle notification and `close()`.

A frontend is a `Frontend` over an `Inbox`: it submits, `begin` turns a batch of submissions
into a `TurnPlan` (the user message, where events go, who answers approvals), `failed` says what
an error of the turn means to it, and `end` renders the outcome. Headless, stream-json, the TUI
and the App Server each keep only their rendering, their approver and their wire protocol.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from tether.core.turn import Approver, Event, TurnOutcome
from tether.errors import TetherError
from tether.protocol.chunks import now_ms
from tether.protocol.messages import UserMessage, UserPart
from tether.runtime.turns.conversation import Conversation

if TYPE_CHECKING:
    from tether.core.approvals import JudgedCall
    from tether.core.tools import ToolContext
    from tether.core.turn import ApprovalAnswer
    from tether.runtime.session.prepared import Prepared


class QueueFull(TetherError):
    """The inbox already holds as many waiting submissions as it may."""


class InboxClosed(TetherError):
    """The conversation's inbox is closed: nothing more is taken."""


class Cancelled(TetherError):
    """A submission that never ran; the message says why (close, an interrupt, a withdrawal)."""


def new_id() -> str:
    return f"q-{os.urandom(6).hex()}"


@dataclass(eq=False, kw_only=True)
class Submission:
    """One input waiting for (or in) a turn. Frontends may subclass it to keep their own record
    (the App Server's queue item) or put it in `payload` (a stream-json line, a typed prompt)."""

    parts: tuple[UserPart, ...] = ()
    source: str = "user"  # who sent it: "user", "cron", "task_notification", "stop_hook", ...
    id: str = field(default_factory=new_id)
    payload: Any = None
    coalesce: bool = True  # may share a turn with the coalescing submissions queued after it
    # An event the caller already holds (a signal handler's), used as its turn's abort (the
    # first submission's, when several share a turn).
    abort: asyncio.Event | None = None
    # The turn's outcome (None: the frontend let it go without a turn), or Cancelled / an error.
    done: asyncio.Future[TurnOutcome | None] | None = field(default=None, init=False)

    def settle(self, outcome: TurnOutcome | None = None, error: BaseException | None = None) -> None:
        if self.done is None or self.done.done():
            return
        if error is not None:
            self.done.set_exception(error)
            self.done.exception()  # nobody may be waiting: never "exception was never retrieved"
        else:
            self.done.set_result(outcome)


@dataclass(frozen=True, slots=True)
class PendingApproval:
    """A call of the running turn waiting for its approver's answer, since `asked_at_ms`."""

    item: JudgedCall
    asked_at_ms: int

    @property
    def tool_call_id(self) -> str:
        return self.item.call.id

    @property
    def tool_name(self) -> str:
        return self.item.call.name

    @property
    def reason(self) -> str:
        """Why the decision asks."""
        return self.item.decision.reason


class _TrackedApprover:
    """The frontend's approver, with each open question kept in the inbox while it waits."""

    def __init__(self, inner: Approver, pending: dict[str, PendingApproval]) -> None:
        self.inner = inner
        self.pending = pending

    async def ask(self, item: JudgedCall, ctx: ToolContext) -> ApprovalAnswer:
        self.pending[item.call.id] = PendingApproval(item, now_ms())
        try:
            return await self.inner.ask(item, ctx)
        finally:
            self.pending.pop(item.call.id, None)


@dataclass(kw_only=True)
class TurnPlan:
    """How one batch runs: the arguments of `Conversation.turn` a frontend chooses."""

    user: UserMessage
    emit: Callable[[Event], None]
    approver: Approver
    max_turns: int | None = None
    emit_recovered: Callable[[Event], None] | None = None
    take_notifications: bool = True
    on_tool_start: Callable[[str], None] | None = None
    on_tool_end: Callable[[str], None] | None = None
    on_store_unavailable: Callable[[str], None] | None = None
    on_send: Callable[[], None] | None = None


class Frontend(Protocol):
    """An event consumer plus an approver over the inbox."""

    async def begin(self, batch: Sequence[Submission], abort: asyncio.Event) -> TurnPlan | None:
        """The turn for `batch` (None: no turn; its submissions settle with None)."""
        ...

    def failed(self, batch: Sequence[Submission], exc: Exception) -> TurnOutcome:
        """The outcome when the turn raised (a busy conversation, the disk); raise to stop."""
        ...

    async def end(self, batch: Sequence[Submission], outcome: TurnOutcome) -> bool:
        """Render the outcome; True when the turn ended well (the reflection trigger runs)."""
        ...


def user_message(parts: Sequence[UserPart], suffix: str = "") -> UserMessage:
    """The user message of a turn, stamped when the turn starts."""
    at = now_ms()
    return UserMessage(f"ui-msg-{at}{suffix}", tuple(parts), at)


class Inbox:
    """The conversation's submissions, run one turn at a time by one worker.

    `max_queue` bounds what may wait (None: unbounded); with `coalesce`, submissions already
    waiting when a turn starts share it. With `keep_going` an error escaping the frontend is
    printed and the next submission runs (a long-lived server); without, the worker stops, what
    waits is cancelled and the error is kept in `failure` (a one-client session ends with it).
    `on_idle` is told whenever nothing runs or waits: the worker found its queue empty, or a
    reflection it started ended (a server may then release the conversation).
    """

    def __init__(
        self,
        prepared: Prepared,
        frontend: Frontend,
        *,
        max_queue: int | None = None,
        coalesce: bool = False,
        keep_going: bool = False,
        on_idle: Callable[[], None] | None = None,
    ) -> None:
        self.frontend = frontend
        self.conversation = Conversation(prepared)
        self.queue: deque[Submission] = deque()
        self.max_queue = max_queue
        self.coalesce = coalesce
        self.keep_going = keep_going
        self.on_idle = on_idle
        self.running: list[Submission] | None = None  # the batch from begin() through end()
        self.run_ids: list[str] = []  # the running turn's runs, as its events named them
        self.failure: BaseException | None = None
        self._abort: asyncio.Event | None = None  # set while the conversation's turn runs
        self._pending: dict[str, PendingApproval] = {}  # the running turn's open questions
        self._closing: str | None = None  # why the inbox takes nothing more
        self._shut = False  # close() was called
        self._wake = asyncio.Event()
        self._settled = asyncio.Event()  # set whenever nothing runs and nothing waits
        self._settled.set()
        self.worker = asyncio.ensure_future(self._work())

    # --- state --------------------------------------------------------------------------------

    @property
    def prepared(self) -> Prepared:
        return self.conversation.p

    def rebind(self, prepared: Prepared) -> None:
        """Run the next turns over a rebuilt session (a new folder, a changed trust), keeping
        the reflection the previous one started."""
        if prepared is not self.conversation.p:
            reflection = self.conversation.reflection
            self.conversation = Conversation(prepared)
            self.conversation.reflection = reflection

    @property
    def busy(self) -> bool:
        """A batch is being handled (its turn, or the frontend's begin/end around it)."""
        return self.running is not None

    @property
    def turn_running(self) -> bool:
        return self._abort is not None

    @property
    def pending_approvals(self) -> tuple[PendingApproval, ...]:
        """The running turn's calls waiting for an answer, oldest first (none between turns)."""
        return tuple(self._pending.values())

    @property
    def abort_event(self) -> asyncio.Event | None:
        """The running turn's abort (None between turns): approvers wait on it too."""
        return self._abort

    @property
    def aborting(self) -> bool:
        return self._abort is not None and self._abort.is_set()

    @property
    def closed(self) -> bool:
        return self._closing is not None

    @property
    def reflection(self) -> asyncio.Future[Any] | None:
        return self.conversation.reflection

    # --- input --------------------------------------------------------------------------------

    def submit(self, parts: Sequence[UserPart] = (), **fields: Any) -> Submission:
        """Queue a new submission (see `Submission` for the fields); QueueFull / InboxClosed."""
        return self.put(Submission(parts=tuple(parts), **fields))

    def check_room(self, *, front: bool = False) -> None:
        """Raise what `put` would (QueueFull, InboxClosed), without queueing anything: a
        frontend that records input durably asks before it writes."""
        if self._closing is not None:
            raise InboxClosed(f"the conversation's inbox is closed ({self._closing})")
        if not front and self.max_queue is not None and len(self.queue) >= self.max_queue:
            raise QueueFull(
                f"the conversation's input queue is full ({self.max_queue} inputs waiting); "
                "retry after a turn finishes"
            )

    def put(self, item: Submission, *, front: bool = False) -> Submission:
        """Queue `item` (at the front: it runs next); raises QueueFull or InboxClosed."""
        self.check_room(front=front)
        item.done = asyncio.get_running_loop().create_future()
        if front:
            self.queue.appendleft(item)
        else:
            self.queue.append(item)
        self._settled.clear()
        self._wake.set()
        return item

    def withdraw(self, item_id: str, reason: str) -> Submission | None:
        """Take a waiting submission out of the queue (it settles Cancelled); None if it is not
        waiting (already running, done, or unknown)."""
        for item in self.queue:
            if item.id == item_id:
                self.queue.remove(item)
                item.settle(error=Cancelled(reason))
                self._note_settled()
                return item
        return None

    def cancel_queued(self, reason: str) -> list[Submission]:
        """Every waiting submission out of the queue, each settled Cancelled(reason)."""
        dropped = list(self.queue)
        self.queue.clear()
        for item in dropped:
            item.settle(error=Cancelled(reason))
        self._note_settled()
        return dropped

    def abort(self, run_id: str | None = None) -> bool:
        """Abort the running turn (its tools' process groups are stopped by the tools, every call
        is answered); with `run_id`, only if the turn is that run. False when nothing matches.
        What waits in the queue stays."""
        if self._abort is None or (run_id is not None and run_id not in self.run_ids):
            return False
        self._abort.set()
        return True

    async def drained(self) -> None:
        """Wait until nothing runs and nothing waits (or the worker stopped)."""
        while not (self.running is None and not self.queue) and not self.worker.done():
            settled = asyncio.ensure_future(self._settled.wait())
            await asyncio.wait({settled, self.worker}, return_when=asyncio.FIRST_COMPLETED)
            settled.cancel()

    # --- the worker ---------------------------------------------------------------------------

    def _take(self) -> list[Submission] | None:
        if not self.queue:
            return None
        batch = [self.queue.popleft()]
        if self.coalesce and batch[0].coalesce:
            while self.queue and self.queue[0].coalesce:
                batch.append(self.queue.popleft())
        return batch

    def _tell_idle(self) -> None:
        """`on_idle`, when nothing runs or waits (the worker found nothing, a reflection ended)."""
        if self.on_idle is not None and self.running is None and not self.queue:
            self.on_idle()

    def _note_settled(self) -> None:
        if self.running is None and not self.queue:
            self._settled.set()

    async def _work(self) -> None:
        while self._closing is None:
            batch = self._take()
            if batch is None:
                self._settled.set()
                self._tell_idle()
                self._wake.clear()
                await self._wake.wait()
                continue
            try:
                await self._run(batch)
            except Exception as exc:  # the frontend's own bug, or its `failed` re-raised
                for item in batch:
                    item.settle(error=exc)
                if not self.keep_going:
                    self.failure = exc
                    self._closing = f"the conversation stopped: {type(exc).__name__}: {exc}"
                    self.cancel_queued(self._closing)
                    return
                import traceback

                traceback.print_exc(file=sys.stderr)  # one input never stops a server's worker
            finally:
                self.running = None
                self._abort = None
                self._note_settled()

    async def _run(self, batch: list[Submission]) -> None:
        self.running = batch
        self.run_ids = []
        abort = batch[0].abort or asyncio.Event()
        self._abort = abort
        outcome: TurnOutcome | None = None
        try:
            plan = await self.frontend.begin(batch, abort)
            if plan is not None:
                conversation = self.conversation  # begin may have rebound the session
                try:
                    outcome = await conversation.turn(
                        plan.user, emit=self._noting_runs(plan.emit),
                        approver=_TrackedApprover(plan.approver, self._pending),
                        abort=abort, max_turns=plan.max_turns, emit_recovered=plan.emit_recovered,
                        take_notifications=plan.take_notifications,
                        on_tool_start=plan.on_tool_start, on_tool_end=plan.on_tool_end,
                        on_store_unavailable=plan.on_store_unavailable, on_send=plan.on_send,
                    )
                except Exception as exc:
                    outcome = self.frontend.failed(batch, exc)
        finally:
            self._abort = None
            self._pending.clear()
        if outcome is not None and await self.frontend.end(batch, outcome):
            self.start_reflection()
        for item in batch:
            item.settle(outcome)

    def _noting_runs(self, emit: Callable[[Event], None]) -> Callable[[Event], None]:
        run_ids = self.run_ids

        def emit_noting_runs(event: Event) -> None:
            run_id = getattr(event, "run_id", None)
            if isinstance(run_id, str) and run_id not in run_ids:
                run_ids.append(run_id)
            emit(event)

        return emit_noting_runs

    def start_reflection(self) -> None:
        """The after-turn memory review, in the background (`end` returning True does this;
        a frontend that must order it against its own work calls it itself)."""
        if self._closing is not None:
            return
        started = self.conversation.start_reflection()  # memory review, off the turn
        if started is not None and self.on_idle is not None:
            started.add_done_callback(lambda _: self._tell_idle())

    # --- the end ------------------------------------------------------------------------------

    async def close(
        self,
        reason: str = "the conversation closed",
        *,
        timeout: float | None = None,
        reflection_timeout: float = 0,
        before_shutdown: Callable[[], Awaitable[None]] | None = None,
    ) -> list[Submission]:
        """Stop taking input, cancel what waits (each settles Cancelled(reason)), abort the
        running turn and wait for it (`timeout`, then it is cancelled), give a started reflection
        up to `reflection_timeout` seconds, then shut the session down. Returns what was
        cancelled. The worker's failure, if any, stays in `failure` (not raised here)."""
        if self._shut:
            return []
        self._shut = True
        self._closing = self._closing or reason
        cancelled = self.cancel_queued(reason)
        if self._abort is not None:
            self._abort.set()
        self._wake.set()
        try:
            await asyncio.wait_for(asyncio.shield(self.worker), timeout)
        except (TimeoutError, asyncio.CancelledError):
            self.worker.cancel()
        except Exception:
            pass  # kept in `failure`
        if not self.worker.done():
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self.worker
        reflection = self.conversation.reflection
        if reflection is not None and not reflection.done() and reflection_timeout > 0:
            await asyncio.wait([reflection], timeout=reflection_timeout)
        if before_shutdown is not None:
            await before_shutdown()
        await self.prepared.shutdown()
        return cancelled
