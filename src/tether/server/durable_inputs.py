"""The App Server's side of the durable input queue (`runtime/turns/input_queue.py`): an input is
recorded before `input_accepted` (or the OpenAI bridge's turn, or a cron fire's `queued`) says
so, its state follows its turn, an idempotency key answers `duplicate` across restarts, and a
starting server resumes what a dead one left, in order, exactly once.

At resume, the transcript decides: an input whose user message is already in it had its turn
begin in the dead process, so its outcome is unknown and it is not run again — it is reported
(`interrupted_inputs` in `runtime_start_response`, and the state a retried key answers with);
every other unfinished input is queued again, in its original order, before the server takes
any new input.
"""

from __future__ import annotations

import asyncio
import dataclasses
import re
import sys
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tether.errors import TetherError
from tether.runtime.turns.input_queue import StoredInput, StoredMessage, Workspace

if TYPE_CHECKING:
    from tether.runtime.turns.input_queue import InputQueue
    from tether.server.app_server import AppServer
    from tether.server.protocol_v2 import RuntimeScope
    from tether.server.runtime import ConversationRuntime, QueuedInput
    from tether.server.v2_frames import InputAnswer

# A duplicate's answer says where the first input is now.
_STATE_ON_WIRE = {"queued": "queued", "started": "running", "done": "done",
                  "cancelled": "cancelled", "interrupted": "interrupted", "not_run": "not_run"}
INTERRUPTED = (
    "the server stopped while this input's turn ran; it was not run again (its turn may have "
    "completed in part: see the conversation)"
)
SEEN_KEYS = 1024  # idempotency keys a runtime remembers in memory
_ITEM_OF_MESSAGE = re.compile(rb'"id":\s*"ui-msg-\d+-(q-[0-9a-f]+)"')  # a user message's id


@dataclass(slots=True)
class InterruptedInput:
    """An input a restart found begun but unfinished: reported, never re-run."""

    queue_item_id: str
    request_id: str | None
    idempotency_key: str | None
    client_message_ids: tuple[str, ...]
    source: str
    reason: str


def conversation_key(scope: RuntimeScope) -> str:
    return f"{scope.agent_id}/{scope.conversation_id}"


def queue_of(rt: ConversationRuntime) -> InputQueue | None:
    return rt.ctx.inputs


def repeated(rt: ConversationRuntime, key: str, *, durable: bool = True) -> InputAnswer | None:
    """The answer to a repeated idempotency key: the first input's, marked duplicate, with
    where that input is now when the queue knows it (across restarts too). A `durable=False`
    key (a request_id standing in for one) is answered from this process's memory only."""
    from tether.server.v2_frames import InputAnswer

    queue = queue_of(rt) if durable else None
    try:
        stored = queue.by_key(conversation_key(rt.scope), key) if queue is not None else None
    except TetherError:  # an unreadable queue: what this process remembers still answers
        queue = stored = None
    if queue is None:
        return dataclasses.replace(rt.seen[key], duplicate=True) if key in rt.seen else None
    if stored is None:
        return None
    return InputAnswer(
        True, stored.disposition, stored.item_id, duplicate=True,
        state=_STATE_ON_WIRE.get(stored.state, stored.state), reason=stored.reason,
    )


def first_request_id(rt: ConversationRuntime, key: str) -> str | None:
    """The request id of the input that holds idempotency key `key`."""
    queue = queue_of(rt)
    try:
        stored = queue.by_key(conversation_key(rt.scope), key) if queue is not None else None
    except TetherError:
        return None
    return stored.request_id if stored is not None else None


def remember(rt: ConversationRuntime, key: str, answer: InputAnswer) -> None:
    """Keep the answer to `key` in memory too (what a runtime without a queue, and `Kept`
    across an idle release, answer from)."""
    rt.seen[key] = answer
    while len(rt.seen) > SEEN_KEYS:
        rt.seen.popitem(last=False)


def stored_of(rt: ConversationRuntime, item: QueuedInput, disposition: str) -> StoredInput:
    """What the queue keeps of `item`: its messages, key, and where its conversation runs."""
    from tether.protocol.messages import part_to_dict

    flags = rt.p.flags
    return StoredInput(
        conversation=conversation_key(rt.scope), item_id=item.id, source=item.source,
        disposition=disposition,
        messages=tuple(
            StoredMessage(m.client_message_id, m.content, tuple(part_to_dict(p) for p in m.parts))
            for m in item.messages
        ),
        workspace=Workspace(
            str(rt.p.cwd), flags.permission_mode if flags.permission_mode_given else None,
            rt.sandboxed, _external_tools(rt),
        ),
        idempotency_key=item.idempotency_key if item.key_given else None,
        request_id=item.request_id, enqueued_at=item.enqueued_at,
    )


