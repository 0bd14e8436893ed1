"""The schedule requests (reference §12.3: `cron_list`, `cron_add`, `cron_get`, `cron_runs`,
`cron_update`, `cron_delete`, `cron_delete_all`, `cron_trigger`) over `runtime/manage/cron_ops`
on the server's schedule store (`cron_bridge.request_store`: with `--store` the database's, the
one its scheduler fires from) and, for a trigger, this server's scheduler (`cron_bridge.CronService`): the task fires once now
through the scheduler's durable path (a `fires` row with its own `cron:<task>:manual:<id>` key,
then the conversation's input queue), exactly as a scheduled fire. A task is visible to a token
that reaches its agent (and, for a token limited to conversations, its conversation); any other
task id gets the not-found answer. The reference has no pause or resume of a task (§13: "no
separate pause state exists"); a task stops firing when it is deleted."""

from __future__ import annotations

import asyncio
from typing import Any

from tether.errors import UsageError
from tether.runtime.manage import cron_ops
from tether.server import v2_frames
from tether.server.cron_bridge import request_store
from tether.server.request_kit import Call, Request, RequestFailed, Scope, request

ADD_FIELDS = ("agent_id", "conversation_id", "name", "description", "cron", "timezone",
              "recurring", "prompt", "scheduled_for")


def _visible(call: Call, task: dict[str, Any]) -> bool:
    if not call.sees_agent(str(task.get("agent_id"))):
        return False
    held = call.grant.conversations
    return held is None or task.get("conversation_id") in held


def _task(call: Call) -> dict[str, Any]:
    with request_store(call.server) as store:
        task = cron_ops.get_task(store, call.text("task_id"))
    if task is None or not _visible(call, task):
        raise RequestFailed("task_id: no such task (or this connection's token does not grant it)")
    return task


def _announce(call: Call, task: dict[str, Any]) -> None:
    conversation = task.get("conversation_id")
    call.notices.append((v2_frames.crons_updated(task["agent_id"], conversation),
                         task["agent_id"],
                         conversation if conversation not in ("new", "default") else None))


def cron_list(call: Call) -> dict[str, Any]:
    agent_id = call.opt_text("agent_id")
    conversation_id = call.opt_text("conversation_id")
    with request_store(call.server) as store:
        tasks = cron_ops.list_tasks(store, lambda t: _visible(call, t), agent_id)
    if conversation_id is not None:
        tasks = [t for t in tasks if t.get("conversation_id") == conversation_id]
    return {"tasks": tasks}


def cron_add(call: Call) -> dict[str, Any]:
    fields = {name: call.frame.msg.get(name) for name in ADD_FIELDS}
    for name in ("name", "prompt", "cron"):
        if name != "cron" or fields["recurring"]:
            call.text(name)  # required, a non-empty string
    if fields["timezone"] is not None and not isinstance(fields["timezone"], str):
        raise UsageError("timezone must be an IANA zone name such as Europe/Paris")
    agent = call.agent(call.text("agent_id"))
    conversation = call.opt_text("conversation_id") or "default"
    if call.grant.conversations is not None and conversation in ("new", "default"):
        raise RequestFailed(
            f"this connection's token is scoped to conversations; a task for the "
            f"{conversation!r} conversation is outside it (name one of its conversations)"
        )
    if conversation not in ("new", "default"):
        call.conversation(conversation, agent.id)  # granted and of this agent, or not found
    with request_store(call.server) as store:
        task = cron_ops.add_task(store, call.env, {**fields, "agent_id": agent.id,
                                                   "conversation_id": conversation})
    _announce(call, task)
    return {"task": task}


def cron_get(call: Call) -> dict[str, Any]:
    try:
        return {"found": True, "task": _task(call)}
    except RequestFailed:
        return {"found": False, "task": None}  # the reference answers a miss with found: false


def cron_delete(call: Call) -> dict[str, Any]:
    try:
        task = _task(call)
    except RequestFailed:
        return {"found": False}
    with request_store(call.server) as store:
        cron_ops.delete_task(store, task["id"])
    _announce(call, task)
    return {"found": True}


