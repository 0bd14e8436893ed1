"""Reading the last messages back from the end of a transcript (issue 20 item 3): for transcripts
built by the real writer (replaced snapshots, rollbacks, compactions, a second writer, resumed
writers), the tail reader gives exactly what the full read gives, and it never reads the history
it does not need; whenever it cannot prove its answer it says so and the full read decides."""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import threading
from pathlib import Path

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.backends.support import assistant, user
from tests.e2e.support import run_tether
from tether.backends.local.replacements import log_path
from tether.backends.local.store import LocalStore
from tether.backends.local.tail import read_tail
from tether.backends.local.transcript import Transcript
from tether.errors import TranscriptCorrupt
from tether.protocol.messages import Message, message_to_dict

POOL = [f"m{i}" for i in range(8)]


def full_read(path: Path) -> list[Message]:
    """The view by a fresh full read of a copy without any sidecar (no resume index, no log)."""
    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp) / "messages.jsonl"
        shutil.copyfile(path, copy)
        return Transcript(copy).load()


def assert_tail_is_the_full_view(path: Path) -> None:
    view = full_read(path)
    for n in range(1, len(view) + 3):
        got = read_tail(path, n)
        assert got is not None, f"the tail reader could not prove the last {n}"
        assert got == view[-n:], n


# One step of a conversation's life, as the runtime's writers produce them.
ops = st.one_of(
    st.tuples(
        st.just("append"),
        st.lists(st.tuples(st.sampled_from(POOL), st.integers(0, 3)), min_size=1, max_size=5),
    ),
    st.tuples(st.just("rollback"), st.integers(0, 50)),
    st.tuples(st.just("compact"), st.one_of(st.none(), st.integers(0, 50))),
    st.tuples(st.just("edit-summary")),  # a new snapshot of the latest summary, in place
    st.tuples(st.just("other-writer")),  # another process appends through its own reader
    st.tuples(st.just("resume")),  # a new process: a fresh reader (seeded by the resume index)
)


