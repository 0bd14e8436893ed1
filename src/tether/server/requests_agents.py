"""The agent and conversation CRUD requests (reference §12.3: `agent_list`, `agent_retrieve`,
`agent_create`, `agent_update`, `agent_delete`, `conversation_list`, `conversation_retrieve`,
`conversation_create`, `conversation_update`, and tether's `conversation_delete`), each over
`runtime/manage/` as the CLI is. A conversation running a turn (here or in any process), or
with a client on it, is not deleted."""

from __future__ import annotations

import asyncio
from typing import Any

from tether.errors import NotFound, UsageError
from tether.runtime.manage import agents, conversations, removal
from tether.server.request_kit import Call, Request, RequestFailed, Scope, request

AGENT_BODY = ("name", "model", "description", "system", "tags", "memory_blocks")
AGENT_QUERY = ("name", "tags", "match_all_tags", "query_text", "limit", "include")
CONVERSATION_QUERY = ("agent_id", "limit", "archived", "include_hidden")
CONVERSATION_BODY = ("agent_id", "summary", "hidden")


def _known(what: str, value: dict[str, Any], allowed: tuple[str, ...]) -> dict[str, Any]:
    unknown = sorted(set(value) - set(allowed))
    if unknown:
        raise UsageError(f"{what}.{unknown[0]} is not supported here (known: {', '.join(allowed)})")
    return value


# --- agents -------------------------------------------------------------------------------------


def agent_list(call: Call) -> dict[str, Any]:
    query = _known("query", call.obj("query"), AGENT_QUERY)
    limit = query.get("limit", 50)
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise UsageError(f"query.limit must be a whole number of at least 1, got {limit!r}")
    tags = query.get("tags") or []
    if not isinstance(tags, list) or not all(isinstance(t, str) for t in tags):
        raise UsageError("query.tags must be a list of strings")
    include = query.get("include") or []
    rows = agents.list_agents(
        call.store, name=query.get("name"), query=query.get("query_text"), tags=tags,
        match_all_tags=bool(query.get("match_all_tags")),
        include_blocks="agent.blocks" in include, limit=1_000_000,
    )
    visible = [row for row in rows if call.sees_agent(row["id"])]  # filtered, never refused
    return {"agents": visible[-limit:]}


def agent_retrieve(call: Call) -> dict[str, Any]:
    record = call.agent(call.text("agent_id"))  # granted and existing, or the one not-found
    return {"agent": agents.agent_view(call.store, record, include_blocks=True)}


def agent_create(call: Call) -> dict[str, Any]:
    body = _known("body", call.obj("body"), AGENT_BODY)
    model = body.get("model")
    check_model(call, model)
    blocks = _memory_blocks(body.get("memory_blocks"))
    created = agents.create_agent(
        call.store, name=body.get("name"), model=model, description=body.get("description") or "",
        system=body.get("system"), tags=body.get("tags") or (), blocks=blocks,
    )
    call.notify("agent_updated", agent_id=created["id"], agent=created)
    return {"agent": created}


def agent_update(call: Call) -> dict[str, Any]:
    record = call.agent(call.text("agent_id"), change=True)
    body = call.obj("body")
    if "model" in body and body["model"] is not None:
        check_model(call, body["model"])
    updated = agents.update_agent(call.store, record.id, body)
    call.notify("agent_updated", agent_id=record.id, agent=updated)
    return {"agent": updated}


async def agent_delete(call: Call) -> dict[str, Any]:
    record = call.agent(call.text("agent_id"), change=True)
    await _stop_idle_runtimes(call, record.id, None)

    def delete() -> None:  # store round trips, and a cron.db connection kept in its thread
        from tether.server.cron_bridge import request_store

        with request_store(call.server) as schedules:
            removal.delete_agent(call.store, record.id, schedules)

    await asyncio.to_thread(delete)
    call.notify("agent_updated", agent_id=record.id, agent=None, deleted=True)
    return {"agent_id": record.id}


# --- conversations ------------------------------------------------------------------------------


def conversation_list(call: Call) -> dict[str, Any]:
    query = _known("query", call.obj("query"), CONVERSATION_QUERY)
    limit = query.get("limit", 50)
    if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
        raise UsageError(f"query.limit must be a whole number of at least 1, got {limit!r}")
    agent_id = query.get("agent_id")
    if agent_id is not None and not isinstance(agent_id, str):
        raise UsageError("query.agent_id must be a string")
    include_hidden = query.get("include_hidden", False)
    if not isinstance(include_hidden, bool):
        raise UsageError("query.include_hidden must be true or false")
    if agent_id is not None:
        owners = [agent_id] if call.sees_agent(agent_id) else []
    else:
        owners = [a.id for a in call.server.ctx.store.list_agents() if call.sees_agent(a.id)]
    rows: list[dict[str, Any]] = []
    for owner in owners:
        try:
            found = conversations.list_conversations(
                call.store, owner, include_archived=bool(query.get("archived")),
                include_hidden=include_hidden, limit=1_000_000,
            )
        except NotFound:  # an agent named but absent lists nothing, as one out of scope does
            continue
        rows.extend(r for r in found if call.grant.refusal(r["agent_id"], r["id"]) is None)
    rows.sort(key=lambda r: (r.get("created_at") or "", r["id"]))
    return {"conversations": rows[-limit:]}


