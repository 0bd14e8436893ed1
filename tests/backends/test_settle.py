"""Settlement of what an interrupted turn left open (reference §4.4 step 1), pure and on disk."""

from __future__ import annotations

from pathlib import Path

from tests.backends.support import assistant, result, user
from tether.backends.local.transcript import Transcript, settle_orphaned_tool_calls
from tether.protocol.messages import Message, ToolResultMessage


def _results(appended: list[Message]) -> list[tuple[str, str, str, bool]]:
    out = []
    for m in appended:
        assert isinstance(m, ToolResultMessage)
        out.append((m.tool_call_id, m.tool_name, m.text, m.is_error))
    return out


def test_nothing_to_do() -> None:
    history: list[Message] = [
        user("u1"),
        assistant("a1", ("c1", "Bash"), stop="toolUse"),
        result("r1", "c1"),
        assistant("a2"),
    ]
    assert settle_orphaned_tool_calls(history) == (history, [])
    assert settle_orphaned_tool_calls([]) == ([], [])


def test_unanswered_calls_get_error_results_in_call_order() -> None:
    history: list[Message] = [
        user("u1"),
        assistant("a1", ("c1", "Bash"), ("c2", "Read"), ("c3", "Grep"), stop="toolUse"),
        result("r2", "c2"),
    ]
    kept, appended = settle_orphaned_tool_calls(history)
    assert kept == history
    assert _results(appended) == [
        ("c1", "Bash", "Turn did not complete", True),
        ("c3", "Grep", "Turn did not complete", True),
    ]
    assert len({m.id for m in appended}) == 2 and all(
        m.id.startswith("letta-msg-") for m in appended
    )


def test_interrupt_reason_is_used() -> None:
    _, appended = settle_orphaned_tool_calls(
        [assistant("a1", ("c1", "Bash"), stop="toolUse")], reason="Interrupted by user"
    )
    assert _results(appended) == [("c1", "Bash", "Interrupted by user", True)]


def test_a_result_before_the_call_does_not_answer_it() -> None:
    history: list[Message] = [result("r0", "c1"), assistant("a1", ("c1", "Bash"), stop="toolUse")]
    _, appended = settle_orphaned_tool_calls(history)
    assert _results(appended) == [("c1", "Bash", "Turn did not complete", True)]


def test_never_finished_trailing_assistant_is_rolled_back() -> None:
    history: list[Message] = [
        user("u1"),
        assistant("a1", ("c1", "Bash"), stop="toolUse"),
        result("r1", "c1"),
        assistant("a2", ("c2", "Bash"), stop=None),  # provider call never finished
    ]
    kept, appended = settle_orphaned_tool_calls(history)
    assert kept == history[:3]
    assert appended == []  # its call goes with it


def test_rollback_then_orphans_of_what_remains() -> None:
    history: list[Message] = [
        assistant("a1", ("c1", "Bash"), stop="toolUse"),
        assistant("a2", text="partial", stop=None),
    ]
    kept, appended = settle_orphaned_tool_calls(history)
    assert kept == history[:1]
    assert _results(appended) == [("c1", "Bash", "Turn did not complete", True)]


def test_a_finished_assistant_mid_history_without_stop_is_kept() -> None:
    history: list[Message] = [assistant("a1", stop=None), user("u2")]
    assert settle_orphaned_tool_calls(history) == (history, [])


def test_settlement_is_durable_across_reload(tmp_path: Path) -> None:
    t = Transcript(tmp_path / "messages.jsonl")
    t.append(
        [
            user("u1"),
            assistant("a1", ("c1", "Bash"), stop="toolUse"),
            assistant("a2", stop=None),
        ]
    )
    history = t.load()
    kept, appended = settle_orphaned_tool_calls(history)
    for message in history:
        if message not in kept:
            t.rollback(message.id)
    t.append(appended)
    reloaded = Transcript(t.path).load()
    assert reloaded == [*kept, *appended]
    assert settle_orphaned_tool_calls(reloaded) == (reloaded, [])
