"""A schedule's due time fired once across the fleet: the (schedule, due time) row and the input
it becomes commit in one transaction, so any number of workers (and workers dying at any point)
produce exactly one input per due time, which the durable queue then runs once."""

from __future__ import annotations

from datetime import datetime
from typing import Generic

from tether.backends.postgres import logs
from tether.backends.postgres.input_queue import PgInputQueue, T


class ScheduleFires(Generic[T]):
    """Fires of the worker behind `queue` (its session)."""

    def __init__(self, queue: PgInputQueue[T]) -> None:
        self.queue = queue

    def fire_once(self, schedule_id: str, due_at: datetime, item: T) -> bool:
        """Claim `schedule_id`'s `due_at` and enqueue `item` for it; False (nothing written)
        when some worker already fired it. `due_at` must carry a time zone."""
        if due_at.tzinfo is None:
            raise ValueError(f"due time {due_at.isoformat()} of schedule {schedule_id} has no time zone")
        session = self.queue.session
        with session.transaction("fire a schedule") as cur:
            cur.execute(
                "INSERT INTO schedule_fires (schedule_id, due_at, fired_by) VALUES (%s, %s, %s)"
                " ON CONFLICT DO NOTHING", (schedule_id, due_at, session.worker),
            )
            if cur.rowcount != 1:
                return False
            self.queue.accept_in(cur, [item])
        logs.event("schedule_fired", f"{session.worker} fired {schedule_id} due {due_at.isoformat()}",
                   schedule=schedule_id, due_at=due_at.isoformat(), worker=session.worker,
                   conversation=item.conversation, item=item.item_id)
        return True

    def fired_by(self, schedule_id: str, due_at: datetime) -> str | None:
        with self.queue.session.transaction("read a schedule's fire") as cur:
            row = cur.execute(
                "SELECT fired_by FROM schedule_fires WHERE schedule_id = %s AND due_at = %s",
                (schedule_id, due_at),
            ).fetchone()
        return None if row is None else str(row[0])