def cron_update(call: Call) -> dict[str, Any]:
    task = _task(call)
    changes = {name: call.frame.msg[name] for name in cron_ops.UPDATABLE
               if name in call.frame.msg}
    for name in ("name", "prompt"):
        if name in changes:
            call.text(name)  # a non-empty string when given
    conversation = changes.get("conversation_id")
    if conversation is not None:
        if not isinstance(conversation, str):
            raise UsageError("conversation_id must be new, default or a conversation id")
        if call.grant.conversations is not None and conversation in ("new", "default"):
            raise RequestFailed(
                f"this connection's token is scoped to conversations; a task for the "
                f"{conversation!r} conversation is outside it (name one of its conversations)"
            )
        if conversation not in ("new", "default"):
            call.conversation(conversation, task["agent_id"])  # granted and of this agent
    with request_store(call.server) as store:
        updated = cron_ops.update_task(store, call.env, task["id"], changes)
    _announce(call, task)
    if updated.get("conversation_id") != task.get("conversation_id"):
        _announce(call, updated)
    return {"task": updated}


def cron_runs(call: Call) -> dict[str, Any]:
    task = _task(call)
    limit = call.count("limit", 20)
    offset = call.count("offset", 0, least=0, most=10**9)
    with request_store(call.server) as store:
        return {"page": cron_ops.run_page(store, task["id"], limit=limit, offset=offset,
                                          run_id=call.opt_text("run_id"))}


def cron_delete_all(call: Call) -> dict[str, Any]:
    agent = call.agent(call.text("agent_id"), change=True)
    with request_store(call.server) as store:
        deleted = cron_ops.delete_agent_tasks(store, agent.id)
    if deleted:
        _announce(call, {"agent_id": agent.id, "conversation_id": None})
    return {"agent_id": agent.id, "deleted": deleted}


def _get(call: Call, task_id: str) -> dict[str, Any] | None:
    with request_store(call.server) as store:
        return cron_ops.get_task(store, task_id)


async def cron_trigger(call: Call) -> dict[str, Any]:
    task_id = call.text("task_id")
    cron = call.server.cron
    if cron is None:
        raise RequestFailed("this server runs no scheduler (started with TETHER_CRON=0)")
    task = await asyncio.to_thread(_get, call, task_id)
    record = None
    if task is not None and _visible(call, task):
        record = await cron.scheduler.trigger_now(task_id)
    if record is None:  # absent, not active, or outside the token: one answer
        raise RequestFailed(f"no active scheduled task {task_id!r} on this server")
    payload = {
        "found": True,
        "task": await asyncio.to_thread(_get, call, task_id),
        "task_id": task_id,
        "success": record["outcome"] == "queued",
        "outcome": record["outcome"],
        "reason": record["reason"],
        "conversation_id": record.get("conversationId"),
        "queue_item_id": record.get("queueItemId"),
    }
    if record.get("error"):
        payload["error"] = record["error"]
    return payload


FAMILY: dict[str, Request] = {
    "cron_list": request("agent_id conversation_id", cron_list, Scope.LISTED, {"tasks": []},
                         blocking=True),
    "cron_add": request(" ".join(ADD_FIELDS), cron_add, Scope.OWN, blocking=True),
    "cron_get": request("task_id", cron_get, Scope.OWN, {"found": False, "task": None},
                        blocking=True),
    "cron_delete": request("task_id", cron_delete, Scope.OWN, {"found": False}, blocking=True),
    "cron_update": request("task_id " + " ".join(cron_ops.UPDATABLE), cron_update, Scope.OWN,
                           blocking=True),
    "cron_runs": request("task_id limit offset run_id", cron_runs, Scope.OWN, blocking=True),
    "cron_trigger": request("task_id", cron_trigger, Scope.OWN, {"found": False, "task": None},
                            echo=("task_id",)),
    "cron_delete_all": request("agent_id", cron_delete_all, Scope.OWN, {"deleted": 0},
                               blocking=True, echo=("agent_id",)),
}
