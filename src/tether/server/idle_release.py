"""Releasing idle conversation runtimes from the App Server and rebuilding them from disk
(issue 22 item 5): when a runtime is idle, what survives its release (`Kept`, bounded), and the
server table's side of it. Memory then follows the active conversations, not every one ever
opened."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tether.runtime.session import gc_policy

if TYPE_CHECKING:
    from tether.server.protocol_v2 import RuntimeScope
    from tether.server.runtime import ConversationRuntime
    from tether.server.runtime_start import ServerContext
    from tether.server.v2_frames import InputAnswer

# How many released conversations' small state the server remembers (oldest forgotten first).
KEPT_RUNTIMES = 4096
KEPT_KEYS = 64  # idempotency keys a released runtime keeps answering "duplicate" for


@dataclass(frozen=True, slots=True)
class Kept:
    """What must survive a runtime's release, for the one rebuilt from disk: the event stream
    goes on after `last_seq` (idempotency keys stay unique), recent idempotency keys still
    answer "duplicate", and the mode, folder and session allow rules a client chose hold."""

    last_seq: int
    seen: tuple[tuple[str, InputAnswer], ...]
    mode: str
    cwd: Path
    session_allow: tuple[Any, ...]
    sandboxed: bool
    interrupted: tuple[Any, ...] = ()  # inputs a restart found begun (durable_inputs), reported


def runtime_idle(rt: ConversationRuntime) -> bool:
    """Nobody watches and nothing is running or waiting: no subscriber, no turn, an empty
    queue, no pending approval or device change, reflection done, no background task or
    subagent running."""
    if rt.subscribers or rt.busy or rt.queue or rt.approvals or rt._closing:
        return False
    if rt._pending_state is not None:
        return False
    if rt._reflection is not None and not rt._reflection.done():
        return False
    for service in (rt.p.services.background, rt.p.services.subagents):
        if service is not None and any(t.running for t in service.tasks()):
            return False
    return True


def kept_of(rt: ConversationRuntime) -> Kept:
    policy = rt.p.policy
    return Kept(
        last_seq=rt.stream.last_seq,
        seen=tuple(rt.seen.items())[-KEPT_KEYS:],
        mode=rt.p.flags.permission_mode,
        cwd=rt.p.cwd,
        session_allow=policy.rules.session_allow if policy is not None else (),
        sandboxed=rt.sandboxed,
        interrupted=tuple(rt.interrupted),
    )


def restore(rt: ConversationRuntime, kept: Kept) -> None:
    """Carry on from a released runtime of the same conversation."""
    rt.stream.resume_after(kept.last_seq)
    rt.seen.update(kept.seen)
    rt.interrupted.extend(kept.interrupted)
    if rt.p.policy is not None:
        for rule in kept.session_allow:
            rt.p.policy.add_session_allow(rule)


def register_runtime(
    ctx: ServerContext, runtimes: dict[RuntimeScope, ConversationRuntime], rt: ConversationRuntime
) -> None:
    """Put a new runtime into the server's table, with what its release does: forget it there,
    keep its `Kept` state (bounded) to give back to a rebuilt one, and close it."""
    scope = rt.scope
    kept = ctx.released.pop(scope, None)
    if kept is not None:
        restore(rt, kept)
    runtimes[scope] = rt

    def release(gone: ConversationRuntime) -> None:
        if runtimes.get(scope) is gone:
            del runtimes[scope]
        ctx.released[scope] = kept_of(gone)
        ctx.store.forget(scope.agent_id, scope.conversation_id)  # its history: read again if used
        while len(ctx.released) > KEPT_RUNTIMES:
            ctx.released.popitem(last=False)
        closing = asyncio.ensure_future(gone.close())
        # Counted once closed, when nothing runs on its behalf: the deep collection this may
        # trigger then finds the runtime unreachable and frees its cycles.
        closing.add_done_callback(lambda _: gc_policy.released(len(runtimes)))

    rt.on_release = release
