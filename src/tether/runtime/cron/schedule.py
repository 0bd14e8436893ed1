"""When a schedule fires: `--every`, `--at` and `--cron` into a 5-field expression (cronsim
evaluates it, in the task's IANA timezone), the jitter a task gets, and the prompt wrapper.

Times cross module boundaries as epoch milliseconds (ints); datetimes exist only here, aware.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Mapping
from datetime import UTC, datetime, timedelta
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from tether.errors import UsageError

MISSED_AFTER_MS = 5 * 60_000  # a one-shot that would start later than this is `missed`
ONE_SHOT_EARLY_MS = 90_000  # one-shots on :00/:30 may start up to this early (spread load)
RECURRING_JITTER_CAP_MS = 59_999

_EVERY = re.compile(r"^\s*(\d+)\s*(s|m|h|d)\s*$", re.IGNORECASE)
_IN = re.compile(
    r"^\s*in\s+(\d+)\s*(s|sec|secs|m|min|mins|h|hr|hrs|hours?|d|days?|minutes?)\s*$", re.I
)
_CLOCK = re.compile(r"^\s*(\d{1,2})(?::(\d{2}))?\s*(am|pm)?\s*$", re.IGNORECASE)
_UNIT_MS = {"s": 1000, "m": 60_000, "h": 3_600_000, "d": 86_400_000}


def resolve_timezone(name: str | None, env: Mapping[str, str] | None = None) -> str:
    """An IANA zone name: the one given (checked), else TZ, else /etc/localtime's, else UTC."""
    if name:
        zone(name)
        return name
    env = os.environ if env is None else env
    candidates = [env.get("TZ", "").lstrip(":")]
    try:
        target = os.readlink("/etc/localtime")
        candidates.append(target.split("zoneinfo/", 1)[1] if "zoneinfo/" in target else "")
    except OSError:
        pass
    for candidate in candidates:
        if candidate:
            try:
                ZoneInfo(candidate)
                return candidate
            except (ZoneInfoNotFoundError, ValueError):
                continue
    return "UTC"


def zone(name: str) -> ZoneInfo:
    try:
        return ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise UsageError(
            f"--timezone {name!r} is not an IANA time zone (e.g. UTC, Europe/Berlin, "
            "America/New_York)"
        ) from None


def to_dt(ms: int, tz: str) -> datetime:
    return datetime.fromtimestamp(ms / 1000, tz=zone(tz))


def to_ms(dt: datetime) -> int:
    return int(dt.timestamp() * 1000)


def iso(ms: int, tz: str = "UTC") -> str:
    return to_dt(ms, tz).isoformat(timespec="seconds")


def check_cron(expr: str) -> str:
    """The expression, normalised to single spaces; UsageError naming what is wrong."""
    from cronsim import CronSim, CronSimError

    fields = expr.split()
    if len(fields) != 5:
        raise UsageError(
            f"--cron {expr!r}: a schedule needs 5 fields (minute hour day-of-month month "
            f"day-of-week), got {len(fields)}"
        )
    normal = " ".join(fields)
    try:
        CronSim(normal, datetime(2000, 1, 1, tzinfo=UTC))
    except CronSimError as exc:
        raise UsageError(f"--cron {expr!r} is not a valid cron expression: {exc}") from None
    return normal


def next_fire_ms(expr: str, tz: str, after_ms: int) -> int:
    """The first time strictly after `after_ms` the expression matches, in zone `tz`."""
    from cronsim import CronSim

    start = to_dt(after_ms, tz).replace(microsecond=0)
    return to_ms(next(CronSim(expr, start)))


def period_ms(expr: str, tz: str, around_ms: int) -> int:
    """The gap between two consecutive matches near `around_ms` (for the jitter's cap)."""
    first = next_fire_ms(expr, tz, around_ms)
    return next_fire_ms(expr, tz, first) - first