def conversation_retrieve(call: Call) -> dict[str, Any]:
    record = call.conversation(call.text("conversation_id"), call.opt_text("agent_id"))
    return {"conversation": record.to_dict()}


def conversation_create(call: Call) -> dict[str, Any]:
    body = _known("body", call.obj("body"), CONVERSATION_BODY)
    agent_id = body.get("agent_id")
    if not isinstance(agent_id, str) or not agent_id:
        raise UsageError("body.agent_id is required (the agent the conversation is of)")
    if call.grant.conversations is not None:
        raise RequestFailed(
            "this connection's token may not create conversations (it is scoped to conversations)"
        )
    hidden = body.get("hidden", False)
    if not isinstance(hidden, bool):
        raise UsageError("body.hidden must be true or false")
    record = call.agent(agent_id)
    created = conversations.create_conversation(
        call.store, record.id, summary=body.get("summary"), hidden=hidden
    )
    call.notify("conversation_updated", agent_id=record.id, conversation_id=created["id"],
                conversation=created)
    return {"conversation": created}


def conversation_update(call: Call) -> dict[str, Any]:
    record = call.conversation(call.text("conversation_id"), call.opt_text("agent_id"))
    updated = conversations.update_conversation(
        call.store, record.id, call.obj("body"), record.agent_id
    )
    call.notify("conversation_updated", agent_id=record.agent_id, conversation_id=record.id,
                conversation=updated)
    return {"conversation": updated}


async def conversation_delete(call: Call) -> dict[str, Any]:
    record = call.conversation(call.text("conversation_id"), call.opt_text("agent_id"))
    if record.id == "default":
        raise UsageError("the default conversation belongs to its agent and goes only with it")
    await _stop_idle_runtimes(call, record.agent_id, record.id)
    removal.delete_conversation(call.store, record.id, record.agent_id)
    call.notify("conversation_updated", agent_id=record.agent_id, conversation_id=record.id,
                conversation=None, deleted=True)
    return {"conversation_id": record.id}


# --- helpers ------------------------------------------------------------------------------------


async def _stop_idle_runtimes(call: Call, agent_id: str, conversation_id: str | None) -> None:
    """Close this server's runtimes of what is being deleted, or refuse while one runs a turn,
    holds queued input or has a client on it."""
    server = call.server
    chosen = [
        (scope, rt) for scope, rt in server.runtimes.items()
        if scope.agent_id == agent_id and conversation_id in (None, scope.conversation_id)
    ]
    for scope, rt in chosen:
        if rt.busy or rt.queue or rt.subscribers:
            why = "runs a turn" if rt.busy else "has queued input" if rt.queue else "has clients"
            raise RequestFailed(
                f"conversation {scope.conversation_id} {why} on this server; abort it and "
                "close its clients, then delete"
            )
    for scope, rt in chosen:
        server.runtimes.pop(scope, None)
        server.ctx.released.pop(scope, None)
        await rt.close()
    for scope in [s for s in server.ctx.released if s.agent_id == agent_id
                  and conversation_id in (None, s.conversation_id)]:
        server.ctx.released.pop(scope, None)


def check_model(call: Call, model: Any) -> None:
    from tether.providers.catalog import default_handle, resolve_provider
    from tether.runtime.session.session import NO_MODEL

    if model is None:
        if default_handle(call.home, call.env) is None:
            raise UsageError(NO_MODEL)
        return
    if not isinstance(model, str):
        raise UsageError("body.model must be a model handle string (provider/model)")
    resolve_provider(model, call.home, call.env)  # a bad handle fails before anything is written


def _memory_blocks(value: Any) -> dict[str, str] | None:
    if value is None:
        return None
    if not isinstance(value, list):
        raise UsageError("body.memory_blocks must be a list of {label, value}")
    out: dict[str, str] = {}
    for n, block in enumerate(value):
        if not (isinstance(block, dict) and isinstance(block.get("label"), str)
                and isinstance(block.get("value"), str)):
            raise UsageError(f"body.memory_blocks[{n}] must be an object {{label, value}}")
        out[block["label"]] = block["value"]
    return out


FAMILY: dict[str, Request] = {  # store round trips (PostgreSQL's too): off the event loop
    "agent_list": request("query", agent_list, Scope.LISTED, {"agents": []}, blocking=True),
    "agent_retrieve": request("agent_id", agent_retrieve, Scope.OWN, {"agent": None},
                              blocking=True),
    "agent_create": request("body", agent_create, Scope.UNSCOPED, {"agent": None},
                            blocking=True),
    "agent_update": request("agent_id body", agent_update, Scope.OWN, {"agent": None},
                            blocking=True),
    "agent_delete": request("agent_id", agent_delete, Scope.OWN, echo=("agent_id",)),
    "conversation_list": request("query", conversation_list, Scope.LISTED,
                                 {"conversations": []}, blocking=True),
    "conversation_retrieve": request(
        "conversation_id agent_id", conversation_retrieve, Scope.OWN, {"conversation": None},
        blocking=True,
    ),
    "conversation_create": request(
        "body acting_user_id", conversation_create, Scope.OWN, {"conversation": None},
        blocking=True,
    ),
    "conversation_update": request(
        "conversation_id agent_id body", conversation_update, Scope.OWN, {"conversation": None},
        blocking=True,
    ),
    "conversation_delete": request(
        "conversation_id agent_id", conversation_delete, Scope.OWN, echo=("conversation_id",)
    ),
}
