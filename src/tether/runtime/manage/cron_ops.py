"""Scheduled tasks from a client of the App Server: add one in the reference's fields, list, get
and delete, over the `runtime/cron` store its caller passes (the server's: a home's cron.db, or
with `--store` the fleet's tables in PostgreSQL) and the task builder `tether cron` uses."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from tether.errors import UsageError

if TYPE_CHECKING:
    from tether.runtime.cron.store import CronStore


def add_task(
    store: CronStore, env: Mapping[str, str], fields: Mapping[str, Any]
) -> dict[str, Any]:
    """`{agent_id, conversation_id?, name, description, cron, timezone?, recurring, prompt,
    scheduled_for?}`: recurring tasks run on `cron`, one-shots at `scheduled_for` (ISO)."""
    from tether.runtime.cron.scheduler import clock_from_env
    from tether.runtime.cron.tasks import new_task

    recurring = fields.get("recurring")
    if not isinstance(recurring, bool):
        raise UsageError("recurring must be true or false")
    at = fields.get("scheduled_for")
    cron = fields.get("cron")
    if not recurring and not at:
        raise UsageError("a one-shot task (recurring false) needs scheduled_for (an ISO time)")
    now_ms = clock_from_env(env).now_ms()
    task, first_slot = new_task(
        agent_id=str(fields["agent_id"]), conversation_id=fields.get("conversation_id") or "default",
        name=str(fields.get("name") or ""), description=str(fields.get("description") or ""),
        prompt=str(fields.get("prompt") or ""), every=None,
        at=str(at) if not recurring else None, cron=str(cron or "") if recurring else None,
        timezone=fields.get("timezone"), now_ms=now_ms,
    )
    return store.add(task, now_ms, first_slot)


def list_tasks(store: CronStore, visible: Callable[[dict[str, Any]], bool],
               agent_id: str | None = None) -> list[dict[str, Any]]:
    if not store.exists():
        return []
    return [t for t in store.tasks(agent_id) if visible(t)]


def get_task(store: CronStore, task_id: str) -> dict[str, Any] | None:
    from tether.errors import NotFound

    if not store.exists():
        return None
    try:
        return store.get(task_id)
    except NotFound:
        return None


def delete_task(store: CronStore, task_id: str) -> dict[str, Any]:
    return store.delete(task_id)


def delete_agent_tasks(store: CronStore, agent_id: str) -> int:
    """Delete every task of an agent (a removed agent's schedules); how many."""
    if not store.exists():
        return 0
    tasks = store.tasks(agent_id)
    for task in tasks:
        store.delete(task["id"])
    return len(tasks)


def run_page(store: CronStore, task_id: str, *, limit: int = 20, offset: int = 0,
             run_id: str | None = None) -> dict[str, Any]:
    """The task's run log newest first as the reference's CronRunLogPage."""
    entries = list(reversed(store.runs(task_id, 1_000_000)))
    if run_id is not None:
        entries = [e for e in entries if e.get("runId") == run_id]
    page = entries[offset:offset + limit]
    more = offset + limit < len(entries)
    return {"entries": page, "total": len(entries), "offset": offset, "limit": limit,
            "hasMore": more, "nextOffset": offset + limit if more else None}


UPDATABLE = ("name", "description", "conversation_id", "cron", "timezone", "recurring", "prompt",
             "scheduled_for")
_SCHEDULE = ("cron", "timezone", "recurring", "scheduled_for")


def update_task(
    store: CronStore, env: Mapping[str, str], task_id: str, changes: Mapping[str, Any]
) -> dict[str, Any]:
    """Change a task's fields (`UPDATABLE`; absent ones stay) checked as `add_task` checks them;
    a changed schedule (cron, timezone, recurring, scheduled_for) applies from now on."""
    from tether.runtime.cron import schedule
    from tether.runtime.cron.scheduler import clock_from_env
    from tether.runtime.cron.tasks import new_task

    unknown = sorted(set(changes) - set(UPDATABLE))
    if unknown:
        raise UsageError(f"{unknown[0]} cannot be changed (changeable: {', '.join(UPDATABLE)})")
    if not changes:
        raise UsageError(f"nothing to change on task {task_id}: give one of {', '.join(UPDATABLE)}")
    now_ms = clock_from_env(env).now_ms()
    moves = any(name in changes for name in _SCHEDULE)

    def build(task: dict[str, Any]) -> dict[str, Any]:
        if moves and task.get("status") != "active":
            raise UsageError(f"task {task_id} is {task.get('status')}; its schedule cannot "
                             "change (add a new task)")
        merged = {**task, **changes}
        recurring = merged.get("recurring")
        if not isinstance(recurring, bool):
            raise UsageError("recurring must be true or false")
        at = merged.get("scheduled_for") if not recurring else None
        if not recurring and not at:
            raise UsageError("a one-shot task (recurring false) needs scheduled_for (an ISO time)")
        fresh, _ = new_task(  # the same checks and normal forms as a new task
            agent_id=task["agent_id"], conversation_id=str(merged.get("conversation_id") or ""),
            name=str(merged.get("name") or ""), description=str(merged.get("description") or ""),
            prompt=str(merged.get("prompt") or ""), every=None, at=str(at) if at else None,
            cron=str(merged.get("cron") or "") if recurring else None,
            timezone=merged.get("timezone"), now_ms=now_ms,
        )
        out = {**task, **{k: fresh[k] for k in ("name", "description", "conversation_id",
                                                 "prompt")}}
        if moves:
            out.update({k: fresh[k] for k in _SCHEDULE})
            tz = schedule.resolve_timezone(out["timezone"])
            if out["recurring"]:
                out["jitter_offset_ms"] = schedule.recurring_jitter_ms(
                    task_id, out["cron"], tz, now_ms)
            else:
                at_ms = schedule.parse_at(str(at), now_ms, tz)
                out["jitter_offset_ms"] = schedule.one_shot_jitter_ms(task_id, at_ms, tz, now_ms)
        return out

    return store.update(task_id, build, now_ms if moves else None)
