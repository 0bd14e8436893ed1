"""The SQLite-held stores of a TETHER_HOME copied to a real PostgreSQL and back
(`backends/postgres/migrate.py`): what the runtime's own classes wrote reads back the same
through the PostgreSQL ones and again through the SQLite ones, verified; a filled target or a
missing one is refused with what to do."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fleet.support import CODEC, item
from tether.protocol.tool_calls import ToolCall, ToolReturn
from tether.runtime.turns.checkpoints import (
    UNKNOWN_OUTCOME,
    AlreadyCheckpointed,
    Checkpoint,
    CheckpointConflict,
    CheckpointStore,
)
from tether.runtime.turns.input_queue import SqliteInputQueue

CONV = "agent-1/conv-1"


def _fill(home: Path) -> None:
    queue = SqliteInputQueue(home / "inputs.db", "owner-a")
    queue.accept_many([item("q-1", key="k-1"), item("q-2", "second"), item("q-3", key="k-3")])
    queue.mark(CONV, "q-1", "done")
    queue.mark(CONV, "q-2", "started", user_message_id="user-q-2")
    queue.close()
    checkpoints = CheckpointStore(home / "checkpoints.db")
    cp = checkpoints.record_before(CONV, ToolCall("call-1", "Bash", {"command": "make"}), "owner-a")
    checkpoints.record_after(cp, ToolReturn("call-1", "Bash", "built", False))
    checkpoints.record_before(CONV, ToolCall("call-2", "Write", {"file_path": "/x"}), "owner-a")
    checkpoints.close()


def _open_empty(home: Path) -> None:
    """A fresh home's stores, created by the runtime's own classes."""
    queue = SqliteInputQueue(home / "inputs.db", "opener")
    queue.open()
    queue.close()
    checkpoints = CheckpointStore(home / "checkpoints.db")
    checkpoints.for_conversation(CONV)
    checkpoints.close()


def test_a_homes_inputs_and_checkpoints_go_to_postgres_and_back(pg_url: str, tmp_path: Path) -> None:
    from tether.backends.postgres.checkpoints import CheckpointShape, PgCheckpointStore
    from tether.backends.postgres.connection import PgSession
    from tether.backends.postgres.input_queue import PgInputQueue
    from tether.backends.postgres.migrate import (
        MigrationRefused,
        home_to_postgres,
        postgres_to_home,
    )

    home, back = tmp_path / "home-a", tmp_path / "home-b"
    _fill(home)
    session = PgSession(pg_url, "migrator")
    copied = home_to_postgres(home, session)
    assert [(c.table, c.rows) for c in copied] == [("inputs", 3), ("effect_checkpoints", 2)]

    local = SqliteInputQueue(home / "inputs.db", "reader")
    pg = PgInputQueue(session, CODEC)
    every = ("queued", "started", "done", "cancelled", "interrupted", "not_run")
    assert pg.of_conversation(CONV, every) == local.of_conversation(CONV, every)
    assert [s.seq for s in pg.of_conversation(CONV, every)] == [1, 2, 3]
    assert pg.by_key(CONV, "k-3") == local.by_key(CONV, "k-3")
    pg.accept(item("q-4"))  # the sequence continues after the copied rows
    assert [s.seq for s in pg.of_conversation(CONV)][-1] == 4
    shape = CheckpointShape(Checkpoint, UNKNOWN_OUTCOME, AlreadyCheckpointed, CheckpointConflict)
    local_cps = CheckpointStore(home / "checkpoints.db")
    assert PgCheckpointStore(session, shape).for_conversation(CONV) == local_cps.for_conversation(CONV)
    local_cps.close()
    local.close()

    with pytest.raises(MigrationRefused, match="the store's inputs already holds 4 rows"):
        home_to_postgres(home, session)
    with pytest.raises(MigrationRefused, match="home-b/inputs.db does not exist: open the home"):
        postgres_to_home(session, back)
    _open_empty(back)
    assert [c.rows for c in postgres_to_home(session, back)] == [4, 2]
    returned = SqliteInputQueue(back / "inputs.db", "reader")
    assert returned.of_conversation(CONV, every) == pg.of_conversation(CONV, every)
    returned.close()
    with pytest.raises(MigrationRefused, match="already holds 4 rows in inputs"):
        postgres_to_home(session, back)
    session.close()
