"""The App Server's side of one conversation: protocol v2 frames, subscribers, approvals and
device state over the conversation's inbox (`runtime/turns/inbox.py`: one bounded queue, at most one
turn at a time, the store's turn lock holding that across processes too).

Every client subscribed to a runtime sees the same frames with the same `event_seq`. Inputs are
queued in arrival order and run one turn each; approvals go out as `control_request
{can_use_tool}` to every subscriber and the first `approval_response` settles them; an abort
cancels the running turn (its tool process groups are killed by the tools themselves). Before
each turn, tool calls a crashed run left open are answered from their effect checkpoints.
In a fleet (`--store`), the worker holding the conversation's lease publishes every frame it
broadcasts and clients of other workers get them relayed, with the same `event_seq`; their
approval answers and aborts go to the holder (`fleet_events.py`), and the agent's memory
repository is synced with the store's copy at each turn boundary (`backends/postgres/
memory_sync.py`): pulled before the turn, pushed after it and after its reflection.
"""

from __future__ import annotations

import asyncio
import sys
import time
import traceback
import uuid
from collections import OrderedDict, deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from tether.core.turn import Event, TurnOutcome
from tether.errors import TetherError, UsageError
from tether.protocol.chunks import RetryNotice, now_ms
from tether.protocol.messages import UserMessage
from tether.runtime.session.prepared import Prepared
from tether.runtime.turns.checkpoints import RecoveredEffect
from tether.runtime.turns.inbox import Inbox, InboxClosed, QueueFull, Submission, TurnPlan
from tether.server import durable_inputs
from tether.server.approvals import PendingApproval, RuntimeApprover
from tether.server.auth import FULL_GRANT, Grant
from tether.server.idle_release import runtime_idle
from tether.server.ops import METRICS
from tether.server.protocol_v2 import ApprovalResponse, CreateMessage
from tether.server.runtime_start import (
    ServerContext,
    build_prepared,
    carry_external_tools,
    check_scoped_folder,
    check_workspace,
    folder_trusted,
    rebuild_if_untrusted,
)
from tether.server.v2_frames import EventStream, InputAnswer, TurnFinished, error_frame


class Subscriber(Protocol):
    id: str

    def send_frame(self, frame: dict[str, Any]) -> None:
        """Queue a frame for the client; never blocks."""
        ...


@runtime_checkable
class EventSubscriber(Subscriber, Protocol):
    """A subscriber in this process that takes the turn's typed events as well (the OpenAI
    bridge), instead of parsing them back out of protocol v2 frames."""

    def on_event(self, event: Event) -> None: ...

    def on_turn_finished(self, finished: TurnFinished) -> None: ...

    def on_approval_request(self, request_id: str, tool_name: str, reason: str) -> None: ...


@dataclass(eq=False, kw_only=True)
class QueuedInput(Submission):
    """A create_message in the conversation's inbox; `source` "cron" is a schedule's prompt
    (kind cron_prompt on the wire)."""

    idempotency_key: str | None
    request_id: str | None
    messages: tuple[Any, ...] = ()
    enqueued_at: str = ""
    announced: bool = False
    key_given: bool = True  # the sender's own key (CreateMessage.key_given): kept durably


# --- the runtime ------------------------------------------------------------------------------


