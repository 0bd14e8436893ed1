"""The turn loop: send, stream, classify proposed tool calls, run the admitted ones, continue.

One user turn is several backend sends: each send is one provider call; while the model stops
with `requires_approval` the engine answers every call (result or denial) and sends those
answers as the next input, until `end_turn`, a limit, an interrupt or an error.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field, replace
from typing import Protocol

from tether.core.approvals import DecideFn, JudgedCall, classify_approvals
from tether.core.execution import (
    INTERRUPTED,
    RunContextFactory,
    ToolHooks,
    execute_batch,
)
from tether.core.permissions import Decision
from tether.core.tools import ToolContext
from tether.protocol.chunks import (
    AssistantText,
    Chunk,
    ErrorChunk,
    Reasoning,
    StopReason,
    ToolCallRequest,
    UsageStatistics,
    now_ms,
)
from tether.protocol.messages import TextPart, UserMessage
from tether.protocol.tool_calls import ToolCall, ToolReturn
from tether.protocol.turns import (
    ConversationRef,
    LocalToolCall,
    LocalToolReturn,
    TurnError,
    TurnInput,
    TurnOutcome,
)
from tether.protocol.turns import TurnEvent as Event  # the name frontends import from here


class Backend(Protocol):
    """Where a conversation lives: one provider call per `send`, the harness drives the loop."""

    def send(
        self, conversation: ConversationRef, turn_input: TurnInput, ctx: ToolContext
    ) -> AsyncIterator[Chunk]:
        """Persist the input, call the model once, persist its answer; ends with a StopReason."""
        ...

    async def record(self, conversation: ConversationRef, turn_input: TurnInput) -> None:
        """Persist input without calling the model (answers that must not be stranded)."""
        ...


@dataclass(frozen=True, slots=True)
class ApprovalAnswer:
    allow: bool
    message: str = ""
    updated_input: dict | None = None
    interrupt: bool = False


class PermissionHooks(Protocol):
    """Consulted while a call is still `ask`, before any human or client is (PermissionRequest)."""

    async def decide(self, item: JudgedCall) -> tuple[str, str] | None:
        """("allow" | "deny", reason), or None to leave the call to the approver."""
        ...


class TurnEvents(Protocol):
    """Lifecycle points mods observe and steer (runtime/extensions/mods); tool points go through ToolHooks."""

    async def turn_start(self, user: UserMessage) -> UserMessage | str:
        """The message to send (maybe rewritten), or a string: why the turn is cancelled."""
        ...

    async def turn_end(self, outcome: TurnOutcome) -> str | None:
        """After `end_turn`: text to send as the next user message, or None to finish."""
        ...

    async def llm_start(self, turn_input: TurnInput) -> None: ...

    async def llm_end(self, stop: StopReason | None, outcome: TurnOutcome) -> None: ...


class Approver(Protocol):
    """Who answers `ask`: a headless policy, an SDK over stream-json, a TUI dialog, a client."""

    async def ask(self, item: JudgedCall, ctx: ToolContext) -> ApprovalAnswer: ...


@dataclass(slots=True)
class TurnDeps:
    backend: Backend
    snapshot: Callable[[], ToolContext]
    decide: DecideFn
    approver: Approver
    make_run_context: RunContextFactory
    emit: Callable[[Event], None]
    abort: asyncio.Event = field(default_factory=asyncio.Event)
    max_turns: int | None = None
    tool_hooks: ToolHooks | None = None
    permission_hooks: PermissionHooks | None = None
    events: TurnEvents | None = None
    # Awaited before the first send of every turn: tool sources that start in the background
    # (MCP servers) get to finish, each within its own bound.
    before_turn: Callable[[], Awaitable[None]] | None = None


async def run_turn(deps: TurnDeps, conversation: ConversationRef, user: UserMessage) -> TurnOutcome:
    out = TurnOutcome()
    if deps.events is not None:
        started = await deps.events.turn_start(user)
        if isinstance(started, str):
            out.vetoed = True
            return _fail(deps, out, started, "cancelled")
        user = started
    turn_input = TurnInput(user=user)
    if deps.before_turn is not None:
        await deps.before_turn()
    while True:
        if not turn_input.approvals and _limit_reached(deps, out):
            return _fail(
                deps,
                out,
                f"Maximum turns limit reached ({out.steps}/{deps.max_turns} steps)",
                "max_steps",
            )
        ctx = deps.snapshot()
        if deps.events is not None:
            await deps.events.llm_start(turn_input)
        calls, stop = await _stream_step(deps, conversation, turn_input, ctx, out)
        if deps.events is not None:
            await deps.events.llm_end(stop, out)
        if deps.abort.is_set():
            return _fail(deps, out, "Interrupted by SIGINT", "cancelled")
        if stop is None or stop.stop_reason not in ("end_turn", "requires_approval"):
            if out.error is None:
                reason = stop.stop_reason if stop else "error"
                return _fail(deps, out, f"Turn ended with stop reason {reason}", reason)
            return out
        if stop.stop_reason == "end_turn":
            out.stop_reason = "end_turn"
            follow = await deps.events.turn_end(out) if deps.events is not None else None
            if not follow:
                return out
            # A mod's continuation is the next user message; --max-turns counts it like any send.
            turn_input = TurnInput(user=UserMessage(f"ui-msg-{now_ms()}", (TextPart(follow),), now_ms()))
            continue
        if not calls:
            return _fail(deps, out, "Model requested approval without any tool call", "error")
        answers = await _answer_calls(deps, calls, ctx)
        if deps.abort.is_set():
            await deps.backend.record(
                conversation, TurnInput(approvals=_settle_interrupted(calls, answers))
            )
            return _fail(deps, out, "Interrupted by SIGINT", "cancelled")
        if answers.interrupt:
            await deps.backend.record(conversation, TurnInput(approvals=tuple(answers.results)))
            return _fail(deps, out, "Interrupted by the approval response", "cancelled")
        turn_input = TurnInput(approvals=tuple(answers.results))
        if _limit_reached(deps, out):
            # Answer the calls durably first, so the limit never strands a tool call.
            await deps.backend.record(conversation, turn_input)
            return _fail(
                deps,
                out,
                f"Maximum turns limit reached ({out.steps}/{deps.max_turns} steps)",
                "max_steps",
            )


async def _stream_step(
    deps: TurnDeps,
    conversation: ConversationRef,
    turn_input: TurnInput,
    ctx: ToolContext,
    out: TurnOutcome,
) -> tuple[list[ToolCall], StopReason | None]:
    calls: list[ToolCall] = []
    stop: StopReason | None = None
    text_run: str | None = None

    async def consume() -> None:
        nonlocal stop, text_run
        async for chunk in deps.backend.send(conversation, turn_input, ctx):
            if chunk.run_id and chunk.run_id not in out.run_ids:
                out.run_ids.append(chunk.run_id)
            if isinstance(chunk, AssistantText):
                if text_run != chunk.otid:
                    out.last_text, text_run = "", chunk.otid
                out.last_text += chunk.content
            elif isinstance(chunk, Reasoning):
                out.last_reasoning += chunk.reasoning
            elif isinstance(chunk, ToolCallRequest):
                calls.append(chunk.call)
            elif isinstance(chunk, UsageStatistics):
                out.steps += chunk.step_count
                out.usage += chunk.usage
            elif isinstance(chunk, ErrorChunk):
                out.error = TurnError(chunk.message, "llm_api_error", chunk.run_id, chunk)
            elif isinstance(chunk, StopReason):
                stop = chunk
            deps.emit(chunk)

    task = asyncio.ensure_future(consume())
    aborted = asyncio.ensure_future(deps.abort.wait())
    try:
        await asyncio.wait({task, aborted}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        aborted.cancel()
        if not task.done():
            task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            pass
    if out.error is not None:
        out.stop_reason = out.error.stop_reason
        deps.emit(out.error)
    return calls, stop


@dataclass(slots=True)
class _Answers:
    results: list[ToolReturn]
    interrupt: bool = False


async def _answer_calls(deps: TurnDeps, calls: list[ToolCall], ctx: ToolContext) -> _Answers:
    answers: dict[str, ToolReturn] = {}
    admitted: list[JudgedCall] = []
    interrupt = False
    for item in classify_approvals(calls, ctx, deps.decide):
        call = item.call
        deps.emit(LocalToolCall(call))
        if item.verdict == "ask" and not item.decision.sticky and deps.permission_hooks is not None:
            hooked = await deps.permission_hooks.decide(item)
            if hooked is not None and hooked[0] == "allow":
                admitted.append(item)
                continue
            if hooked is not None:
                answers[call.id] = _denial(call, hooked[1])
                continue
        if item.verdict == "ask":
            reply = await deps.approver.ask(item, ctx)
            if reply.allow:
                if reply.updated_input is not None and item.tool is not None:
                    # Rewritten arguments are a new call: nothing lifts a deny, not even a human.
                    again = deps.decide(item.tool, reply.updated_input, ctx)
                    if again.verdict == "deny":
                        answers[call.id] = _denial(call, again.reason)
                        continue
                    item = replace(item, decision=again, args=reply.updated_input)
                elif reply.updated_input is not None:
                    item = replace(item, args=reply.updated_input)
                admitted.append(item)
                continue
            interrupt = interrupt or reply.interrupt
            answers[call.id] = _denial(call, reply.message)
        elif item.verdict == "deny":
            answers[call.id] = _denial(call, item.decision.reason)
        else:  # what no rule, mode or human admitted runs inside the read-only sandbox
            admitted.append(replace(item, confined=item.decision.confine))
    for result in answers.values():
        deps.emit(LocalToolReturn(result))
    if admitted and not interrupt:
        executed = await execute_batch(
            admitted,
            ctx,
            deps.make_run_context,
            deps.abort,
            lambda r: deps.emit(LocalToolReturn(r)),
            deps.tool_hooks,
            deps.decide,
            lambda item, decision: _reask(deps, ctx, item, decision),
        )
        answers.update((r.tool_call_id, r) for r in executed)
    for call in calls:  # every call is answered, even when an interrupt skipped execution
        answers.setdefault(call.id, _denial(call, INTERRUPTED))
    return _Answers([answers[c.id] for c in calls], interrupt)


async def _reask(deps: TurnDeps, ctx: ToolContext, item: JudgedCall, decision: Decision) -> bool:
    """Ask the approver about a call whose input a hook rewrote into one that needs approval."""
    reply = await deps.approver.ask(replace(item, decision=decision), ctx)
    return reply.allow and reply.updated_input is None


def _denial(call: ToolCall, reason: str) -> ToolReturn:
    return ToolReturn(call.id, call.name, reason or "Tool execution denied.", True, denied=True)


def _settle_interrupted(calls: list[ToolCall], answers: _Answers) -> tuple[ToolReturn, ...]:
    return (
        tuple(answers.results) if answers.results else tuple(_denial(c, INTERRUPTED) for c in calls)
    )


def _limit_reached(deps: TurnDeps, out: TurnOutcome) -> bool:
    return deps.max_turns is not None and out.steps >= deps.max_turns


def _fail(deps: TurnDeps, out: TurnOutcome, message: str, stop_reason: str) -> TurnOutcome:
    out.stop_reason = stop_reason
    out.error = TurnError(message, stop_reason, out.run_ids[-1] if out.run_ids else None)
    deps.emit(out.error)
    return out
