"""`PgInputQueue` keeps the runtime's `InputQueue` contract: the same tests run against the
SQLite queue and the PostgreSQL one (a real server, tests/fleet/conftest.py)."""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.fleet.support import CODEC, item
from tether.backends.postgres.input_queue import PgInputQueue
from tether.runtime.turns.input_queue import InputQueue, SqliteInputQueue, StoredInput, Workspace

ROOT = Path(__file__).resolve().parents[2]
MakeQueue = Callable[[str], Any]


@pytest.fixture(params=["sqlite", "postgres"])
def kind(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def store(kind: str, tmp_path: Path, request: pytest.FixtureRequest) -> str:
    """Where the queues of one test live: a SQLite file or a fresh PostgreSQL database."""
    if kind == "sqlite":
        return str(tmp_path / "inputs.db")
    return str(request.getfixturevalue("pg_url"))


@pytest.fixture
def make_queue(kind: str, store: str) -> Iterator[MakeQueue]:
    opened: list[Any] = []

    def make(owner: str) -> Any:
        if kind == "sqlite":
            queue: Any = SqliteInputQueue(Path(store), owner)
        else:
            from tether.backends.postgres.connection import PgSession
            from tether.backends.postgres.input_queue import PgInputQueue

            queue = PgInputQueue(PgSession(store, owner), CODEC)
        opened.append(queue)
        return queue

    yield make
    for queue in opened:
        queue.close()


def _typed(queue: PgInputQueue[StoredInput]) -> InputQueue:
    return queue  # mypy: the PostgreSQL queue is the runtime's InputQueue


def test_both_queues_are_input_queues(make_queue: MakeQueue) -> None:
    queue: InputQueue = make_queue("owner-a")  # mypy checks the Protocol; this runs it
    assert queue.accept_many([]) == []


def test_accepted_input_round_trips_with_its_key(make_queue: MakeQueue) -> None:
    queue = make_queue("owner-a")
    assert queue.accept_many([item("q-1", key="k-1"), item("q-2", key="k-1")]) == [None, "key"]
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


def test_finished_inputs_keep_their_key_but_not_their_content(make_queue: MakeQueue) -> None:
    queue = make_queue("owner-a")
    queue.accept(item("q-1", key="k-1"))
    queue.mark("agent-1/conv-1", "q-1", "cancelled", reason="the client went away")
    found = queue.by_key("agent-1/conv-1", "k-1")
    assert found is not None and found.state == "cancelled" and found.messages == ()
    assert found.reason == "the client went away"


def test_a_live_owners_inputs_are_never_claimed(make_queue: MakeQueue) -> None:
    live = make_queue("owner-live")
    live.accept(item("q-1"))
    other = make_queue("owner-other")
    assert other.claim_orphans() == []
    live.close()  # a clean stop: what still waits is for the next owner
    assert [s.item_id for s in _claim(other)] == ["q-1"]
    third = make_queue("owner-third")
    assert third.claim_orphans() == []  # claimed once: `other` is alive and owns it now


def test_a_killed_owners_unfinished_inputs_are_claimed_in_order(
    kind: str, store: str, make_queue: MakeQueue
) -> None:
    code = f"""
import os
from tests.fleet.test_pg_input_queue import _open
q = _open({kind!r}, {store!r}, "owner-dead")
for n in range(1, 5):
    q.accept(__import__("tests.fleet.support").fleet.support.item(f"q-{{n}}"))
q.mark("agent-1/conv-1", "q-1", "done")
q.mark("agent-1/conv-1", "q-2", "started", user_message_id="ui-msg-1-q-2")
os._exit(9)  # no close: the kernel drops the owner's lock and its database session
"""
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 9, done.stderr
    heir = make_queue("owner-heir")
    claimed = _claim(heir)
    assert [(s.item_id, s.state) for s in claimed] == [
        ("q-2", "started"), ("q-3", "queued"), ("q-4", "queued")
    ]
    assert claimed[0].user_message_id == "ui-msg-1-q-2"
    heir.mark("agent-1/conv-1", "q-3", "done")  # the heir owns them now
    assert [s.item_id for s in heir.of_conversation("agent-1/conv-1")] == ["q-2", "q-4"]


def test_a_mark_of_an_input_another_worker_claimed_is_refused(pg_url: str) -> None:
    from tether.backends.postgres.connection import PgSession
    from tether.backends.postgres.input_queue import NotOwner, PgInputQueue

    first = PgInputQueue(PgSession(pg_url, "owner-first"), CODEC)
    first.accept(item("q-1"))
    first.close()
    heir = PgInputQueue(PgSession(pg_url, "owner-heir"), CODEC)
    assert [s.item_id for s in _claim(heir)] == ["q-1"]
    back = PgInputQueue(PgSession(pg_url, "owner-first"), CODEC)  # the same name, restarted
    with pytest.raises(NotOwner, match="q-1 of agent-1/conv-1 cannot be marked done by"
                       " owner-first: worker owner-heir owns it now"):
        back.mark("agent-1/conv-1", "q-1", "done")
    back.mark("agent-1/conv-1", "q-unknown", "done")  # an unknown input: nothing, as in SQLite
    heir.close()
    back.close()


def test_a_wrong_store_url_names_what_was_wrong() -> None:
    from tether.backends.postgres.connection import PgSession, PgStoreUnavailable

    with pytest.raises(PgStoreUnavailable, match="'mysql://u:\\*\\*\\*@h/db' is not a PostgreSQL"):
        PgSession("mysql://u:secret@h/db", "w")


def test_an_unreachable_database_is_named_without_its_password(tmp_path: Path) -> None:
    pytest.importorskip("psycopg", reason="the postgres extra: pip install -e '.[postgres]'")
    from tether.backends.postgres.connection import PgSession, PgStoreUnavailable
    from tether.backends.postgres.input_queue import PgInputQueue

    url = f"postgresql://u:secret@/db?host={tmp_path}"  # no server's socket there
    queue = PgInputQueue(PgSession(url, "w"), CODEC)
    with pytest.raises(PgStoreUnavailable, match="cannot connect to the PostgreSQL store") as caught:
        queue.accept(item("q-1"))
    assert "secret" not in str(caught.value) and "u:***@" in str(caught.value)


def _open(kind: str, store: str, owner: str) -> Any:
    if kind == "sqlite":
        return SqliteInputQueue(Path(store), owner)
    from tether.backends.postgres.connection import PgSession
    from tether.backends.postgres.input_queue import PgInputQueue

    return PgInputQueue(PgSession(store, owner), CODEC)


def _claim(queue: Any, deadline_s: float = 30.0) -> list[Any]:
    """`claim_orphans` until it claims something: a killed worker's database session ends a
    moment after its process (the server notices the closed socket); bounded, not timed."""
    end = time.monotonic() + deadline_s
    while True:
        claimed = queue.claim_orphans()
        if claimed or time.monotonic() > end:
            return list(claimed)
        time.sleep(0.05)
