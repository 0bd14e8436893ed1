"""The conversation requests beyond CRUD (reference §12.3): `conversation_messages_list`, a
conversation's messages in Letta's shape (`message_type` user_message, assistant_message, …)
as `tether messages list --format letta` prints them; `conversation_fork`, a new conversation
of the agent starting from a copy of its history; `conversation_compact`, a summary of the
older history now (`tether compact`); `conversation_recompile`, its system prompt compiled
again from the memory's HEAD. The last two run on this server's runtime of the conversation
when it has one (refused while it runs a turn), else on one built for the call, as the CLI's."""

from __future__ import annotations

import asyncio
import contextlib
import tempfile
from collections.abc import AsyncIterator
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tether.errors import UsageError
from tether.runtime.manage import conversations
from tether.server.request_kit import Call, Request, RequestFailed, Scope, request

if TYPE_CHECKING:
    from tether.backends.local.records import ConversationRecord
    from tether.runtime.session.prepared import Prepared

MESSAGES_QUERY = ("limit", "order", "before", "after")


def conversation_messages_list(call: Call) -> dict[str, Any]:
    record = call.conversation(call.text("conversation_id"), call.opt_text("agent_id"))
    query = call.obj("query")
    unknown = sorted(set(query) - set(MESSAGES_QUERY))
    if unknown:
        raise UsageError(
            f"query.{unknown[0]} is not supported here (known: {', '.join(MESSAGES_QUERY)})"
        )
    limit = query.get("limit", 50)
    if isinstance(limit, bool) or not isinstance(limit, int) or not 1 <= limit <= 10_000:
        raise UsageError(f"query.limit must be a whole number from 1 to 10000, got {limit!r}")
    cursors: dict[str, str | None] = {}
    for name in ("before", "after"):
        value = query.get(name)
        if value is not None and not isinstance(value, str):
            raise UsageError(f"query.{name} must be a message id string")
        cursors[name] = value
    order = query.get("order", "asc")
    if not isinstance(order, str):
        raise UsageError("query.order must be asc or desc")
    messages = conversations.letta_message_page(
        call.store, record, limit=limit, order=order, **cursors
    )
    return {"messages": messages}


def _body(call: Call, allowed: tuple[str, ...]) -> dict[str, Any]:
    body = call.obj("body")
    unknown = sorted(set(body) - set(allowed))
    if unknown:
        raise UsageError(f"body.{unknown[0]} is not supported here (known: {', '.join(allowed)})")
    agent_id = body.get("agent_id")
    if agent_id is not None and not isinstance(agent_id, str):
        raise UsageError("body.agent_id must be an agent id string")
    return body


@contextlib.asynccontextmanager
async def _prepared(call: Call, record: ConversationRecord) -> AsyncIterator[Prepared]:
    """This server's idle runtime of the conversation, or one built for this call and shut
    down after it; refused while a turn runs here or in another process (the turn lock)."""
    from tether.server.protocol_v2 import RuntimeScope
    from tether.server.runtime_start import build_prepared

    scope = RuntimeScope(record.agent_id, record.id)
    running = call.server.runtimes.get(scope)
    if running is not None and running.busy:
        raise RequestFailed(f"conversation {record.id} is running a turn; try when it ends")
    built = None
    if running is None:
        kept = call.server.ctx.released.get(scope)  # a released runtime's folder, if any
        cwd = kept.cwd if kept is not None else call.server.ctx.default_cwd
        built = await asyncio.to_thread(build_prepared, call.server.ctx, scope, cwd, None)
    prepared = running.p if running is not None else built
    assert prepared is not None
    try:
        with prepared.store.turn_lock(record.agent_id, record.id):
            yield prepared
    finally:
        if built is not None:
            await built.shutdown()


