"""Transcript format, active view, crash repair and corruption reporting (reference §4.3)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.backends.support import assistant, messages, result, user, write_big_transcript
from tether.backends.local.transcript import Transcript
from tether.errors import TranscriptCorrupt
from tether.protocol.messages import Message, TextPart, UserMessage, message_to_dict


def _lines(path: Path) -> list[dict]:
    return [orjson.loads(line) for line in path.read_bytes().splitlines()]


def _expected_view(batches: list[list[Message]]) -> list[Message]:
    # The model of "latest wins, in place": an insertion-ordered dict keyed by message id.
    view: dict[str, Message] = {}
    for batch in batches:
        for m in batch:
            view[m.id] = m
    return list(view.values())


@settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(
    st.lists(
        st.lists(messages(st.sampled_from(["m1", "m2", "m3", "m4", "m5", "m6"])), max_size=4),
        max_size=4,
    )
)
def test_round_trip_of_every_message_kind(batches: list[list[Message]]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "messages.jsonl"
        writer = Transcript(path)
        writer.ensure_created("/cwd")
        for batch in batches:
            writer.append(batch)
        want = _expected_view(batches)
        assert writer.load() == want
        assert Transcript(path).load() == want
        # Every line is LF-terminated and parentIds chain entry to entry.
        raw = path.read_bytes()
        assert raw.endswith(b"\n")
        entries = _lines(path)[1:]
        assert [e["parentId"] for e in entries] == [None, *(e["id"] for e in entries)][
            : len(entries)
        ]


def test_file_format_matches_the_reference(tmp_path: Path) -> None:
    path = tmp_path / "messages.jsonl"
    t = Transcript(path)
    t.ensure_created("/project")
    t.append([user("u1")])
    header, entry = _lines(path)
    assert header["type"] == "session" and header["version"] == 3
    assert header["cwd"] == "/project" and isinstance(header["id"], str)
    assert header["timestamp"].endswith("Z")
    assert set(entry) == {"type", "id", "parentId", "timestamp", "message"}
    assert entry["type"] == "message" and entry["parentId"] is None
    assert len(entry["id"]) == 8 and int(entry["id"], 16) >= 0
    assert entry["message"] == message_to_dict(user("u1"))


def test_append_without_header_creates_it(tmp_path: Path) -> None:
    t = Transcript(tmp_path / "messages.jsonl")
    assert t.load() == []
    t.append([user("u1")])
    assert _lines(t.path)[0]["type"] == "session"
    assert Transcript(t.path).load() == [user("u1")]


def test_latest_snapshot_wins_in_place_and_unchanged_is_skipped(tmp_path: Path) -> None:
    t = Transcript(tmp_path / "messages.jsonl")
    t.append([user("u1"), assistant("a1", text="draft", stop=None), user("u2")])
    t.append([assistant("a1", text="final")])
    t.append([user("u1")])  # unchanged re-persist: no entry
    assert len(_lines(t.path)) == 1 + 4
    want = [user("u1"), assistant("a1", text="final"), user("u2")]
    assert t.load() == want
    assert Transcript(t.path).load() == want


def test_nothing_to_write_writes_nothing(tmp_path: Path) -> None:
    t = Transcript(tmp_path / "messages.jsonl")
    t.append([user("u1")])
    before = t.path.read_bytes()
    t.append([])
    t.append([user("u1")])
    assert t.path.read_bytes() == before


def test_torn_last_line_is_dropped_then_repaired_before_next_append(tmp_path: Path) -> None:
    path = tmp_path / "messages.jsonl"
    t = Transcript(path)
    t.append([user("u1"), user("u2"), user("u3")])
    full = path.read_bytes()
    good = full[: full.rstrip(b"\n").rfind(b"\n") + 1]  # everything before the u3 line
    os.truncate(path, len(full) - 10)  # crash mid-line

    reader = Transcript(path)
    assert reader.load() == [user("u1"), user("u2")]
    assert len(path.read_bytes()) == len(full) - 10  # loading alone never writes

    reader.append([user("u4")])
    raw = path.read_bytes()
    assert raw.startswith(good)
    assert raw.count(b"\n") == good.count(b"\n") + 1 and raw.endswith(b"\n")
    assert orjson.loads(raw[len(good) :])["message"]["id"] == "u4"
    assert Transcript(path).load() == [user("u1"), user("u2"), user("u4")]


def test_unparsable_final_line_with_lf_is_torn_too(tmp_path: Path) -> None:
    path = tmp_path / "messages.jsonl"
    t = Transcript(path)
    t.append([user("u1")])
    good = path.read_bytes()
    with open(path, "ab") as f:
        f.write(b"\x00\x00\x00garbage\n")
    reader = Transcript(path)
    assert reader.load() == [user("u1")]
    reader.append([user("u2")])
    assert path.read_bytes().startswith(good)
    assert Transcript(path).load() == [user("u1"), user("u2")]


def test_torn_header_only_file_is_corrupt_at_line_1(tmp_path: Path) -> None:
    path = tmp_path / "messages.jsonl"
    path.write_bytes(b'{"type":"sess')
    with pytest.raises(TranscriptCorrupt) as exc:
        Transcript(path).load()
    assert exc.value.line == 1


@pytest.mark.parametrize(
    ("damage", "why"),
    [
        (b'{"type":"message","id":"deadbeef"', "not JSON"),
        (b'{"type":"message","id":"deadbeef","message":{"role":"bogus","id":"x"}}', "bogus"),
        (b'{"type":"model_change","id":"deadbeef"}', "unknown entry type"),
        (b'["not", "an", "object"]', "not a JSON object"),
        (b"", "not JSON"),
    ],
)
def test_damaged_middle_line_names_its_line(tmp_path: Path, damage: bytes, why: str) -> None:
    path = tmp_path / "messages.jsonl"
    t = Transcript(path)
    t.append([user("u1"), user("u2"), user("u3"), user("u4")])
    lines = path.read_bytes().split(b"\n")
    lines[2] = damage  # line 3: the u2 entry
    path.write_bytes(b"\n".join(lines))
    with pytest.raises(TranscriptCorrupt) as exc:
        Transcript(path).load()
    assert exc.value.line == 3
    assert str(path) in str(exc.value) and why in str(exc.value)
    # A writer refuses too, instead of appending past the damage.
    with pytest.raises(TranscriptCorrupt):
        Transcript(path).append([user("u5")])


def test_damage_before_a_torn_tail_is_still_reported(tmp_path: Path) -> None:
    path = tmp_path / "messages.jsonl"
    Transcript(path).append([user("u1"), user("u2")])
    lines = path.read_bytes().split(b"\n")
    lines[1] = b"{broken"
    path.write_bytes(b"\n".join(lines) + b'{"type":"mess')
    with pytest.raises(TranscriptCorrupt) as exc:
        Transcript(path).load()
    assert exc.value.line == 2


@pytest.mark.parametrize("first", [b'{"type":"message","id":"x"}\n', b"not json\n", b""])
def test_missing_header_is_corrupt_at_line_1(tmp_path: Path, first: bytes) -> None:
    path = tmp_path / "messages.jsonl"
    path.write_bytes(first)
    with pytest.raises(TranscriptCorrupt) as exc:
        Transcript(path).load()
    assert exc.value.line == 1


def test_rollback_entry_is_honoured_after_reload(tmp_path: Path) -> None:
    path = tmp_path / "messages.jsonl"
    t = Transcript(path)
    t.append([user("u1"), assistant("a1", ("c1", "Bash"), stop=None)])
    t.rollback("a1")
    t.rollback("never-there")  # no-op, nothing written
    last = _lines(path)[-1]
    assert last["type"] == "rollback" and last["messageId"] == "a1"
    assert last["parentId"] == _lines(path)[-2]["id"]
    assert len(_lines(path)) == 4
    assert t.load() == [user("u1")]
    assert Transcript(path).load() == [user("u1")]
    # The same id persisted again joins the end of the view.
    t.append([assistant("a1", text="retry")])
    assert Transcript(path).load() == [user("u1"), assistant("a1", text="retry")]


def test_compaction_keeps_summary_plus_tail(tmp_path: Path) -> None:
    path = tmp_path / "messages.jsonl"
    t = Transcript(path)
    history: list[Message] = [user("u1"), assistant("a1"), user("u2"), assistant("a2")]
    t.append(history)
    summary = UserMessage("s1", (TextPart('{"type":"system_alert"}'),), 5)
    eid = t.append_compaction(
        summary, summary="we talked", first_kept_message_id="u2", tokens_before=1234
    )
    entry = _lines(path)[-1]
    assert entry["type"] == "compaction" and entry["id"] == eid
    assert entry["summary"] == "we talked" and entry["tokensBefore"] == 1234
    assert entry["message"] == message_to_dict(summary)
    assert entry["firstKeptEntryId"] == _lines(path)[3]["id"]  # the u2 entry
    want = [summary, user("u2"), assistant("a2")]
    assert t.load() == want
    assert Transcript(path).load() == want

    t.append([user("u3")])
    summary2 = UserMessage("s2", (TextPart("again"),), 6)
    t.append_compaction(
        summary2, summary="x", first_kept_message_id=None, tokens_before=9, details={"a": 1}
    )
    assert _lines(path)[-1]["details"] == {"a": 1}
    assert Transcript(path).load() == [summary2]
    with pytest.raises(ValueError):
        t.append_compaction(summary, summary="", first_kept_message_id="u1", tokens_before=0)


def test_compaction_naming_an_unknown_entry_is_corrupt(tmp_path: Path) -> None:
    path = tmp_path / "messages.jsonl"
    Transcript(path).append([user("u1")])
    bad = {
        "type": "compaction",
        "id": "0badc0de",
        "parentId": None,
        "timestamp": "2026-01-01T00:00:00.000Z",
        "summary": "s",
        "firstKeptEntryId": "ffffffff",
        "tokensBefore": 1,
        "message": message_to_dict(user("s")),
    }
    with open(path, "ab") as f:
        f.write(orjson.dumps(bad) + b"\n")
    with pytest.raises(TranscriptCorrupt) as exc:
        Transcript(path).load()
    assert exc.value.line == 3


def test_another_writer_is_noticed_before_appending(tmp_path: Path) -> None:
    path = tmp_path / "messages.jsonl"
    mine, theirs = Transcript(path), Transcript(path)
    mine.append([user("u1")])
    theirs.append([user("u2")])
    mine.append([user("u3")])
    entries = _lines(path)[1:]
    assert [e["parentId"] for e in entries] == [None, entries[0]["id"], entries[1]["id"]]
    assert mine.load() == [user("u1"), user("u2"), user("u3")]
    assert theirs.load() == [user("u1"), user("u2"), user("u3")]


def test_entries_returns_raw_entries(tmp_path: Path) -> None:
    t = Transcript(tmp_path / "messages.jsonl")
    t.append([user("u1"), result("r1", "c1")])
    t.rollback("r1")
    assert [e["type"] for e in t.entries()] == ["message", "message", "rollback"]
    header = t.header()
    assert header is not None and header["type"] == "session"


def test_loading_100k_entries(tmp_path: Path) -> None:
    path = tmp_path / "messages.jsonl"
    write_big_transcript(path, 100_000)
    view = Transcript(path).load()
    assert len(view) == 100_000
    # How long it takes is bench/transcript.py's job, never a unit test's.