@settings(
    max_examples=120,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(st.lists(ops, min_size=1, max_size=14))
def test_the_tail_is_the_full_view_for_any_history(steps: list[tuple]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "messages.jsonl"
        writers = [Transcript(path), Transcript(path)]
        writers[0].ensure_created("/cwd")
        w, summaries = 0, 0
        for op in steps:
            t = writers[w]
            if op[0] == "append":
                t.append([user(mid, f"text {v}") for mid, v in op[1]])
            elif op[0] == "rollback":
                view = t.load()
                if view:
                    t.rollback(view[op[1] % len(view)].id)
            elif op[0] == "compact":
                view = t.load()
                kept = view[op[1] % len(view)].id if view and op[1] is not None else None
                summaries += 1
                t.append_compaction(
                    assistant(f"summary{summaries}", text="s"),
                    summary="s",
                    first_kept_message_id=kept,
                    tokens_before=100,
                )
            elif op[0] == "edit-summary":
                t.append([assistant(f"summary{summaries}", text="edited")] if summaries else [])
            elif op[0] == "other-writer":
                w = 1 - w
            else:
                writers[w] = Transcript(path)
        assert_tail_is_the_full_view(path)
        assert Transcript(path).tail(3) == full_read(path)[-3:]


def long_conversation(path: Path, n: int) -> Transcript:
    """`n` messages in steps of three, each assistant snapshot re-persisted once finished (the
    backend's in-flight write), and a rollback now and then: never compacted."""
    t = Transcript(path)
    for i in range(0, n, 3):
        t.append([user(f"u{i}")])
        t.append([assistant(f"a{i}", stop=None)])
        t.append([assistant(f"a{i}", ("c", "Bash"), stop="toolUse"), user(f"r{i}", "result")])
        if i % 30 == 0:
            t.rollback(f"r{i}")
    return t


def test_the_tail_of_a_long_uncompacted_conversation_skips_the_history(tmp_path: Path) -> None:
    path = tmp_path / "messages.jsonl"
    long_conversation(path, 600)
    view = full_read(path)
    assert read_tail(path, 20) == view[-20:]
    # Damage early in the history is not read (the full read still reports it).
    raw = bytearray(path.read_bytes())
    at = raw.index(b'"u30"')
    raw[at : at + 5] = b"!!!!!"
    path.write_bytes(bytes(raw))
    assert read_tail(path, 20) == view[-20:]
    with pytest.raises(TranscriptCorrupt):
        full_read(path)


def test_a_compacted_conversation_reads_back_to_the_compaction_then_the_index(
    tmp_path: Path,
) -> None:
    path = tmp_path / "messages.jsonl"
    t = long_conversation(path, 90)
    keep = t.load()[-4].id
    t.append_compaction(
        user("sum", "summary"), summary="s", first_kept_message_id=keep, tokens_before=9
    )
    t.append([assistant(keep, text="kept, then replaced"), user("after")])
    t.rollback(t.load()[-3].id)
    assert_tail_is_the_full_view(path)
    # Without the resume index the walk cannot cross the compaction: it says so.
    os.unlink(path.with_name("messages.jsonl.resume"))
    assert read_tail(path, 1) == full_read(path)[-1:]
    assert read_tail(path, 2) is None
    assert Transcript(path).tail(50) == full_read(path)[-50:]


def _entry(eid: str, mid: str) -> bytes:
    return orjson.dumps(
        {
            "type": "message",
            "id": eid,
            "parentId": None,
            "timestamp": "t",
            "message": message_to_dict(user(mid)),
        }
    )


@pytest.mark.parametrize("end", ["torn-write", "garbage-line", "torn-whole-entry"])
def test_a_torn_last_line_is_left_out_as_the_full_read_does(tmp_path: Path, end: str) -> None:
    path = tmp_path / "messages.jsonl"
    long_conversation(path, 30)
    tail = {
        "torn-write": _entry("feedbeef", "late")[:40],
        "garbage-line": b"{not json\n",
        "torn-whole-entry": _entry("feedbeef", "late"),
    }[end]
    with open(path, "ab") as fh:
        fh.write(tail)
    assert_tail_is_the_full_view(path)
    # The next append cuts the torn bytes off and logs itself: the tail still reads back.
    Transcript(path).append([user("next")])
    assert_tail_is_the_full_view(path)


@pytest.mark.parametrize("damage", ["fused-at-end", "garbage-then-torn", "bad-message"])
def test_damage_at_the_end_is_reported_with_its_line_as_the_full_read_does(
    tmp_path: Path, damage: str
) -> None:
    path = tmp_path / "messages.jsonl"
    long_conversation(path, 30)
    with open(path, "ab") as fh:
        fh.write(
            {
                "fused-at-end": _entry("aaaaaaaa", "x") + _entry("bbbbbbbb", "y"),
                "garbage-then-torn": b"{not json\n" + _entry("cccccccc", "z")[:30],
                "bad-message": b'{"type":"message","id":"dddddddd","message":{"role":"x"}}\n',
            }[damage]
        )
    assert read_tail(path, 5) is None
    with pytest.raises(TranscriptCorrupt) as full:
        Transcript(path).load()
    with pytest.raises(TranscriptCorrupt) as tail:
        Transcript(path).tail(5)
    assert (tail.value.line, str(tail.value)) == (full.value.line, str(full.value))


@pytest.mark.parametrize(
    "stale",
    ["foreign-append", "no-log", "torn-log", "log-of-another-file", "gap-in-log", "wrong-last-id"],
)
def test_a_log_that_does_not_match_the_file_means_a_full_read(tmp_path: Path, stale: str) -> None:
    path = tmp_path / "messages.jsonl"
    long_conversation(path, 60)
    log = log_path(path)
    lines = log.read_bytes().splitlines(keepends=True)
    if stale == "foreign-append":  # a writer that does not keep the log (an older tether)
        with open(path, "ab") as fh:
            fh.write(_entry("0badf00d", "u3") + b"\n")  # replaces u3 in place: the log cannot know
    elif stale == "no-log":
        log.unlink()
    elif stale == "torn-log":
        log.write_bytes(b"".join(lines) + b"[1,2")
    elif stale == "log-of-another-file":
        doc = json.loads(lines[0])
        doc["inode"] += 1
        log.write_bytes(json.dumps(doc).encode() + b"\n" + b"".join(lines[1:]))
    elif stale == "gap-in-log":
        log.write_bytes(b"".join(lines[:-3] + lines[-2:]))
    else:
        row = json.loads(lines[-1])
        row[2] = "00000000"
        log.write_bytes(b"".join(lines[:-1]) + json.dumps(row).encode() + b"\n")
    view = full_read(path)
    assert read_tail(path, len(view)) is None
    assert Transcript(path).tail(len(view)) == view
    if stale != "gap-in-log":  # a gap only tampering makes: the log's end still matches
        # The next writer finds the log does not end where it starts and rewrites it whole.
        Transcript(path).append([user("u3", "fresh"), user("new")])
        assert_tail_is_the_full_view(path)


def test_a_reader_that_already_holds_the_view_answers_from_it(tmp_path: Path) -> None:
    path = tmp_path / "messages.jsonl"
    t = long_conversation(path, 30)
    log_path(path).unlink()
    assert t.tail(4) == full_read(path)[-4:]
    assert t.tail(1000) == full_read(path)
    with pytest.raises(ValueError, match="at least 1"):
        t.tail(0)


def test_messages_list_limit_prints_the_same_records_from_the_end(
    tether_home: Path, tmp_path: Path
) -> None:
    store = LocalStore(tether_home)
    agent = store.create_agent(model="anthropic/claude-test", system="")
    conv = store.create_conversation(agent.id)
    long_conversation(store.transcript(agent.id, conv.id).path, 120)
    store.transcript(agent.id, conv.id).append_compaction(
        user("sum", "summary"), summary="s", first_kept_message_id="a90", tokens_before=9
    )
    store.transcript(agent.id, conv.id).append([user("u90", "edited after the compaction")])
    view = full_read(store.transcript(agent.id, conv.id).path)
    env = dict(os.environ)
    for limit in (1, 7, len(view), 500):
        out = run_tether(
            ["messages", "list", "--conversation", conv.id, "--limit", str(limit)],
            env=env,
            cwd=tmp_path,
        )
        assert out.code == 0, out.stderr
        assert json.loads(out.stdout) == [message_to_dict(m) for m in view[-limit:]]
    bad = run_tether(
        ["messages", "list", "--conversation", conv.id, "--limit", "0"], env=env, cwd=tmp_path
    )
    assert bad.code == 1 and "--limit must be at least 1, got 0" in bad.stderr


def test_last_compaction_id_follows_other_writers(tmp_path: Path) -> None:
    path = tmp_path / "messages.jsonl"
    cached = long_conversation(path, 9)
    assert cached.last_compaction_id() is None
    other = Transcript(path)
    first = other.append_compaction(user("s1"), summary="s", first_kept_message_id="u6",
                                    tokens_before=9)
    assert cached.last_compaction_id() == first  # read from what was appended since
    other.append([user("later")])
    second = other.append_compaction(user("s2"), summary="s", first_kept_message_id="later",
                                     tokens_before=9)
    assert cached.last_compaction_id() == second == Transcript(path).last_compaction_id()


def test_a_transcript_shared_by_threads_never_shows_a_half_applied_append(tmp_path: Path) -> None:
    """The backend appends in a worker thread while the loop's thread may read the same cached
    Transcript (reflection, a mod): every read sees whole appends (five messages each)."""
    t = Transcript(tmp_path / "messages.jsonl")
    t.ensure_created("/")
    failures: list[BaseException] = []

    def write() -> None:
        try:
            for i in range(300):
                t.append([user(f"m{i}-{k}") for k in range(5)])
        except BaseException as exc:  # noqa: BLE001 - reported below
            failures.append(exc)

    seen: set[int] = set()
    interval = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as the interpreter can
    try:
        writer = threading.Thread(target=write)
        writer.start()
        while writer.is_alive():
            seen.add(len(t.load()))
            t.tail(3)
        writer.join()
    finally:
        sys.setswitchinterval(interval)
    assert not failures, failures
    assert all(n % 5 == 0 for n in seen), sorted(n for n in seen if n % 5)
    assert len(t.load()) == 1500 and len(seen) > 1
