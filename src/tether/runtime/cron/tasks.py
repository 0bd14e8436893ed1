"""A scheduled task's record (the reference's field names) built from what the user asked for."""

from __future__ import annotations

import re
import secrets
from typing import Any

from tether.errors import UsageError
from tether.runtime.cron import schedule

_CONVERSATION = re.compile(r"^(new|default|[A-Za-z0-9][A-Za-z0-9._:-]{0,127})$")


def new_task(
    *,
    agent_id: str,
    conversation_id: str,
    name: str,
    description: str,
    prompt: str,
    every: str | None,
    at: str | None,
    cron: str | None,
    timezone: str | None,
    now_ms: int,
) -> tuple[dict[str, Any], int]:
    """The task and its first settled slot (its creation time: nothing before it fires)."""
    chosen = [flag for flag, value in (("--every", every), ("--at", at), ("--cron", cron)) if value]
    if len(chosen) != 1:
        raise UsageError(
            'give exactly one of --every (5m, 2h, 1d), --at ("3:00pm", "in 45m") or --cron '
            f'("0 9 * * 1-5"); got {", ".join(chosen) or "none"}'
        )
    if not prompt.strip():
        raise UsageError("--prompt must say what the agent should do when the task fires")
    if not name.strip():
        raise UsageError("--name must not be empty")
    if not _CONVERSATION.match(conversation_id):
        raise UsageError(
            f"--conversation {conversation_id!r}: use new, default or a conversation id"
        )
    tz = schedule.resolve_timezone(timezone)
    task_id = secrets.token_hex(4)
    scheduled_for: str | None = None
    if at:
        at_ms = schedule.parse_at(at, now_ms, tz)
        expr, recurring = schedule.one_shot_cron(at_ms, tz), False
        jitter = schedule.one_shot_jitter_ms(task_id, at_ms, tz, now_ms)
        scheduled_for = schedule.iso(at_ms, tz)
    else:
        expr = (
            schedule.every_to_cron(every, now_ms, tz) if every else schedule.check_cron(cron or "")
        )
        recurring = True
        jitter = schedule.recurring_jitter_ms(task_id, expr, tz, now_ms)
    task: dict[str, Any] = {
        "id": task_id,
        "agent_id": agent_id,
        "conversation_id": conversation_id,
        "name": name.strip(),
        "description": description,
        "cron": expr,
        "timezone": tz,
        "recurring": recurring,
        "prompt": prompt,
        "status": "active",
        "created_at": schedule.iso(now_ms),
        "expires_at": None,
        "last_fired_at": None,
        "fire_count": 0,
        "cancel_reason": None,
        "jitter_offset_ms": jitter,
        "last_run_at": None,
        "last_run_outcome": None,
        "last_run_reason": None,
        "last_run_error": None,
        "last_missed_at": None,
        "missed_count": 0,
        "failed_count": 0,
        "scheduled_for": scheduled_for,
        "fired_at": None,
        "missed_at": None,
    }
    return task, now_ms
