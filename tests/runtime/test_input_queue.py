"""The durable input queue (`runtime/turns/input_queue.py`): what is accepted is on disk with its key,
states follow marks, and only a dead owner's unfinished inputs are claimed — once."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from tether.runtime.turns.input_queue import (
    InputStoreUnavailable,
    SqliteInputQueue,
    StoredInput,
    StoredMessage,
    Workspace,
)


def _item(item_id: str, key: str | None = None, conversation: str = "agent-1/conv-1") -> StoredInput:
    return StoredInput(
        conversation=conversation, item_id=item_id, source="user", disposition="queued",
        messages=(StoredMessage("cm-1", "hello", ({"type": "text", "text": "hello"},)),),
        workspace=Workspace("/work/project", "standard", False),
        idempotency_key=key, request_id=f"req-{item_id}", enqueued_at="2026-01-01T00:00:00Z",
    )


def test_accepted_input_round_trips_with_its_key(tmp_path: Path) -> None:
    queue = SqliteInputQueue(tmp_path / "inputs.db", "owner-a")
    queue.accept(_item("q-1", key="k-1"))
    found = queue.by_key("agent-1/conv-1", "k-1")
    assert found is not None
    assert found.item_id == "q-1" and found.state == "queued"
    assert found.messages[0].parts == ({"type": "text", "text": "hello"},)
    assert found.workspace == Workspace("/work/project", "standard", False)
    assert queue.by_key("agent-1/conv-2", "k-1") is None  # keys are per conversation
    queue.mark("agent-1/conv-1", "q-1", "started", user_message_id="ui-msg-1-q-1")
    queue.mark("agent-1/conv-1", "q-1", "done")
    done = queue.by_key("agent-1/conv-1", "k-1")
    assert done is not None and done.state == "done" and done.user_message_id == "ui-msg-1-q-1"
    with pytest.raises(ValueError, match="unknown input state 'finished'"):
        queue.mark("agent-1/conv-1", "q-1", "finished")
    queue.close()


def test_a_live_owners_inputs_are_never_claimed(tmp_path: Path) -> None:
    live = SqliteInputQueue(tmp_path / "inputs.db", "owner-live")
    live.accept(_item("q-1"))
    other = SqliteInputQueue(tmp_path / "inputs.db", "owner-other")
    assert other.claim_orphans() == []
    live.close()  # a clean stop: what still waits is for the next owner
    assert [s.item_id for s in other.claim_orphans()] == ["q-1"]
    third = SqliteInputQueue(tmp_path / "inputs.db", "owner-third")
    assert third.claim_orphans() == []  # claimed once: `other` is alive and owns it now
    other.close()
    third.close()


def test_a_killed_owners_unfinished_inputs_are_claimed_in_order(tmp_path: Path) -> None:
    db = tmp_path / "inputs.db"
    code = f"""
import os
from tests.runtime.test_input_queue import _item
from tether.runtime.turns.input_queue import SqliteInputQueue
q = SqliteInputQueue({str(db)!r}, "owner-dead")
for n in range(1, 5):
    q.accept(_item(f"q-{{n}}"))
q.mark("agent-1/conv-1", "q-1", "done")
q.mark("agent-1/conv-1", "q-2", "started", user_message_id="ui-msg-1-q-2")
os._exit(9)  # no close: the kernel drops the owner's lock, its file stays
"""
    subprocess.run([sys.executable, "-c", code], check=False, cwd=Path(__file__).parents[2])
    heir = SqliteInputQueue(db, "owner-heir")
    claimed = heir.claim_orphans()
    assert [(s.item_id, s.state) for s in claimed] == [
        ("q-2", "started"), ("q-3", "queued"), ("q-4", "queued")
    ]
    assert claimed[0].user_message_id == "ui-msg-1-q-2"
    heir.mark("agent-1/conv-1", "q-3", "done")  # the heir owns them now
    assert [s.item_id for s in heir.of_conversation("agent-1/conv-1")] == ["q-2", "q-4"]
    heir.close()


def test_an_unwritable_queue_refuses_with_the_path(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("")
    queue = SqliteInputQueue(blocker / "inputs.db", "owner-a")
    with pytest.raises(InputStoreUnavailable, match="cannot be written") as caught:
        queue.accept(_item("q-1"))
    assert "not-a-dir" in str(caught.value)


def test_finished_inputs_keep_their_key_but_not_their_content(tmp_path: Path) -> None:
    queue = SqliteInputQueue(tmp_path / "inputs.db", "owner-a")
    queue.accept(_item("q-1", key="k-1"))
    queue.mark("agent-1/conv-1", "q-1", "cancelled", reason="the client went away")
    found = queue.by_key("agent-1/conv-1", "k-1")
    assert found is not None and found.state == "cancelled" and found.messages == ()
    assert found.reason == "the client went away"
    queue.close()


def test_a_dead_owners_lock_file_is_swept_and_a_live_ones_kept(tmp_path: Path) -> None:
    live = SqliteInputQueue(tmp_path / "inputs.db", "owner-live")
    live.open()
    stale = tmp_path / "inputs.owners" / "0123456789abcdef.lock"
    stale.write_text("")  # a killed owner's file: nobody holds its lock
    newcomer = SqliteInputQueue(tmp_path / "inputs.db", "owner-new")
    newcomer.open()
    names = {p.name for p in (tmp_path / "inputs.owners").iterdir()}
    assert stale.name not in names and len(names) == 2
    live.close()
    newcomer.close()
    assert list((tmp_path / "inputs.owners").iterdir()) == []
