"""Compaction planning: thresholds, estimates, and the pairing invariant under random histories."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from tether.core import compaction as plan
from tether.protocol.messages import (
    AssistantMessage,
    Message,
    TextPart,
    ToolResultMessage,
    Usage,
    UserMessage,
)
from tether.protocol.tool_calls import ToolCall


def user(i: int, text: str = "hello") -> UserMessage:
    return UserMessage(f"u{i}", (TextPart(text),), i)


def assistant(i: int, text: str = "ok", calls: int = 0, usage: Usage | None = None) -> AssistantMessage:
    parts = (TextPart(text), *(ToolCall(f"c{i}-{k}", "Bash", {"command": "ls"}) for k in range(calls)))
    return AssistantMessage(f"a{i}", parts, i, usage=usage, stop_reason="end_turn")


def result(call_id: str, i: int, text: str = "out") -> ToolResultMessage:
    return ToolResultMessage(f"r{i}-{call_id}", call_id, "Bash", (TextPart(text),), False, i)


@st.composite
def histories(draw: st.DrawFn) -> list[Message]:
    """user, then rounds of assistant (maybe with calls) + their results; maybe a pending call."""
    out: list[Message] = [user(0, "x" * draw(st.integers(1, 400)))]
    for i in range(1, draw(st.integers(1, 25))):
        calls = draw(st.integers(0, 3))
        out.append(assistant(i, "y" * draw(st.integers(0, 500)), calls))
        pending = i > 1 and calls and draw(st.booleans()) and draw(st.integers(0, 9)) == 0
        if pending:
            return out  # a trailing assistant whose calls await results
        out.extend(result(f"c{i}-{k}", i, "z" * draw(st.integers(0, 3000))) for k in range(calls))
        if draw(st.booleans()):
            out.append(user(i, "w" * draw(st.integers(1, 300))))
    return out


def summary() -> UserMessage:
    return UserMessage("s", (TextPart(plan.summary_text("sum", {}, "t")),), 0)


@settings(max_examples=400, deadline=None)
@given(histories(), st.integers(1024, 200_000), st.sampled_from([0.1, 0.3, 0.5, 0.9]))
def test_sliding_plan_never_separates_a_call_from_its_result(history, window, pct) -> None:
    assert plan.paired(history)
    chosen = plan.plan_sliding(history, window, pct)
    assert list(chosen.evicted) + list(chosen.kept) == history  # nothing lost, order kept
    assert plan.paired([summary(), *chosen.kept])
    if chosen.kept:
        assert history[-1] in chosen.kept


@settings(max_examples=200, deadline=None)
@given(histories())
def test_all_plan_keeps_only_a_pending_call(history) -> None:
    chosen = plan.plan_all(history)
    assert list(chosen.evicted) + list(chosen.kept) == history
    assert plan.paired([summary(), *chosen.kept])
    assert len(chosen.kept) <= 1


def test_threshold_and_estimate() -> None:
    assert plan.threshold(200_000) == 200_000 - 16384
    assert plan.threshold(8192) == 8192 - 1638
    history = [user(0, "a" * 400), assistant(1, "b" * 40)]
    assert plan.estimate("s" * 40, history) == 10 + 100 + 10
    anchored = [user(0, "a" * 400), assistant(1, "b", usage=Usage(500, 20)), user(2, "c" * 40)]
    assert plan.estimate("s" * 40, anchored) == 520 + 10  # provider count + what followed
    after = [summary(), user(3, "d" * 40)]
    assert plan.estimate("", [*anchored, *after][3:]) < 520  # usage from before a summary ignored


def test_paired_rejects_orphans() -> None:
    assert not plan.paired([user(0), result("nope", 1)])
    assert not plan.paired([assistant(1, calls=1), user(2)])
    assert plan.paired([user(0), assistant(1, calls=1)])  # trailing pending call


def test_transcript_rendering_clips_tool_results() -> None:
    text = plan.render_transcript([user(0, "hi"), assistant(1, "sure", 1), result("c1-0", 1, "x" * 5000)])
    assert "[tool call Bash]" in text and "more characters]" in text and len(text) < 2500
    assert plan.render_transcript([]) == plan.NO_MESSAGES
    cut = plan.truncate_middle("a" * 1000 + "b" * 1000, 500)
    assert len(cut) <= 500 and cut.startswith("a") and cut.endswith("b")
