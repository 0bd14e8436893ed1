"""How an App Server conversation asks for approval: `ask` becomes a `control_request
{can_use_tool}` to every subscriber of the runtime and the first `approval_response` settles it;
a call into tether's own state is refused before anyone is asked."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tether.core.approvals import JudgedCall
from tether.core.tools import ToolContext
from tether.core.turn import ApprovalAnswer
from tether.server.protocol_v2 import ApprovalResponse

if TYPE_CHECKING:
    from tether.server.runtime import ConversationRuntime


@dataclass
class PendingApproval:
    request_id: str
    frame: dict[str, Any]
    future: asyncio.Future[ApprovalResponse] = field(
        default_factory=lambda: asyncio.get_running_loop().create_future()
    )


class RuntimeApprover:
    """`ask` becomes a control_request{can_use_tool} to every subscriber; the first
    approval_response answers it. An abort answers it with "Cancelled by user"."""

    def __init__(self, runtime: ConversationRuntime) -> None:
        self.rt = runtime

    async def ask(self, item: JudgedCall, ctx: ToolContext) -> ApprovalAnswer:
        from tether.runtime.turns.diffs import can_use_tool_request

        rt = self.rt
        call = item.call
        guards = rt.p.policy.guards if rt.p.policy is not None else None
        own = (rt.p.scratch, *(guards.own_agent_dirs if guards is not None else ()))
        refusal = _state_refusal(item, ctx, rt.ctx.store.home, own)
        if refusal is not None:  # never put to a client: whoever answers could say yes
            return ApprovalAnswer(False, refusal)
        request_id = f"perm-{call.id}"
        request = can_use_tool_request(item, ctx.cwd)
        previous = rt.status
        rt._set_status("WAITING_ON_APPROVAL")
        frame = rt.stream.control_request(request_id, request)
        pending = PendingApproval(request_id, frame)
        rt.approvals[request_id] = pending
        rt.broadcast(frame)
        from tether.server.runtime import EventSubscriber  # here: runtime.py imports this module

        for sub in list(rt.subscribers.values()):
            if isinstance(sub, EventSubscriber):  # the OpenAI bridge: the approval, typed
                sub.on_approval_request(request_id, call.name, item.decision.reason)
        abort = rt.abort_event
        waiters: set[asyncio.Future[Any]] = {pending.future}
        aborted = asyncio.ensure_future(abort.wait()) if abort is not None else None
        if aborted is not None:
            waiters.add(aborted)
        try:
            await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
        finally:
            if aborted is not None:
                aborted.cancel()
            rt.approvals.pop(request_id, None)
        rt._set_status(previous if previous != "WAITING_ON_APPROVAL" else "PROCESSING_API_RESPONSE")
        if not pending.future.done() or pending.future.cancelled():
            return ApprovalAnswer(False, "Cancelled by user", interrupt=True)
        response = pending.future.result()
        if response.allow:
            return ApprovalAnswer(True, response.message, response.updated_input)
        return ApprovalAnswer(False, response.message)


def _state_refusal(
    item: JudgedCall, ctx: ToolContext, home: Path, own: tuple[Path, ...]
) -> str | None:
    """A file-tool call that would reach tether's own state (`$TETHER_HOME`: credentials, other
    conversations, checkpoints) other than the conversation's scratch directory and its agent's
    own memory (`own`) is refused
    before any client is asked: App Server clients answer their own approvals, and a scoped
    one must not be able to approve its way into what its token does not grant. (Shell
    commands are bounded by the sandbox, which hides `$TETHER_HOME`.)"""
    if item.tool is None:
        return None
    try:
        paths = item.tool.paths(item.args, ctx.cwd)
    except Exception:  # arguments the tool cannot read: the tool reports them when it runs
        return None
    state = home.resolve()
    mine = tuple(p.resolve() for p in own)
    for path in paths:
        try:
            real = Path(path).resolve()
        except (OSError, ValueError):
            continue
        if real.is_relative_to(state) and not any(real.is_relative_to(m) for m in mine):
            return (
                f"Permission denied: {path} is tether's own state (under {state}), which no "
                "App Server conversation may read or write"
            )
    return None
