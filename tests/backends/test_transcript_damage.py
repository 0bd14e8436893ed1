"""Damage that must be reported, never repaired (issue 22 item 2): two records fused by a lost
newline are committed data, so the transcript names the file and line and changes nothing."""

from __future__ import annotations

import pytest

from tests.backends.support import user
from tether.backends.local.transcript import Transcript
from tether.errors import TranscriptCorrupt


def _four(tmp_path):
    path = tmp_path / "messages.jsonl"
    Transcript(path).append([user("u1"), user("u2"), user("u3"), user("u4")])
    return path


def _join(raw: bytes, line: int) -> bytes:
    """`raw` with the newline at the end of 1-based `line` removed."""
    lines = raw.split(b"\n")
    lines[line - 1 : line + 1] = [lines[line - 1] + lines[line]]
    return b"\n".join(lines)


@pytest.mark.parametrize("torn_tail", [b"", b'{"type":"message","id":"ab', b"\x00\x00"])
def test_joining_the_last_two_records_is_reported_with_file_and_line(tmp_path, torn_tail) -> None:
    path = _four(tmp_path)
    damaged = _join(path.read_bytes(), 4) + torn_tail  # u3 and u4 on line 4
    path.write_bytes(damaged)
    for action in (lambda t: t.load(), lambda t: t.append([user("u5")]), lambda t: t.entries()):
        with pytest.raises(TranscriptCorrupt) as exc:
            action(Transcript(path))
        assert exc.value.line == 4 and str(path) in str(exc.value)
        assert "two JSON documents on one line" in str(exc.value)
        assert path.read_bytes() == damaged  # nothing truncated, nothing appended


def test_a_record_fused_into_the_torn_tail_is_damage_not_a_tail(tmp_path) -> None:
    path = _four(tmp_path)
    raw = path.read_bytes()
    damaged = raw[:-1] + b'{"type":"message","id":"12'  # u4 lost its LF, then a torn write
    path.write_bytes(damaged)
    with pytest.raises(TranscriptCorrupt) as exc:
        Transcript(path).append([user("u5")])
    assert exc.value.line == 5 and "two JSON documents" in str(exc.value)
    assert path.read_bytes() == damaged


def test_a_torn_prefix_holding_whole_content_parts_is_still_just_torn(tmp_path) -> None:
    path = _four(tmp_path)
    raw = path.read_bytes()
    last = raw[raw.rstrip(b"\n").rfind(b"\n") + 1 :]
    cut = last.index(b'"content":[') + len(b'"content":[{"type":"text","text":"u4"}')
    path.write_bytes(raw[: len(raw) - len(last)] + last[:cut])  # cut after a whole text part
    t = Transcript(path)
    assert [m.id for m in t.load()] == ["u1", "u2", "u3"]
    t.append([user("u5")])
    assert [m.id for m in Transcript(path).load()] == ["u1", "u2", "u3", "u5"]


def test_a_fused_middle_line_names_its_line(tmp_path) -> None:
    path = _four(tmp_path)
    path.write_bytes(_join(path.read_bytes(), 2))  # u1 and u2
    with pytest.raises(TranscriptCorrupt) as exc:
        Transcript(path).load()
    assert exc.value.line == 2 and "two JSON documents" in str(exc.value)
