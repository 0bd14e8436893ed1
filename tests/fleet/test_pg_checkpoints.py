"""Effect checkpoints on PostgreSQL keep the runtime's `CheckpointStore` contract: the same
checks run on SQLite and a real PostgreSQL, the runtime's own recovery (`recover_open_calls`)
and `CheckpointHooks` run on both, and in a fleet a worker whose lease moved cannot settle a
checkpoint its successor took over."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tether.core.approvals import JudgedCall
from tether.core.permissions import Decision
from tether.core.tools import Effect
from tether.protocol.messages import AssistantMessage, TextPart, UserMessage
from tether.protocol.tool_calls import ToolCall, ToolReturn
from tether.runtime.turns.checkpoints import (
    UNKNOWN_OUTCOME,
    AlreadyCheckpointed,
    Checkpoint,
    CheckpointConflict,
    CheckpointHooks,
    CheckpointStore,
    recover_open_calls,
)

CONV = "agent-1/conv-1"

def _judged(cid: str, name: str, tool: Any, args: dict[str, Any]) -> JudgedCall:
    return JudgedCall.of(ToolCall(cid, name, args), tool, Decision("allow", "test"))



def _pg_store(url: str, worker: str) -> Any:
    from tether.backends.postgres.checkpoints import CheckpointShape, PgCheckpointStore
    from tether.backends.postgres.connection import PgSession

    shape = CheckpointShape(Checkpoint, UNKNOWN_OUTCOME, AlreadyCheckpointed, CheckpointConflict)
    return PgCheckpointStore(PgSession(url, worker), shape)


@pytest.fixture(params=["sqlite", "postgres"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Any]:
    if request.param == "sqlite":
        made: Any = CheckpointStore(tmp_path / "checkpoints.db")
    else:
        made = _pg_store(request.getfixturevalue("pg_url"), "worker-1")
    yield made
    made.close()


def result(call_id: str, output: str = "done") -> ToolReturn:
    return ToolReturn(call_id, "Bash", output, False)


def test_before_then_after_with_revisions(store: Any) -> None:
    cp = store.record_before(CONV, ToolCall("call-1", "Bash", {"command": "touch x"}), "owner-a")
    assert (cp.phase, cp.revision) == ("before", 1) and store.get(CONV, "call-1") == cp
    done = store.record_after(cp, result("call-1", "ok"))
    assert (done.phase, done.revision) == ("after", 2)
    assert store.get(CONV, "call-1").result == {
        "output": "ok", "is_error": False, "stdout": None, "stderr": None,
    }
    with pytest.raises(CheckpointConflict):  # a stale revision cannot write
        store.record_after(cp, result("call-1", "again"))


def test_a_call_is_checkpointed_once(store: Any) -> None:
    store.record_before(CONV, ToolCall("call-1", "Bash", {}), "owner-a")
    with pytest.raises(AlreadyCheckpointed):
        store.record_before(CONV, ToolCall("call-1", "Bash", {}), "owner-b")
    store.record_before("other/conv", ToolCall("call-1", "Bash", {}), "owner-a")  # keyed per conversation


def test_takeover_fences_the_old_owner(store: Any) -> None:
    cp = store.record_before(CONV, ToolCall("call-1", "Bash", {}), "owner-a")
    taken = store.mark_unknown(cp, "owner-b")
    assert (taken.phase, taken.owner, taken.revision) == ("unknown", "owner-b", 2)
    with pytest.raises(CheckpointConflict, match="another runtime owns"):
        store.record_after(cp, result("call-1"))
    assert store.get(CONV, "call-1").result["output"] == UNKNOWN_OUTCOME


def test_the_runtimes_recovery_runs_on_either_store(store: Any) -> None:
    store.record_before(CONV, ToolCall("a", "Bash", {}), "dead-owner")
    exact = store.record_before(CONV, ToolCall("b", "Bash", {}), "dead-owner")
    store.record_after(exact, result("b", "exact output"))
    calls = tuple(ToolCall(c, "Bash", {"command": c}) for c in ("a", "b"))
    history = [UserMessage("u1", (TextPart("go"),), 1),
               AssistantMessage("a1", calls, 2, stop_reason="requires_approval")]
    recovered, results = recover_open_calls(store, CONV, "new-owner", history)
    assert [(r.tool_call_id, r.outcome) for r in recovered] == [("a", "unknown"), ("b", "exact")]
    assert [m.text for m in results] == [UNKNOWN_OUTCOME, "exact output"]
    assert store.get(CONV, "a").owner == "new-owner"


def test_the_runtimes_hooks_run_on_either_store(store: Any) -> None:
    class _Tool:
        name, effect, description, parameters = "Bash", Effect.EXEC, "", {"type": "object"}

    async def scenario() -> None:
        hooks = CheckpointHooks(store, CONV, "owner-a")
        bash = _judged("c1", "Bash", _Tool(), {"command": "x"})  # type: ignore[arg-type]
        assert (await hooks.before(bash)).blocked is None
        assert store.get(CONV, "c1").phase == "before"
        await hooks.after(bash, result("c1", "out"))
        assert store.get(CONV, "c1").phase == "after"
        again = await hooks.before(bash)  # the same call id never runs twice
        assert again.blocked is not None

    asyncio.run(scenario())


def test_a_worker_whose_lease_moved_cannot_settle_its_checkpoint(pg_url: str) -> None:
    from tether.backends.postgres.connection import LeaseLost
    from tether.backends.postgres.leases import ConversationLeases

    old, new = _pg_store(pg_url, "worker-old"), _pg_store(pg_url, "worker-new")
    old_leases = ConversationLeases(old.session, ttl_s=0.2)
    assert old_leases.acquire(CONV) is not None
    cp = old.record_before(CONV, ToolCall("call-1", "Bash", {"command": "deploy"}), "worker-old")
    new_leases = ConversationLeases(new.session, ttl_s=30)
    lease = None
    while lease is None:  # until the old lease expires (its worker stopped renewing)
        time.sleep(0.05)
        lease = new_leases.acquire(CONV)
    with pytest.raises(LeaseLost, match="worker-old does not hold its lease .token 2, held by worker-new"):
        old.record_after(cp, result("call-1", "deployed"))
    with pytest.raises(LeaseLost):
        old.record_before(CONV, ToolCall("call-2", "Bash", {}), "worker-old")
    settled = new.mark_unknown(cp, "worker-new")
    assert settled.phase == "unknown" and new.get(CONV, "call-1").owner == "worker-new"
    old.close()
    new.close()
