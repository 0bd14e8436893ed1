"""Schedule parsing, jitter and the prompt wrapper (tether.runtime.cron.schedule / tasks)."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from tether.errors import UsageError
from tether.runtime.cron import schedule
from tether.runtime.cron.tasks import new_task

T0 = int(datetime(2026, 3, 10, 14, 7, 30, tzinfo=UTC).timestamp() * 1000)


@pytest.mark.parametrize(
    ("every", "expr"),
    [
        ("30s", "* * * * *"),
        ("1m", "* * * * *"),
        ("5m", "*/5 * * * *"),
        ("90m", "7 */2 * * *"),
        ("2h", "7 */2 * * *"),
        ("5h", "7 */6 * * *"),
        ("1h", "7 * * * *"),
        ("24h", "7 14 * * *"),
        ("3d", "7 14 * * *"),
    ],
)
def test_every_becomes_a_cron_expression(every: str, expr: str) -> None:
    assert schedule.every_to_cron(every, T0, "UTC") == expr


@pytest.mark.parametrize("bad", ["5", "m", "0m", "-5m", "5w", "five minutes"])
def test_every_rejects_what_it_cannot_read(bad: str) -> None:
    with pytest.raises(UsageError, match="--every"):
        schedule.every_to_cron(bad, T0, "UTC")


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("in 45m", T0 + 45 * 60_000),
        ("in 2h", T0 + 2 * 3_600_000),
        ("3:00pm", int(datetime(2026, 3, 10, 15, 0, tzinfo=UTC).timestamp() * 1000)),
        ("2pm", int(datetime(2026, 3, 11, 14, 0, tzinfo=UTC).timestamp() * 1000)),
        ("09:15", int(datetime(2026, 3, 11, 9, 15, tzinfo=UTC).timestamp() * 1000)),
        ("2026-04-01T08:00", int(datetime(2026, 4, 1, 8, 0, tzinfo=UTC).timestamp() * 1000)),
    ],
)
def test_at_times(text: str, expected: int) -> None:
    assert schedule.parse_at(text, T0, "UTC") == expected


def test_at_uses_the_timezone() -> None:
    at = schedule.parse_at("3:00pm", T0, "Europe/Berlin")  # 14:07 UTC = 15:07 Berlin: tomorrow
    assert schedule.iso(at, "Europe/Berlin") == "2026-03-11T15:00:00+01:00"


@pytest.mark.parametrize("bad", ["13:00pm", "25:00", "yesterday", "2020-01-01T00:00", "in 0m"])
def test_at_rejects_bad_times(bad: str) -> None:
    with pytest.raises(UsageError, match="--at"):
        schedule.parse_at(bad, T0, "UTC")


@pytest.mark.parametrize(
    ("expr", "why"),
    [
        ("* * * *", "5 fields"),
        ("* * * * * *", "5 fields"),
        ("61 * * * *", "not a valid"),
        ("* * 32 * *", "not a valid"),
        ("a b c d e", "not a valid"),
    ],
)
def test_cron_expressions_are_validated_by_cronsim(expr: str, why: str) -> None:
    with pytest.raises(UsageError, match=why):
        schedule.check_cron(expr)


def test_next_fire_follows_the_zone_across_dst() -> None:
    # 2026-03-29 02:00 Europe/Berlin does not exist; a 09:00 daily stays 09:00 local
    before = int(datetime(2026, 3, 28, 12, 0, tzinfo=UTC).timestamp() * 1000)
    first = schedule.next_fire_ms("0 9 * * *", "Europe/Berlin", before)
    assert schedule.iso(first, "Europe/Berlin") == "2026-03-29T09:00:00+02:00"


def test_bad_timezone_is_named() -> None:
    with pytest.raises(UsageError, match="Mars/Olympus"):
        schedule.resolve_timezone("Mars/Olympus")


@pytest.mark.parametrize("task_id", [f"{n:08x}" for n in range(0, 4000, 97)])
def test_recurring_jitter_is_under_a_tenth_of_the_period_and_a_minute(task_id: str) -> None:
    assert 0 <= schedule.recurring_jitter_ms(task_id, "* * * * *", "UTC", T0) < 6000
    assert 0 <= schedule.recurring_jitter_ms(task_id, "0 * * * *", "UTC", T0) < 59_999


def test_one_shot_jitter_only_on_the_hour_or_half_and_never_before_creation() -> None:
    on_the_hour = schedule.parse_at("3:00pm", T0, "UTC")
    assert all(
        0 <= schedule.one_shot_jitter_ms(f"{n:08x}", on_the_hour, "UTC", T0) < 90_000
        for n in range(50)
    )
    assert any(schedule.one_shot_jitter_ms(f"{n:08x}", on_the_hour, "UTC", T0) for n in range(50))
    odd = schedule.parse_at("in 7m", T0, "UTC")
    assert schedule.one_shot_jitter_ms("abcd0123", odd, "UTC", T0) == 0
    soon = T0 + 22_500  # 14:07:52.5 … not :00/:30; then one exactly 10 s after creation
    assert schedule.one_shot_jitter_ms("abcd0123", soon, "UTC", T0) == 0
    half = int(datetime(2026, 3, 10, 14, 30, tzinfo=UTC).timestamp() * 1000)
    created = half - 10_000
    assert all(
        schedule.one_shot_jitter_ms(f"{n:08x}", half, "UTC", created) <= 10_000 for n in range(50)
    )


def test_prompt_wrapper() -> None:
    task, _ = new_task(
        agent_id="agent-local-x",
        conversation_id="new",
        name="nightly",
        description="check the build",
        prompt="run the tests",
        every="1h",
        at=None,
        cron=None,
        timezone="UTC",
        now_ms=T0,
    )
    text = schedule.wrap_prompt(task, T0 + 60_000, T0 + 61_000, 3)
    lines = text.splitlines()
    assert lines[0] == 'Scheduled task "nightly" is firing.'
    assert "Description: check the build" in lines
    assert "Timezone: UTC" in lines
    assert "Scheduled for: 2026-03-10T14:08:30+00:00" in lines
    assert "Current time: 2026-03-10T14:08:31+00:00" in lines
    assert 'Recurrence: cron "7 * * * *" (fire #3)' in lines
    assert lines[-1] == "Prompt: run the tests"


@pytest.mark.parametrize(
    ("kwargs", "why"),
    [
        ({"every": "5m", "cron": "* * * * *"}, "exactly one"),
        ({}, "exactly one"),
        ({"every": "5m", "prompt": "  "}, "--prompt"),
        ({"every": "5m", "conversation_id": "../x"}, "--conversation"),
    ],
)
def test_new_task_rejects_bad_input(kwargs: dict[str, str], why: str) -> None:
    base = {
        "agent_id": "a",
        "conversation_id": "new",
        "name": "n",
        "description": "",
        "prompt": "p",
        "every": None,
        "at": None,
        "cron": None,
        "timezone": "UTC",
        "now_ms": T0,
    }
    with pytest.raises(UsageError, match=why):
        new_task(**{**base, **kwargs})  # type: ignore[arg-type]
