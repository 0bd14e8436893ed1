"""Effect checkpoints: the SQLite store's CAS and fencing, the ToolHooks, crash recovery."""

from __future__ import annotations

import asyncio
import sqlite3
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest

from tether.core.approvals import JudgedCall
from tether.core.execution import PreToolVerdict
from tether.core.permissions import Decision
from tether.core.tools import Effect, ToolResult, ToolRunContext
from tether.protocol.messages import AssistantMessage, TextPart, ToolResultMessage, UserMessage
from tether.protocol.tool_calls import ToolCall, ToolReturn
from tether.runtime.turns.checkpoints import (
    NOT_STARTED,
    UNKNOWN_OUTCOME,
    AlreadyCheckpointed,
    CheckpointConflict,
    CheckpointHooks,
    CheckpointStore,
    recover_open_calls,
)

CONV = "agent-1/local-conv-1"


@pytest.fixture
def store(tmp_path: Path) -> CheckpointStore:
    s = CheckpointStore(tmp_path / "checkpoints.db")
    yield s
    s.close()

def _judged(cid: str, name: str, tool: Any, args: dict[str, Any]) -> JudgedCall:
    return JudgedCall.of(ToolCall(cid, name, args), tool, Decision("allow", "test"))



def result(call_id: str, output: str = "done", is_error: bool = False) -> ToolReturn:
    return ToolReturn(call_id, "Bash", output, is_error)


def test_database_is_wal_with_full_sync(store: CheckpointStore) -> None:
    assert not store.path.exists()  # opened on first use: a text-only turn never creates it
    store.for_conversation(CONV)
    db = sqlite3.connect(store.path)
    assert db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    db.close()


def test_before_then_after_with_revisions(store: CheckpointStore) -> None:
    cp = store.record_before(CONV, ToolCall("call-1", "Bash", {"command": "touch x"}), "owner-a")
    assert (cp.phase, cp.revision) == ("before", 1)
    assert store.get(CONV, "call-1") == cp
    done = store.record_after(cp, result("call-1", "ok"))
    assert (done.phase, done.revision) == ("after", 2)
    stored = store.get(CONV, "call-1")
    assert stored is not None and stored.result == {
        "output": "ok",
        "is_error": False,
        "stdout": None,
        "stderr": None,
    }
    with pytest.raises(CheckpointConflict):  # a stale revision cannot write
        store.record_after(cp, result("call-1", "again"))


def test_a_call_is_checkpointed_once(store: CheckpointStore) -> None:
    store.record_before(CONV, ToolCall("call-1", "Bash", {}), "owner-a")
    with pytest.raises(AlreadyCheckpointed):
        store.record_before(CONV, ToolCall("call-1", "Bash", {}), "owner-b")
    store.record_before("other/conv", ToolCall("call-1", "Bash", {}), "owner-a")  # keyed per conversation


def test_takeover_fences_the_old_owner(store: CheckpointStore) -> None:
    cp = store.record_before(CONV, ToolCall("call-1", "Bash", {}), "owner-a")
    taken = store.mark_unknown(cp, "owner-b")
    assert (taken.phase, taken.owner, taken.revision) == ("unknown", "owner-b", 2)
    with pytest.raises(CheckpointConflict, match="another runtime owns"):
        store.record_after(cp, result("call-1"))  # the zombie predecessor
    stored = store.get(CONV, "call-1")
    assert (
        stored is not None
        and stored.phase == "unknown"
        and stored.result["output"] == UNKNOWN_OUTCOME
    )


def test_before_record_survives_reopening(tmp_path: Path) -> None:
    path = tmp_path / "c.db"
    first = CheckpointStore(path)
    first.record_before(CONV, ToolCall("call-9", "Write", {"file_path": "/x"}), "owner-a")
    # no close(): the process "dies" here; the committed row is on disk
    second = CheckpointStore(path)
    found = second.get(CONV, "call-9")
    assert found is not None and found.phase == "before" and found.arguments == {"file_path": "/x"}
    second.close()
    first.close()


def _history(*call_ids: str, answered: tuple[str, ...] = ()) -> list[Any]:
    calls = tuple(ToolCall(cid, "Bash", {"command": cid}) for cid in call_ids)
    out: list[Any] = [
        UserMessage("u1", (TextPart("go"),), 1),
        AssistantMessage("a1", calls, 2, stop_reason="requires_approval"),
    ]
    out += [ToolResultMessage(f"r-{c}", c, "Bash", (TextPart("ok"),), False, 3) for c in answered]
    return out


