"""Scheduled tasks from a client of the App Server: add one in the reference's fields, list, get
and delete, over the same `runtime/cron` store and task builder `tether cron` uses."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from tether.errors import UsageError


def add_task(
    home: Path, env: Mapping[str, str], fields: Mapping[str, Any]
) -> dict[str, Any]:
    """`{agent_id, conversation_id?, name, description, cron, timezone?, recurring, prompt,
    scheduled_for?}`: recurring tasks run on `cron`, one-shots at `scheduled_for` (ISO)."""
    from tether.runtime.cron.scheduler import clock_from_env
    from tether.runtime.cron.store import CronStore
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
    store = CronStore(home)
    try:
        return store.add(task, now_ms, first_slot)
    finally:
        store.close()


def list_tasks(home: Path, visible: Callable[[dict[str, Any]], bool],
               agent_id: str | None = None) -> list[dict[str, Any]]:
    from tether.runtime.cron.store import CronStore

    if not (home / "cron.db").exists():
        return []
    store = CronStore(home)
    try:
        return [t for t in store.tasks(agent_id) if visible(t)]
    finally:
        store.close()


def get_task(home: Path, task_id: str) -> dict[str, Any] | None:
    from tether.errors import NotFound
    from tether.runtime.cron.store import CronStore

    if not (home / "cron.db").exists():
        return None
    store = CronStore(home)
    try:
        return store.get(task_id)
    except NotFound:
        return None
    finally:
        store.close()


def delete_task(home: Path, task_id: str) -> dict[str, Any]:
    from tether.runtime.cron.store import CronStore

    store = CronStore(home)
    try:
        return store.delete(task_id)
    finally:
        store.close()


def run_page(home: Path, task_id: str, *, limit: int = 20, offset: int = 0,
             run_id: str | None = None) -> dict[str, Any]:
    """The task's run log newest first as the reference's CronRunLogPage."""
    from tether.runtime.cron.store import CronStore

    store = CronStore(home)
    try:
        entries = list(reversed(store.runs(task_id, 1_000_000)))
    finally:
        store.close()
    if run_id is not None:
        entries = [e for e in entries if e.get("runId") == run_id]
    page = entries[offset:offset + limit]
    more = offset + limit < len(entries)
    return {"entries": page, "total": len(entries), "offset": offset, "limit": limit,
            "hasMore": more, "nextOffset": offset + limit if more else None}