class ConversationRuntime:
    """One conversation as App Server clients see it: the inbox's frontend (begin / failed /
    end around each turn) plus subscribers, v2 frames, approvals and device state."""

    def __init__(self, ctx: ServerContext, prepared: Prepared, stream: EventStream) -> None:
        self.ctx = ctx
        self.stream = stream
        self.scope = stream.scope
        self.subscribers: dict[str, Subscriber] = {}
        # Those that take typed events too, decided once (a runtime-checkable isinstance walks
        # the protocol's members, and would run for every event).
        self._event_subscribers: dict[str, EventSubscriber] = {}
        self.status = "WAITING_ON_INPUT"
        self.active_run_ids: list[str] = []
        self.executing: list[str] = []
        self.approvals: dict[str, PendingApproval] = {}
        self.seen: OrderedDict[str, InputAnswer] = OrderedDict()
        # Inputs a restart found begun in a dead server: reported at runtime_start, not re-run.
        self.interrupted: list[durable_inputs.InterruptedInput] = []
        self._sent_at: float | None = None
        self.turns_finished = 0
        self._pending_state: tuple[str | None, Path | None] | None = None
        self._turn: _Turn | None = None  # the running turn's id, input and error
        # Set by the server's table (runtime_start.register_runtime): forget this runtime there.
        self.on_release: Callable[[ConversationRuntime], None] | None = None
        self._release_timer: asyncio.TimerHandle | None = None
        self.inbox = Inbox(prepared, self, max_queue=ctx.max_queue, keep_going=True,
                           on_idle=self._inbox_idle)
        self._built_trusted = folder_trusted(ctx, prepared.cwd)
        self._fleet_key = (
            durable_inputs.conversation_key(self.scope) if ctx.fleet is not None else None
        )
        self._memory_head: str | None = None  # the head local and store agreed on, last sync
        self._memory_pushes: set[asyncio.Task[None]] = set()  # after reflections, kept alive
        self._continue_fleet_seq()

    def _continue_fleet_seq(self) -> None:
        """In a fleet, this worker's frames go on after the last one any holder published."""
        if self._fleet_key is None:
            return
        lease = self.ctx.fleet.held.get(self._fleet_key)
        if lease is not None and lease.event_seq > self.stream.last_seq:
            self.stream.resume_after(lease.event_seq)

    # --- the inbox's state, under the names the server's modules use -------------------------

    @property
    def p(self) -> Prepared:
        return self.inbox.prepared

    @p.setter
    def p(self, prepared: Prepared) -> None:
        self.inbox.rebind(prepared)

    @property
    def queue(self) -> deque[Submission]:
        """Inputs waiting for their turn (QueuedInput each), oldest first."""
        return self.inbox.queue

    @property
    def abort_event(self) -> asyncio.Event | None:
        """The running turn's abort; None between turns."""
        return self.inbox.abort_event

    @property
    def _closing(self) -> bool:
        return self.inbox.closed

    @property
    def _reflection(self) -> asyncio.Future[Any] | None:
        return self.inbox.reflection

    # --- subscribers and state ---------------------------------------------------------------

    def subscribe(self, sub: Subscriber) -> None:
        if self._fleet_key is not None and not self.subscribers:
            self.ctx.fleet.events.follow(self._fleet_key, self)
        self.subscribers[sub.id] = sub
        if isinstance(sub, EventSubscriber):
            self._event_subscribers[sub.id] = sub
        if self._release_timer is not None:
            self._release_timer.cancel()
            self._release_timer = None

    def unsubscribe(self, sub: Subscriber) -> None:
        self.subscribers.pop(sub.id, None)
        self._event_subscribers.pop(sub.id, None)
        if self._fleet_key is not None and not self.subscribers:
            self.ctx.fleet.events.unfollow(self._fleet_key, self)
        self.release_when_idle()

    # --- release when idle (issue 22 item 5) ------------------------------------------------

    def idle(self) -> bool:
        return runtime_idle(self)

    def release_when_idle(self) -> None:
        """After the server's grace period, release this runtime if it is (still) idle; its
        memory goes, and the next start rebuilds it from disk with what `Kept` holds."""
        delay = self.ctx.idle_release_after
        if self.on_release is None or delay is None or not self.idle():
            return
        if self._release_timer is not None:
            self._release_timer.cancel()
        self._release_timer = asyncio.get_running_loop().call_later(delay, self._release_if_idle)

    def _release_if_idle(self) -> None:
        self._release_timer = None
        release, self.on_release = self.on_release, None
        if release is None or not self.idle():
            self.on_release = release
            return
        release(self)  # which also closes it

    def broadcast(self, frame: dict[str, Any]) -> None:
        key = self._fleet_key
        for sub in list(self.subscribers.values()):
            # A client resuming from its last seq gets this after its replay (fleet_events).
            if key is None or not self.ctx.fleet.events.hold_back(key, sub.id, frame):
                sub.send_frame(frame)
        if key is not None:
            self.ctx.fleet.events.publish(key, frame)

    @property
    def held_elsewhere(self) -> bool:
        """Whether another worker of the fleet runs this conversation (its frames relayed here)."""
        return self._fleet_key is not None and self._fleet_key not in self.ctx.fleet.held

    @property
    def sandboxed(self) -> bool:
        """Whether the conversation's shell commands run in the workspace sandbox."""
        return self.p.services.sandbox is not None

    @property
    def busy(self) -> bool:
        return self.inbox.turn_running

    def device_status_frame(self) -> dict[str, Any]:
        return self.stream.device_status(
            is_processing=self.busy,
            permission_mode=self.p.flags.permission_mode,
            cwd=str(self.p.cwd),
            loaded_tools=self.p.registry.names(),
            mcp_servers=mcp.status() if (mcp := self.p.services.mcp) else [],
            pending_control_requests=[(a.request_id, a.frame["request"]) for a in self.approvals.values()],
            **self._agent_state(),
        )

    def _agent_state(self) -> dict[str, Any]:
        """The device status fields read from the agent: its toolset (as `auto` resolves it
        for the model), memory directory and reflection settings."""
        from tether.memory.memfs import memory_dir
        from tether.runtime.agents.reflection import load_state
        from tether.tools.toolsets import resolve_toolset

        agent_id = self.p.session.agent.id
        home = self.ctx.store.home
        memory = memory_dir(home, agent_id)
        try:
            state = load_state(self.ctx.store, agent_id)
            reflection: dict[str, Any] | None = {
                "agent_id": agent_id, "trigger": state.trigger, "step_count": state.step_count}
        except TetherError:  # a damaged reflection.json: reported by the run, not here
            reflection = None
        return {
            "toolset": resolve_toolset(self.p.flags.toolset, self.p.session.model),
            "toolset_preference": self.p.flags.toolset or "auto",
            "memory_directory": str(memory) if (memory / ".git").is_dir() else None,
            "reflection_settings": reflection,
        }

    def loop_status_frame(self) -> dict[str, Any]:
        return self.stream.loop_status(self.status, self.active_run_ids, self.executing)

    def queue_frame(self, removed: list[str] | None = None) -> dict[str, Any]:
        waiting = [q for q in self.queue if isinstance(q, QueuedInput) and q.announced]
        return self.stream.update_queue(waiting, removed)

    def state_frames(self) -> list[dict[str, Any]]:
        """What a (re)connecting client needs: device, loop and queue state, open approvals."""
        return [
            self.device_status_frame(),
            self.loop_status_frame(),
            self.queue_frame(),
            *(a.frame for a in self.approvals.values()),
        ]

    def _set_status(self, status: str) -> None:
        if status != self.status:
            self.status = status
            self.broadcast(self.loop_status_frame())

    # --- commands from clients ---------------------------------------------------------------

    def submit(self, command: CreateMessage, source: str = "user") -> InputAnswer:
        """Queue a create_message; returns what input_accepted says (a repeat is not re-run).
        The input is on disk before it is accepted, written on this thread (a cron fire);
        `enqueue` does the same with the commit off the event loop."""
        item = self._new_input(command, source)
        if isinstance(item, InputAnswer):
            return item
        held = self._claim(item)
        return self._queued(item, durable_inputs.record(self, item, self._disposition()), held)

    async def enqueue(self, command: CreateMessage, source: str = "user") -> InputAnswer:
        """`submit` for clients (websocket, OpenAI bridge): the commit runs in the queue's
        writer thread, one fsync for every input that arrived meanwhile. In a fleet the
        idempotency key is looked up in the store off the event loop."""
        key = command.idempotency_key
        if self.ctx.fleet is not None and key is not None:
            known = await asyncio.to_thread(
                durable_inputs.repeated, self, key, durable=command.key_given
            )
            if known is not None:
                return known
        item = self._new_input(command, source, key_checked=self.ctx.fleet is not None)
        if isinstance(item, InputAnswer):
            return item
        held = await self._claim_async(item)
        refusal = await durable_inputs.record_grouped(self, item, self._disposition())
        return self._queued(item, refusal, held)

    def _new_input(
        self, command: CreateMessage, source: str, key_checked: bool = False
    ) -> QueuedInput | InputAnswer:
        """The queue item for `command`, or the answer without one (a repeat, no room)."""
        key = command.idempotency_key
        if key is not None and not key_checked and (
            known := durable_inputs.repeated(self, key, durable=command.key_given)
        ) is not None:
            return known
        try:
            self.inbox.check_room()
        except QueueFull:
            return InputAnswer(False, error=f"the input queue of {self.scope.conversation_id} is "
                               f"full ({self.ctx.max_queue} inputs waiting); retry after a turn "
                               "finishes", full=True)
        except InboxClosed as exc:
            return InputAnswer(False, error=f"{self.scope.conversation_id}: {exc}")
        from tether.protocol.chunks import iso_now

        return QueuedInput(
            idempotency_key=key, request_id=command.request_id, messages=command.messages,
            enqueued_at=iso_now(), source=source, key_given=command.key_given,
            parts=tuple(part for m in command.messages for part in m.parts),
        )

    def _claim(self, item: QueuedInput) -> bool:
        """In a fleet, before `item` is recorded: whether this worker holds the conversation
        (its lease taken first, so no sweep finds the input without a holder and takes it),
        and if so `item` noted as this runtime's own, so the wake-up its commit sends (heard
        before this coroutine resumes, perhaps) does not put it in the inbox again."""
        fleet = self.ctx.fleet
        if fleet is None:
            return True
        conversation = durable_inputs.conversation_key(self.scope)
        if not fleet.holds(conversation):
            return False
        fleet.note(conversation, item.id)
        return True

    async def _claim_async(self, item: QueuedInput) -> bool:
        """`_claim` with the lease taken off the event loop."""
        fleet = self.ctx.fleet
        if fleet is None:
            return True
        conversation = durable_inputs.conversation_key(self.scope)
        if not await fleet.holds_async(conversation):
            return False
        fleet.note(conversation, item.id)
        return True

    def _disposition(self) -> str:
        return "started" if not self.busy and not self.queue else "queued"

    def _queued(self, item: QueuedInput, refusal: str | None, held: bool = True) -> InputAnswer:
        """Into the inbox once on disk (`refusal` None), when this worker runs the conversation
        (`held`; otherwise its holder, woken by the commit, does); what input_accepted says."""
        key = item.idempotency_key
        if refusal == "key" and key is not None:  # the same key raced in while we wrote
            return durable_inputs.repeated(self, key) or InputAnswer(False, error="key taken")
        if refusal is not None:
            return InputAnswer(False, error=refusal)
        if not held:  # another worker runs the conversation; the commit woke it
            answer = InputAnswer(True, "queued", item.id)
            if key is not None:
                durable_inputs.remember(self, key, answer)
            return answer
        started = self._disposition() == "started"
        try:
            self.inbox.put(item)
        except (QueueFull, InboxClosed) as exc:  # filled or closed while the commit ran
            durable_inputs.mark(self, item.id, "cancelled", reason=str(exc))
            full = isinstance(exc, QueueFull)
            return InputAnswer(False, error=f"{self.scope.conversation_id}: {exc}", full=full)
        answer = InputAnswer(True, "started" if started else "queued", item.id)
        if key is not None:
            durable_inputs.remember(self, key, answer)
        item.announced = not started
        # After the caller has answered input_accepted: the queue update and the turn come later.
        asyncio.get_running_loop().call_soon(self._announce, item)
        return answer

    def withdraw(self, item_id: str, reason: str) -> bool:
        """Take a waiting input out (its sender is told it did not run); False if not waiting."""
        withdrawn = self.inbox.withdraw(item_id, reason)
        if withdrawn is None:
            return False
        durable_inputs.mark(self, item_id, "cancelled", reason=reason)
        if isinstance(withdrawn, QueuedInput) and withdrawn.announced:
            self.broadcast(self.queue_frame(removed=[withdrawn.id]))
        return True

    def _announce(self, item: QueuedInput) -> None:
        if item.announced and item in self.queue:
            self.broadcast(self.queue_frame())

    def answer_approval(self, response: ApprovalResponse) -> str | None:
        """Settle a pending can_use_tool; an error message when there is none by that id."""
        pending = self.approvals.get(response.approval_request_id)
        if pending is None and self._fleet_key is not None:  # asked by another worker's turn
            return self.ctx.fleet.events.forward_approval(self._fleet_key, response)
        if pending is None or pending.future.done():
            return f"no pending approval request {response.approval_request_id!r} in this runtime"
        pending.future.set_result(response)
        return None

    def abort(self, run_id: str | None) -> bool:
        """Abort the running turn (with `run_id`: only if it is that run); the queue stays. In
        a fleet, a turn another worker runs is asked to abort there."""
        if self._fleet_key is not None and self.ctx.fleet.events.forward_abort(
            self._fleet_key, run_id
        ):
            return True
        return self.inbox.abort(run_id)

    def change_device_state(self, mode: str | None, cwd: str | None, grant: Grant = FULL_GRANT) -> None:
        """Validate now (against the client's `grant` too), apply between turns (a running turn
        keeps the context it started with).

        A new mode applies from the next send; a new cwd is a new workspace, so the runtime's
        pieces are built again for it (settings, sandbox, guards), keeping its sandbox."""
        from tether.core.permissions import normalize_mode

        new_mode = normalize_mode(mode) if mode is not None else None
        if new_mode is not None and (refusal := grant.mode_refusal(new_mode)) is not None:
            raise UsageError(refusal)
        home = self.ctx.store.home
        new_cwd = (
            check_workspace(cwd, self.p.cwd, home, scoped=grant.scoped) if cwd is not None else None
        )
        if new_cwd is not None and grant.scoped:
            check_scoped_folder(home, new_cwd)
        self._pending_state = (new_mode, new_cwd)
        if not self.busy:
            self._apply_device_state()

    def reload_agent(self) -> None:
        """Build the runtime again from its agent's record (its model changed), where and how
        it runs now; only between turns (the caller checks `busy`)."""
        old = self.p
        given = old.flags.permission_mode if old.flags.permission_mode_given else None
        self.p = build_prepared(self.ctx, self.scope, old.cwd, given,
                                workspace_sandbox=self.sandboxed)
        self._built_trusted = folder_trusted(self.ctx, self.p.cwd)
        carry_external_tools(old, self.p)
        asyncio.ensure_future(old.shutdown())
        self.broadcast(self.device_status_frame())

    def _apply_device_state(self) -> None:
        if self._pending_state is None:
            return
        mode, cwd = self._pending_state
        self._pending_state = None
        if cwd is not None and cwd != self.p.cwd:
            old = self.p
            self.p = build_prepared(
                self.ctx, self.scope, cwd, mode or old.flags.permission_mode,
                workspace_sandbox=self.sandboxed,
            )
            self._built_trusted = folder_trusted(self.ctx, self.p.cwd)
            carry_external_tools(old, self.p)
            asyncio.ensure_future(old.shutdown())
        elif mode is not None:
            self.p.flags.permission_mode = mode
            self.p.flags.permission_mode_given = True  # a rebuild keeps what a client chose
        self.broadcast(self.device_status_frame())

    # --- recovery ---------------------------------------------------------------------------

    def recover(self) -> list[RecoveredEffect]:
        """Answer calls a crashed run left open (under the turn lock); tell every subscriber."""
        return self.p.recover_effects(self._broadcast_event)

    def _broadcast_event(self, event: Event) -> None:
        frame = self.stream.stream_delta(event)
        if frame is not None:
            self.broadcast(frame)

    def recover_now(self) -> list[RecoveredEffect]:
        """Recovery at runtime_start, if no turn (here or in another process) holds the lock."""
        if self.busy:
            return []
        try:
            with self.p.store.turn_lock(self.scope.agent_id, self.scope.conversation_id):
                return self.recover()
        except TetherError:
            return []

    # --- turns -------------------------------------------------------------------------------

    def _inbox_idle(self) -> None:
        """Nothing runs or waits (or a reflection ended): a cron fire or a client that left may
        let the runtime go."""
        if self.inbox.running is None:  # after an input whose turn broke before its end
            self._set_status("WAITING_ON_INPUT")
        if not self.subscribers:
            self.release_when_idle()

    async def begin(self, batch: Sequence[Submission], abort: asyncio.Event) -> TurnPlan:
        """The inbox starts `batch` (one input: the server does not coalesce)."""
        self._continue_fleet_seq()  # the lease may have come here since this runtime was built
        await self._sync_memory()  # the store's memory commits, before the prompt is built
        item = batch[0]
        if isinstance(item, QueuedInput) and item.announced:
            self.broadcast(self.queue_frame(removed=[item.id]))
        try:
            rebuild_if_untrusted(self)
        except TetherError as exc:
            self.broadcast(error_frame(f"cannot rebuild the runtime for its folder: {exc}"))
        self._turn = _Turn(f"turn-{uuid.uuid4().hex[:12]}", item)
        self.active_run_ids = []
        user = UserMessage(f"ui-msg-{now_ms()}-{item.id}", item.parts, now_ms())
        durable_inputs.mark(self, item.id, "started", user_message_id=user.id)
        return TurnPlan(
            user=user,
            emit=self._on_event, approver=RuntimeApprover(self),
            emit_recovered=self._broadcast_event,
            on_tool_start=self._tool_started, on_tool_end=self._tool_ended,
            on_store_unavailable=lambda _: abort.set(),  # no effect store: the turn stops, failed
            on_send=self._sending,
        )

    def _sending(self) -> None:
        self._sent_at = time.monotonic()  # /metrics' provider latency: until its first answer
        self._set_status("SENDING_API_REQUEST")

    def failed(self, batch: Sequence[Submission], exc: Exception) -> TurnOutcome:
        """A busy conversation, a damaged transcript, a fenced checkpoint, the disk — or a bug:
        the turn ends with the error and the runtime keeps serving its queue (a worker that
        died here would leave the conversation wedged for every client)."""
        from tether.backends.local.locks import state_failure

        turn = self._turn
        assert turn is not None
        disk = state_failure(exc)  # a full disk, a read-only TETHER_HOME: named, no traceback
        if disk is None and not isinstance(exc, TetherError):
            traceback.print_exc(file=sys.stderr)
        turn.error = disk or (str(exc) if isinstance(exc, TetherError) else (
            f"internal error ({type(exc).__name__}: {exc})"
        ))
        self.broadcast(self.stream.turn_failed(turn.id, turn.error))
        return TurnOutcome(stop_reason="error")

    async def end(self, batch: Sequence[Submission], outcome: TurnOutcome) -> bool:
        """`turn_finished` to every subscriber, the reflection started after a good turn, and a
        device change asked for during the turn applied."""
        turn, self._turn = self._turn, None
        assert turn is not None
        await self._sync_memory(changed_only=True)  # stored before any client hears "finished"
        for pending in self.approvals.values():
            pending.future.cancel()
        self.approvals.clear()
        self.executing.clear()
        error = turn.error
        unavailable = self.inbox.conversation.store_unavailable
        if unavailable is not None and error is None:
            error, outcome.stop_reason = unavailable, "error"
        if outcome.error is not None and error is None:
            error = outcome.error.message
        item = turn.item
        finished = TurnFinished(
            turn.id, outcome.stop_reason, tuple(outcome.run_ids),
            item.request_id if isinstance(item, QueuedInput) else None, error,
        )
        self.turns_finished += 1
        METRICS.turn_finished(outcome.stop_reason or "unknown")
        durable_inputs.mark(self, item.id, "done")
        self.active_run_ids = []
        self._set_status("WAITING_ON_INPUT")
        self.broadcast(self.stream.turn_finished(finished))
        for sub in list(self._event_subscribers.values()):
            sub.on_turn_finished(finished)
        if error is None and outcome.stop_reason == "end_turn":
            self.inbox.start_reflection()  # memory review, off the turn, before a rebuild
            self._push_memory_after_reflection()
        try:
            self._apply_device_state()
        except TetherError as exc:
            self.broadcast(error_frame(f"change_device_state: {exc}"))
        return False

    # --- the agent's memory in a fleet ---------------------------------------------------------

    async def _sync_memory(self, changed_only: bool = False) -> None:
        """In a fleet, bring this worker's copy of the agent's memory repo and the store's to
        one head, off the event loop. `changed_only`: only when the local head moved since the
        last sync (a turn's end: no query at all when the turn committed nothing)."""
        if self.ctx.fleet is None:
            return
        from tether.backends.postgres.memory_sync import MemoryRepos, sync_logged
        from tether.memory.memfs import MemFS, memory_dir

        agent = self.p.session.agent
        memfs = MemFS(memory_dir(self.ctx.store.home, agent.id), agent_id=agent.id,
                      agent_name=agent.name)
        if not memfs.exists:  # a hosted agent (its memory lives on its server), or git is off
            return
        if changed_only and memfs.revision() == self._memory_head:
            return
        session = self.ctx.fleet.leases.session
        synced = await asyncio.to_thread(sync_logged, memfs, MemoryRepos(session), session.worker)
        self._memory_head = synced.head

    def _push_memory_after_reflection(self) -> None:
        """The reflection commits to memory after `end`: its commits are stored when it ends
        (and, were that to fail, at the next turn's start)."""
        reflection = self.inbox.reflection
        if self.ctx.fleet is None or reflection is None or reflection.done():
            return

        def push(_: object) -> None:
            if self._closing:
                return
            task = asyncio.ensure_future(self._sync_memory(changed_only=True))
            self._memory_pushes.add(task)
            task.add_done_callback(self._memory_pushes.discard)

        reflection.add_done_callback(push)

    def _on_event(self, event: Event) -> None:
        status = self.status
        if isinstance(event, RetryNotice):
            status = "RETRYING_API_REQUEST"
        elif status in ("SENDING_API_REQUEST", "RETRYING_API_REQUEST") and hasattr(
            event, "message_type"
        ):
            status = "PROCESSING_API_RESPONSE"
            if self._sent_at is not None:
                METRICS.provider_answered(time.monotonic() - self._sent_at)
                self._sent_at = None
        run_id = getattr(event, "run_id", None)
        new_run = isinstance(run_id, str) and run_id not in self.active_run_ids
        if new_run:
            self.active_run_ids.append(run_id)  # type: ignore[arg-type]
        if new_run or status != self.status:
            self.status = status
            self.broadcast(self.loop_status_frame())
        for sub in list(self._event_subscribers.values()):
            sub.on_event(event)
        frame = self.stream.stream_delta(event)
        if frame is not None:
            self.broadcast(frame)

    def _tool_started(self, tool_call_id: str) -> None:
        self.executing.append(tool_call_id)
        run_id = self.active_run_ids[-1] if self.active_run_ids else None
        self.broadcast(self.stream.tool_lifecycle("client_tool_start", tool_call_id, run_id))
        self.status = "EXECUTING_CLIENT_SIDE_TOOL"
        self.broadcast(self.loop_status_frame())

    def _tool_ended(self, tool_call_id: str) -> None:
        if tool_call_id in self.executing:
            self.executing.remove(tool_call_id)
        run_id = self.active_run_ids[-1] if self.active_run_ids else None
        self.broadcast(self.stream.tool_lifecycle("client_tool_end", tool_call_id, run_id))
        self.status = "EXECUTING_CLIENT_SIDE_TOOL" if self.executing else "PROCESSING_API_RESPONSE"
        self.broadcast(self.loop_status_frame())

    async def close(self, timeout: float = 10.0) -> None:
        """Abort the running turn, drop what waits, stop the worker and what the runtime
        started."""
        await self.inbox.close(f"the runtime of {self.scope.conversation_id} closed", timeout=timeout)


@dataclass
class _Turn:
    """The turn running now: its id on the wire, its input, the error that ended it."""

    id: str
    item: Submission
    error: str | None = field(default=None)