def test_recovery_distinguishes_exact_unknown_and_unstarted(store: CheckpointStore) -> None:
    store.record_before(CONV, ToolCall("a", "Bash", {}), "dead-owner")
    exact = store.record_before(CONV, ToolCall("b", "Bash", {}), "dead-owner")
    store.record_after(exact, result("b", "exact output"))
    recovered, results = recover_open_calls(store, CONV, "new-owner", _history("a", "b", "c"))
    assert [(r.tool_call_id, r.outcome) for r in recovered] == [("a", "unknown"), ("b", "exact")]
    assert [(m.tool_call_id, m.text, m.is_error) for m in results] == [
        ("a", UNKNOWN_OUTCOME, True),
        ("b", "exact output", False),
        ("c", NOT_STARTED, True),
    ]
    row = store.get(CONV, "a")
    assert row is not None and (row.phase, row.owner) == ("unknown", "new-owner")
    # recovering again (the results are now in the transcript) does nothing
    assert recover_open_calls(
        store, CONV, "new-owner", _history("a", "b", "c", answered=("a", "b", "c"))
    ) == ([], [])


def test_recovery_leaves_calls_without_checkpoints_to_the_backend(store: CheckpointStore) -> None:
    assert recover_open_calls(store, CONV, "o", _history("x", "y")) == ([], [])
    assert recover_open_calls(store, CONV, "o", []) == ([], [])


class _Tool:
    description = ""
    parameters: dict[str, Any] = {"type": "object"}

    def __init__(self, name: str, effect: Effect) -> None:
        self.name = name
        self.effect = effect

    def paths(self, args: Mapping[str, Any], cwd: Path) -> list[Path]:
        return []

    async def run(self, args: Mapping[str, Any], ctx: ToolRunContext) -> ToolResult:
        return ToolResult("ran")


class _Blocking:
    async def before(self, call: JudgedCall) -> PreToolVerdict:
        return PreToolVerdict(blocked="no")

    async def after(self, call: JudgedCall, result: ToolReturn) -> str | None:
        return None


def test_hooks_checkpoint_effectful_calls_only(store: CheckpointStore) -> None:
    started: list[str] = []

    async def scenario() -> None:
        hooks = CheckpointHooks(store, CONV, "owner-a", on_start=started.append)
        bash = _judged("c1", "Bash", _Tool("Bash", Effect.EXEC), {"command": "x"})
        read = _judged("c2", "Read", _Tool("Read", Effect.READ), {"file_path": "/f"})
        assert (await hooks.before(bash)).blocked is None
        assert store.get(CONV, "c1").phase == "before"
        await hooks.after(bash, result("c1", "out"))
        assert store.get(CONV, "c1").phase == "after"
        assert (await hooks.before(read)).blocked is None
        assert store.get(CONV, "c2") is None
        again = await hooks.before(bash)  # the same call id never runs twice
        assert again.blocked is not None and UNKNOWN_OUTCOME in again.blocked
        blocked = CheckpointHooks(store, CONV, "owner-a", inner=_Blocking())
        assert (
            await blocked.before(_judged("c3", "Bash", _Tool("Bash", Effect.EXEC), {}))
        ).blocked == "no"
        assert store.get(CONV, "c3") is None  # a blocked call has no effect to record

    asyncio.run(scenario())
    assert started == ["c1", "c2"]


def test_hooks_fail_closed_when_the_checkpoint_cannot_be_written(tmp_path: Path) -> None:
    broken = CheckpointStore(tmp_path / "b.db")
    broken.close()

    async def scenario() -> PreToolVerdict:
        hooks = CheckpointHooks(broken, CONV, "o")
        return await hooks.before(_judged("c1", "Write", _Tool("Write", Effect.WRITE), {}))

    verdict = asyncio.run(scenario())
    assert (
        verdict.blocked is not None and "could not record the effect checkpoint" in verdict.blocked
    )


def test_leftover_checkpoints_settle_from_the_answer_the_model_got(store: CheckpointStore) -> None:
    async def scenario() -> None:
        hooks = CheckpointHooks(store, CONV, "o")
        await hooks.before(_judged("c1", "Bash", _Tool("Bash", Effect.EXEC), {}))
        await hooks.settle_leftovers({"c1": result("c1", "denied after rewrite", True)})

    asyncio.run(scenario())
    row = store.get(CONV, "c1")
    assert (
        row is not None and row.phase == "after" and row.result["output"] == "denied after rewrite"
    )
