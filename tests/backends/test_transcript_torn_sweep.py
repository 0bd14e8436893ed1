"""The torn-write sweep (security cases f3/d1, issue 29 item 5): for many shapes of final record,
a crash that cut it at any byte, and left the rest of its block zero-filled or not, is a torn
tail: the full read and the tail reader leave that record out and fail on nothing, and the next
append cuts the torn bytes off, so no line is ever fused and no NUL stays."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tests.backends.support import assistant, result, user
from tether.backends.local.tail import read_tail
from tether.backends.local.transcript import Transcript
from tether.protocol.messages import (
    AssistantMessage,
    ImagePart,
    TextPart,
    ThinkingPart,
    UserMessage,
)
from tether.protocol.tool_calls import ToolCall

Write = Callable[[Transcript], None]

SHAPES: dict[str, Write] = {
    "user text": lambda t: t.append([user("last", "fix the failing test")]),
    "multi-byte text": lambda t: t.append([user("last", "naïve café — 日本語 🚀")]),
    "escapes": lambda t: t.append([user("last", 'quote " back \\ nl \n tab \t nul-escaped \x00')]),
    "an entry inside text": lambda t: t.append([user("last", '{"type":"message","id":"ab"}')]),
    "image": lambda t: t.append(
        [UserMessage("last", (ImagePart("aGVsbG8=" * 20, "image/png"),), 1_700_000_000_000)]
    ),
    "assistant with calls": lambda t: t.append([assistant("last", ("c1", "Bash"), ("c2", "Read"))]),
    "unfinished assistant": lambda t: t.append([assistant("last", stop=None)]),
    "thinking": lambda t: t.append(
        [AssistantMessage("last", (ThinkingPart("hmm {", "sig"), TextPart("}")), 1, stop_reason="endTurn")]
    ),
    "nested arguments": lambda t: t.append(
        [
            AssistantMessage(
                "last",
                (ToolCall("c9", "Write", {"a": {"b": [1, {"type": "x"}]}, "s": "}\n{"}),),
                1,
                stop_reason="toolUse",
            )
        ]
    ),
    "tool result": lambda t: t.append([result("last", "c0", "exit 0\n")]),
    "replaced snapshot": lambda t: t.append([user("u1", "edited in place")]),
    "rollback": lambda t: t.rollback("u1"),
    "compaction": lambda t: t.append_compaction(
        user("summary", "so far"), summary="so far", first_kept_message_id="a0", tokens_before=99
    ),
}

PADDINGS = {"cut": b"", "cut, one NUL": b"\0", "cut, zero-filled block": b"\0" * 4096}


def _before_and_last(tmp_path: Path, shape: str) -> tuple[bytes, bytes]:
    path = tmp_path / "whole.jsonl"
    t = Transcript(path)
    t.append([user("u1"), assistant("a0", ("c0", "Bash")), result("r0", "c0")])
    t.append([user("u2")])
    before = path.read_bytes()
    SHAPES[shape](t)
    after = path.read_bytes()
    assert after.startswith(before) and after.count(b"\n") == before.count(b"\n") + 1
    return before, after[len(before) :]


@pytest.mark.parametrize("padding", list(PADDINGS))
@pytest.mark.parametrize("shape", list(SHAPES))
def test_a_final_record_cut_at_any_byte_is_a_torn_tail(tmp_path: Path, shape: str, padding: str) -> None:
    before, last = _before_and_last(tmp_path, shape)
    pad = PADDINGS[padding]
    path = tmp_path / "messages.jsonl"
    path.write_bytes(before)
    expected = Transcript(path).load()
    # Every cut short of the record's LF (the whole record without it too), then its padding.
    for cut in range(0 if pad else 1, len(last)):
        with open(path, "r+b", buffering=0) as fh:
            fh.truncate(len(before))
            fh.seek(len(before))
            fh.write(last[:cut] + pad)
        assert Transcript(path).load() == expected, (cut, last[:cut])
        if cut % 7 and cut != len(last) - 1:
            continue  # the other readers and the repair (an fsync) on a sample of the cuts
        assert Transcript(path).tail(3) == expected[-3:], cut
        assert read_tail(path, 2) in (None, expected[-2:]), cut
        if cut % 21 == 0 or cut == len(last) - 1:
            t = Transcript(path)
            t.append([user("next")])
            repaired = path.read_bytes()
            assert repaired.startswith(before) and b"\0" not in repaired[len(before) :]
            assert Transcript(path).load() == [*expected, user("next")]
