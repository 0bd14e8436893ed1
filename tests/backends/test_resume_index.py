"""Resuming from the last compaction (issue 20 item 3): a fresh reader with a valid resume index
builds exactly the view a full read builds, without reading the history before the compaction;
anything that does not match the file falls back to the full read."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from tests.backends.support import assistant, user
from tether.backends.local.resume_index import index_path
from tether.backends.local.transcript import Transcript
from tether.errors import TranscriptCorrupt


def full_view(path: Path) -> list:
    """The view by a full read (no index), without touching the index."""
    index = index_path(path)
    saved = index.read_bytes() if index.exists() else None
    if saved is not None:
        index.unlink()
    try:
        return Transcript(path).load()
    finally:
        if saved is not None:
            index.write_bytes(saved)


def compacted(tmp_path: Path, before: int = 50, kept: int = 3, after: int = 4) -> Path:
    path = tmp_path / "messages.jsonl"
    t = Transcript(path)
    t.append([user(f"u{i}") for i in range(before)])
    t.append_compaction(assistant("sum", text="summary"), summary="summary",
                        first_kept_message_id=f"u{before - kept}", tokens_before=1000)
    t.append([user(f"a{i}") for i in range(after)])
    return path


def test_the_resumed_view_is_the_full_view_and_skips_the_history(tmp_path: Path) -> None:
    path = compacted(tmp_path)
    assert index_path(path).exists()
    view = Transcript(path).load()
    assert [m.id for m in view] == ["sum", "u47", "u48", "u49", "a0", "a1", "a2", "a3"]
    assert view == full_view(path)
    # Damage in the history before the kept entries is not read: the resume does not see it
    # (a full read, or `entries()`, still reports it).
    raw = bytearray(path.read_bytes())
    at = raw.index(b'"u3"')
    raw[at : at + 4] = b"!!!!"
    path.write_bytes(bytes(raw))
    assert [m.id for m in Transcript(path).load()] == [m.id for m in view]
    with pytest.raises(TranscriptCorrupt):
        full_view(path)


def test_appending_after_a_resume_keeps_line_numbers_and_parents(tmp_path: Path) -> None:
    path = compacted(tmp_path)
    t = Transcript(path)
    t.load()
    t.append([user("z1")])
    entries = Transcript(path).entries()
    assert entries[-1]["parentId"] == entries[-2]["id"]
    assert [m.id for m in Transcript(path).load()][-1] == "z1"
    with open(path, "ab") as fh:
        fh.write(b"{broken}\n{}\n")  # damage after the compaction is found, with its line
    with pytest.raises(TranscriptCorrupt) as exc:
        Transcript(path).load()
    assert exc.value.line == len(path.read_bytes().splitlines()) - 1


@pytest.mark.parametrize("tamper", ["inode", "kept-moved", "compaction-id", "garbage", "truncated"])
def test_a_mismatching_index_falls_back_to_the_full_read(tmp_path: Path, tamper: str) -> None:
    path = compacted(tmp_path)
    expected = full_view(path)
    index = index_path(path)
    if tamper == "inode":
        data = path.read_bytes()
        path.unlink()
        path.write_bytes(data)  # same bytes, new file
    elif tamper == "kept-moved":  # an edit shifted the bytes under the index
        raw = path.read_bytes()
        path.write_bytes(raw.replace(b'"u0"', b'"u0" ', 1).replace(b"hello", b"hell", 1))
        expected = full_view(path)
    elif tamper == "compaction-id":
        index.write_bytes(index.read_bytes().replace(b'"compaction":["', b'"compaction":["x', 1))
    elif tamper == "garbage":
        index.write_bytes(b"\x00not json")
    else:
        index.write_bytes(index.read_bytes()[:20])
    assert Transcript(path).load() == expected


def test_an_index_is_written_for_a_transcript_that_had_none(tmp_path: Path) -> None:
    path = compacted(tmp_path)
    index_path(path).unlink()
    t = Transcript(path)
    t.load()
    assert not index_path(path).exists()  # loading alone writes nothing
    t.append([user("late")])
    assert index_path(path).exists()
    assert Transcript(path).load() == full_view(path)


def test_random_histories_resume_to_the_full_view(tmp_path: Path) -> None:
    """Appends, in-place updates, rollbacks and compactions in random order (seeded)."""
    for seed in range(40):
        rng = random.Random(seed)
        path = tmp_path / f"t{seed}.jsonl"
        writer = Transcript(path)
        n = 0
        for _ in range(rng.randint(5, 40)):
            view = writer.load()
            op = rng.random()
            if op < 0.5 or not view:
                writer.append([user(f"m{n + k}") for k in range(rng.randint(1, 4))])
                n += 4
            elif op < 0.7:  # a changed snapshot of a message in view: latest wins in place
                target = rng.choice(view)
                writer.append([user(target.id, text=f"v{rng.random()}")])
            elif op < 0.8:
                writer.rollback(rng.choice(view).id)
            else:
                keep = rng.choice([None, *[m.id for m in view]])
                writer.append_compaction(assistant(f"s{n}", text="sum"), summary="s",
                                         first_kept_message_id=keep, tokens_before=1)
                n += 1
            if rng.random() < 0.3:  # a fresh process, sometimes
                writer = Transcript(path)
        assert Transcript(path).load() == full_view(path), f"seed {seed}"


def test_a_summary_kept_by_the_next_compaction_resumes_from_the_index(tmp_path: Path) -> None:
    """The second compaction keeps the first one's summary, whose latest entry is a compaction
    entry, not a message entry: the index names it, and a resumed reader (then a reader resumed
    from that reader's appends) still starts there."""
    path = tmp_path / "messages.jsonl"
    t = Transcript(path)
    t.append([user(f"u{i}") for i in range(5)])
    t.append_compaction(assistant("s1", text="first"), summary="s", first_kept_message_id="u3",
                        tokens_before=9)
    t.append([user("v1")])
    t.append_compaction(assistant("s2", text="second"), summary="s", first_kept_message_id="s1",
                        tokens_before=9)
    resumed = Transcript(path)
    assert [m.id for m in resumed.load()] == ["s2", "s1", "u3", "u4", "v1"]
    resumed.append([user("w")])
    resumed.append_compaction(assistant("s3", text="third"), summary="s",
                              first_kept_message_id="s2", tokens_before=9)
    want = ["s3", "s2", "s1", "u3", "u4", "v1", "w"]
    assert [m.id for m in full_view(path)] == want
    # Seeded, not replayed: damage in the history before the kept entries goes unread.
    raw = bytearray(path.read_bytes())
    at = raw.index(b'"u1"')
    raw[at : at + 4] = b"!!!!"
    path.write_bytes(bytes(raw))
    assert [m.id for m in Transcript(path).load()] == want
    with pytest.raises(TranscriptCorrupt):
        full_view(path)