def _external_tools(rt: ConversationRuntime) -> tuple[dict[str, Any], ...]:
    from tether.server.external_tools import ServerExternalTool

    return tuple(
        {"scope_id": t.spec.scope_id, "name": t.spec.name, "description": t.spec.description,
         "parameters": t.spec.parameters}
        for t in rt.p.registry.tools().values() if isinstance(t, ServerExternalTool)
    )


def _register_external_tools(server: AppServer, rt: ConversationRuntime, ws: Workspace) -> None:
    """The client tools the conversation had, served by nobody yet: a call waits (the broker's
    grace) for the client to come back and register them again."""
    from tether.server.external_tools import ExternalToolSpec, ServerExternalTool

    for t in ws.external_tools:
        if rt.p.registry.get(t["name"]) is None:
            spec = ExternalToolSpec(t["scope_id"], t["name"], t["description"], t["parameters"])
            rt.p.registry.register(ServerExternalTool(server.external, rt.scope, spec))


def record(rt: ConversationRuntime, item: QueuedInput, disposition: str) -> str | None:
    """Put `item` on disk before it is acknowledged, on this thread (a cron fire: rare); the
    refusal's text if it cannot be, "key" if its idempotency key is taken."""
    queue = queue_of(rt)
    if queue is None:
        return None
    try:
        return queue.accept_many([stored_of(rt, item, disposition)])[0]
    except TetherError as exc:
        return str(exc)


async def record_grouped(rt: ConversationRuntime, item: QueuedInput, disposition: str) -> str | None:
    """`record`, with the fsync off the event loop and shared by the inputs that arrive while
    the previous commit runs (one commit per batch, in arrival order)."""
    queue = queue_of(rt)
    if queue is None:
        return None
    writer = rt.ctx.input_writer
    if writer is None:
        writer = rt.ctx.input_writer = GroupCommit(queue)
    try:
        return await writer.accept(stored_of(rt, item, disposition))
    except TetherError as exc:
        return str(exc)


class GroupCommit:
    """One writer thread committing the inputs that wait, all at once: each caller resumes
    after the commit that holds its input, in arrival order."""

    def __init__(self, queue: InputQueue) -> None:
        from concurrent.futures import ThreadPoolExecutor

        self.queue = queue
        self._pending: list[tuple[StoredInput, asyncio.Future[str | None]]] = []
        self._writer: asyncio.Future[None] | None = None
        self._thread = ThreadPoolExecutor(1, thread_name_prefix="tether-inputs")

    async def accept(self, item: StoredInput) -> str | None:
        done: asyncio.Future[str | None] = asyncio.get_running_loop().create_future()
        self._pending.append((item, done))
        if self._writer is None or self._writer.done():
            self._writer = asyncio.ensure_future(self._drain())
        return await done

    async def _drain(self) -> None:
        loop = asyncio.get_running_loop()
        while self._pending:
            batch, self._pending = self._pending, []
            try:
                results = await loop.run_in_executor(
                    self._thread, self.queue.accept_many, [item for item, _ in batch]
                )
            except Exception as exc:
                for _, done in batch:
                    if not done.done():
                        done.set_exception(exc)
                continue
            for (_, done), result in zip(batch, results, strict=True):
                if not done.done():
                    done.set_result(result)

    def mark(self, conversation: str, item_id: str, state: str, **fields: Any) -> bool:
        """Queue a mark behind the commits already handed to the thread; False once closed."""
        try:
            self._thread.submit(_mark_now, self.queue, conversation, item_id, state, **fields)
        except RuntimeError:  # shut down
            return False
        return True

    def close(self) -> None:
        self._thread.shutdown(wait=True)


def mark(rt: ConversationRuntime, item_id: str, state: str, **fields: Any) -> None:
    """Follow an input's state, in the writer thread when there is one (after the input's own
    commit, never waiting for the next one on the loop); a failing disk is reported, never
    fatal to the turn (the transcript still decides at the next restart)."""
    queue = queue_of(rt)
    if queue is None:
        return
    conversation = conversation_key(rt.scope)
    writer = rt.ctx.input_writer
    if writer is not None and writer.mark(conversation, item_id, state, **fields):
        return
    _mark_now(queue, conversation, item_id, state, **fields)


def _mark_now(queue: InputQueue, conversation: str, item_id: str, state: str, **fields: Any) -> None:
    try:
        queue.mark(conversation, item_id, state, **fields)
    except TetherError as exc:
        sys.stderr.write(f"tether: input {item_id}: {exc}\n")


def item_of(stored: StoredInput) -> QueuedInput:
    """The queue item a stored input was (same id: its user message names it)."""
    from tether.protocol.messages import part_from_dict
    from tether.server.protocol_v2 import NewMessage
    from tether.server.runtime import QueuedInput

    messages = tuple(
        NewMessage(
            m.client_message_id,
            tuple(part_from_dict(p, "stored input") for p in m.parts),  # type: ignore[misc]
            m.content,
        )
        for m in stored.messages
    )
    return QueuedInput(
        id=stored.item_id, idempotency_key=stored.idempotency_key or stored.request_id,
        key_given=stored.idempotency_key is not None, request_id=stored.request_id,
        messages=messages, enqueued_at=stored.enqueued_at, source=stored.source,
        parts=tuple(p for m in messages for p in m.parts), announced=True,
    )