def every_to_cron(text: str, created_ms: int, tz: str) -> str:
    """`--every Ns|m|h|d`: under a minute ⇒ every minute; hours snap to a divisor of 24 (at the
    creation minute); a day or more ⇒ daily at the creation time."""
    m = _EVERY.match(text)
    if not m:
        raise UsageError(f"--every {text!r}: use a number and a unit, like 30s, 5m, 2h or 1d")
    n, unit = int(m.group(1)), m.group(2).lower()
    if n <= 0:
        raise UsageError(f"--every {text!r}: the interval must be positive")
    total_min = n * _UNIT_MS[unit] // 60_000
    created = to_dt(created_ms, tz)
    if total_min <= 1:
        return "* * * * *"
    if total_min < 60:
        return f"*/{total_min} * * * *"
    hours = -(-total_min // 60)  # 90m rounds up to 2h, then snaps to a divisor of 24
    if hours >= 24:
        return f"{created.minute} {created.hour} * * *"
    snapped = min((d for d in (1, 2, 3, 4, 6, 8, 12) if d >= hours), default=12)
    return f"{created.minute} */{snapped} * * *" if snapped > 1 else f"{created.minute} * * * *"


def parse_at(text: str, now_ms: int, tz: str) -> int:
    """`--at "3:00pm" | "15:00" | "in 45m" | "2026-12-24T09:00"`: the one-shot's time (ms)."""
    m = _IN.match(text)
    if m:
        n, unit = int(m.group(1)), m.group(2).lower()[0]
        if n <= 0:
            raise UsageError(f"--at {text!r}: the delay must be positive")
        return now_ms + n * _UNIT_MS[unit]
    now = to_dt(now_ms, tz)
    m = _CLOCK.match(text)
    if m:
        hour, minute, half = int(m.group(1)), int(m.group(2) or 0), (m.group(3) or "").lower()
        if half:
            if not 1 <= hour <= 12:
                raise UsageError(f"--at {text!r}: the hour of a 12-hour time is 1..12")
            hour = hour % 12 + (12 if half == "pm" else 0)
        if hour > 23 or minute > 59:
            raise UsageError(f"--at {text!r} is not a time of day")
        at = now.replace(hour=hour, minute=minute, second=0, microsecond=0)
        if at <= now:
            at = (at + timedelta(days=1)).replace(hour=hour, minute=minute)
        return to_ms(at)
    try:
        at = datetime.fromisoformat(text.strip())
    except ValueError:
        raise UsageError(
            f'--at {text!r}: use a time of day ("3:00pm", "15:00"), a delay ("in 45m") or an '
            'ISO date and time ("2026-12-24T09:00")'
        ) from None
    if at.tzinfo is None:
        at = at.replace(tzinfo=zone(tz))
    if to_ms(at) <= now_ms:
        raise UsageError(f"--at {text!r} is in the past")
    return to_ms(at)


def one_shot_cron(at_ms: int, tz: str) -> str:
    at = to_dt(at_ms, tz)
    return f"{at.minute} {at.hour} {at.day} {at.month} *"


def _hash(task_id: str) -> int:
    return int.from_bytes(hashlib.sha256(task_id.encode()).digest()[:8], "big")


def recurring_jitter_ms(task_id: str, expr: str, tz: str, created_ms: int) -> int:
    """A delay after each match: hash(id) % min(10% of the period, 59 999 ms)."""
    cap = min(period_ms(expr, tz, created_ms) // 10, RECURRING_JITTER_CAP_MS)
    return _hash(task_id) % cap if cap > 0 else 0


def one_shot_jitter_ms(task_id: str, at_ms: int, tz: str, created_ms: int) -> int:
    """How early a one-shot on :00 or :30 starts (never before its creation)."""
    at = to_dt(at_ms, tz)
    if at.minute not in (0, 30) or at.second:
        return 0
    return min(_hash(task_id) % ONE_SHOT_EARLY_MS, max(0, at_ms - created_ms))


def wrap_prompt(
    task: Mapping[str, Any], scheduled_for_ms: int, now_ms: int, fire_number: int
) -> str:
    """What the conversation receives when a task fires."""
    tz = task["timezone"]
    lines = [f'Scheduled task "{task["name"]}" is firing.']
    if task.get("description"):
        lines.append(f"Description: {task['description']}")
    lines.append(f"Timezone: {tz}")
    lines.append(f"Scheduled for: {iso(scheduled_for_ms, tz)}")
    lines.append(f"Current time: {iso(now_ms, tz)}")
    if task["recurring"]:
        lines.append(f'Recurrence: cron "{task["cron"]}" (fire #{fire_number})')
    else:
        lines.append("Recurrence: one-off (this task will not fire again)")
    lines.append(
        "This message comes from a schedule, not from a person at a terminal: nobody may be "
        "watching, so work autonomously and leave your results where they will be found."
    )
    lines.append(f"Prompt: {task['prompt']}")
    return "\n".join(lines)