def conversation_fork(call: Call) -> dict[str, Any]:
    body = _body(call, ("agent_id", "hidden"))
    record = call.conversation(call.text("conversation_id"), body.get("agent_id"))
    if call.grant.conversations is not None:
        raise RequestFailed("this connection's token may not create conversations (it is "
                            "scoped to conversations)")
    hidden = body.get("hidden", False)
    if not isinstance(hidden, bool):
        raise UsageError("body.hidden must be true or false")
    running = [rt for s, rt in call.server.runtimes.items()
               if (s.agent_id, s.conversation_id) == (record.agent_id, record.id)]
    if any(rt.busy for rt in running):
        raise RequestFailed(f"conversation {record.id} is running a turn; fork it when it ends")
    created = conversations.fork_conversation(call.store, record, hidden=hidden)
    call.notify("conversation_updated", agent_id=record.agent_id, conversation_id=created["id"],
                conversation=created)
    return {"conversation": {"id": created["id"]}}


async def conversation_compact(call: Call) -> dict[str, Any]:
    from tether.backends.local.backend import LocalBackend

    body = _body(call, ("agent_id", "compaction_settings"))
    record = call.conversation(call.text("conversation_id"), body.get("agent_id"))
    settings = body.get("compaction_settings") or {}
    if not isinstance(settings, dict) or set(settings) - {"mode"}:
        raise UsageError("body.compaction_settings may give only mode (sliding_window or all)")
    mode = settings.get("mode")
    if mode is not None and mode not in ("sliding_window", "all"):
        raise UsageError(f"body.compaction_settings.mode must be sliding_window or all, "
                         f"not {mode!r}")
    async with _prepared(call, record) as prepared:
        backend = prepared.backend
        if not isinstance(backend, LocalBackend):
            raise UsageError("a hosted conversation is compacted by its Letta server")
        kept = backend.compaction
        if mode is not None:
            backend.compaction = replace(kept, mode=mode)
        try:
            done = await backend.compact(prepared.conversation)
        finally:
            backend.compaction = kept
    stats = dict(done.stats)
    return {"compaction": {"summary": done.summary,
                           "num_messages_before": stats.get("messages_count_before"),
                           "num_messages_after": stats.get("messages_count_after"),
                           "stats": stats}}


async def conversation_recompile(call: Call) -> dict[str, Any]:
    from tether.runtime.session.prompt_cache import SystemPrompt

    body = _body(call, ("agent_id", "dry_run"))
    record = call.conversation(call.text("conversation_id"), body.get("agent_id"))
    dry_run = body.get("dry_run", False)
    if not isinstance(dry_run, bool):
        raise UsageError("body.dry_run must be true or false")
    async with _prepared(call, record) as prepared:
        prompt = getattr(prepared.backend, "system_prompt", None)
        if not isinstance(prompt, SystemPrompt):
            raise UsageError("this conversation's system prompt is compiled by its Letta server")
        if not dry_run:
            return {"result": await asyncio.to_thread(prompt.compile, prepared.conversation)}
        with tempfile.TemporaryDirectory(prefix="tether-recompile-") as scratch:
            trial = SystemPrompt(base=prompt.base, cache_dir=lambda _c: Path(scratch),
                                 memfs=prompt.memfs, skills=prompt.skills,
                                 project_instructions=prompt.project_instructions)
            return {"result": await asyncio.to_thread(trial.compile, prepared.conversation)}


FAMILY: dict[str, Request] = {
    "conversation_messages_list": request(
        "conversation_id agent_id query", conversation_messages_list, Scope.OWN,
        {"messages": []}, blocking=True,
    ),
    "conversation_fork": request(
        "conversation_id body acting_user_id", conversation_fork, Scope.OWN,
        {"conversation": None}, blocking=True,
    ),
    "conversation_compact": request(
        "conversation_id body", conversation_compact, Scope.OWN, {"compaction": None},
    ),
    "conversation_recompile": request(
        "conversation_id body", conversation_recompile, Scope.OWN, {"result": None},
    ),
}