# --- resuming what a dead server left ---------------------------------------------------------


def resume_inputs(server: AppServer) -> int:
    """Claim the unfinished inputs of dead owners and queue them again (or report them), each
    conversation's in order, before the server listens. Returns how many were queued."""
    queue = server.ctx.inputs
    if queue is None:
        return 0
    try:
        orphans = queue.claim_orphans()
    except TetherError as exc:
        sys.stderr.write(f"tether: cannot resume queued inputs: {exc}\n")
        return 0
    return resume_stored(server, orphans)


def resume_stored(server: AppServer, orphans: Sequence[StoredInput]) -> int:
    """Queue `orphans` (claimed by this server) again or report them, per conversation in
    order: at start-up, or when a fleet worker takes over a dead one's (`fleet_leases.FleetLeases.sweep_once`)."""
    queue = server.ctx.inputs
    if queue is None or not orphans:
        return 0
    groups: dict[str, list[StoredInput]] = {}
    for stored in orphans:
        groups.setdefault(stored.conversation, []).append(stored)
    queued = 0
    for conversation, items in groups.items():
        queued += _resume_conversation(server, queue, conversation, items)
    if orphans:  # the operator hears of it too, not only the clients that come back
        sys.stderr.write(
            f"tether: resumed {queued} of {len(orphans)} input(s) a stopped server left in "
            f"{len(groups)} conversation(s); the rest are reported interrupted or not run\n"
        )
    return queued


def _resume_conversation(
    server: AppServer, queue: InputQueue, conversation: str, items: Sequence[StoredInput]
) -> int:
    from tether.server.auth import FULL_GRANT
    from tether.server.protocol_v2 import RuntimeStart
    from tether.server.runtime_start import start_runtime

    agent_id, _, conversation_id = conversation.partition("/")
    ws = items[-1].workspace  # where the conversation last took input
    frame = RuntimeStart(
        request_id=f"resume-{uuid.uuid4().hex[:8]}", agent_id=agent_id, create_agent=None,
        conversation_id=conversation_id, create_conversation=None, cwd=ws.cwd, mode=ws.mode,
        workspace_sandbox=ws.sandboxed,
    )
    try:
        rt, _ = start_runtime(server.ctx, server.runtimes, server.instance, FULL_GRANT, frame)
        _register_external_tools(server, rt, ws)
        begun = _begun_items(rt)
    except (TetherError, OSError) as exc:
        why = f"the server restarted and could not resume this conversation: {exc}"
        sys.stderr.write(f"tether: {conversation}: {len(items)} queued input(s) not run: {exc}\n")
        for stored in items:
            _mark_now(queue, conversation, stored.item_id, "not_run", reason=why)
        return 0
    again: list[StoredInput] = []
    for stored in items:
        if stored.item_id in begun:
            _mark_now(queue, conversation, stored.item_id, "interrupted", reason=INTERRUPTED)
            rt.interrupted.append(InterruptedInput(
                stored.item_id, stored.request_id, stored.idempotency_key,
                tuple(m.client_message_id for m in stored.messages), stored.source, INTERRUPTED,
            ))
            continue
        if stored.state != "queued":
            _mark_now(queue, conversation, stored.item_id, "queued")
        again.append(stored)
    # At the front, last first: in their order, past `--max-queue` if it shrank since (they
    # were accepted), and nothing can run between these puts (no await).
    for stored in reversed(again):
        rt.inbox.put(item_of(stored), front=True)
    for stored in again:
        watch_unattended(rt, stored)
    return len(again)


def watch_unattended(rt: ConversationRuntime, stored: StoredInput) -> None:
    """An OpenAI API request's input run here with its HTTP client not here (gone after a
    restart, or waiting on another worker of the fleet): its asks are denied as the bridge
    would (nobody can answer them over that API), so the turn never waits for an answer."""
    if stored.source == "openai":
        from tether.server.turn_watch import ResumedWatch

        rt.subscribe(ResumedWatch(rt, stored.request_id, stored.item_id))


def _begun_items(rt: ConversationRuntime) -> set[str]:
    """Queue item ids whose user message the conversation's transcript file holds: read from
    the file's bytes, not the active view, so a compaction or an edit that replaced the
    message since still counts (the message was sent)."""
    scope = rt.scope
    transcript = rt.p.store.transcript(scope.agent_id, scope.conversation_id)
    data = transcript.written_bytes()
    return {m.decode() for m in _ITEM_OF_MESSAGE.findall(data)}
