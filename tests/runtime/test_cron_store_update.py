"""`CronStore.update`: a task replaced inside one write transaction, a changed schedule settling
every slot up to the change (the scheduler then fires nothing from before it), and a task that
keeps its id and agent."""

from __future__ import annotations

from pathlib import Path

import pytest

from tether.errors import NotFound, UsageError
from tether.runtime.cron.store import CronStore
from tether.runtime.cron.tasks import new_task

T0 = 1_800_000_000_000


def test_update_replaces_the_task_and_settles_slots_up_to_the_change(tmp_path: Path) -> None:
    store = CronStore(tmp_path)
    try:
        task, first = new_task(agent_id="agent-local-a", conversation_id="default", name="job",
                               description="", prompt="old", every=None, at=None,
                               cron="0 9 * * *", timezone="UTC", now_ms=T0)
        store.add(task, T0, first)
        later = T0 + 3_600_000
        got = store.update(task["id"], lambda t: {**t, "prompt": "new"}, later)
        assert got["prompt"] == "new" and store.get(task["id"]) == got
        assert [slot for t, slot in store.active() if t["id"] == task["id"]] == [later]
        store.update(task["id"], lambda t: {**t, "name": "renamed"})  # no schedule change
        assert [slot for t, slot in store.active() if t["id"] == task["id"]] == [later]
        with pytest.raises(UsageError, match="keeps its id and agent"):
            store.update(task["id"], lambda t: {**t, "agent_id": "agent-local-b"})
        assert store.get(task["id"])["agent_id"] == "agent-local-a"
        with pytest.raises(NotFound, match="deadbeef"):
            store.update("deadbeef", lambda t: t)
    finally:
        store.close()
