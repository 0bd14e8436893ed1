"""Damage that must be reported, never repaired (issue 22 item 2): two records fused by a lost
newline are committed data, so the transcript names the file and line and changes nothing."""

from __future__ import annotations

import json
from pathlib import Path

import orjson
import pytest

from tests.backends.support import user
from tests.e2e.support import run_tether, tether_env
from tether.backends.local.transcript import Transcript
from tether.errors import TranscriptCorrupt
from tether.testing.fake_provider import FakeProvider


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


# --- NUL padding (issue 29 item 5): a file system that crashed after growing the file but before
# writing its blocks leaves them zero-filled. A torn tail padded so is still a torn tail.

def _lf_to_nul(raw: bytes) -> bytes:
    return raw[:-1] + b"\0"  # the final newline became a NUL: the record never got its LF


NUL_TAILS = {
    "final newline replaced by a NUL": (_lf_to_nul, ["u1", "u2", "u3"]),
    "final newline and a block of NULs": (lambda raw: raw[:-1] + b"\0" * 4096, ["u1", "u2", "u3"]),
    "NULs after a complete final line": (lambda raw: raw + b"\0" * 37, ["u1", "u2", "u3", "u4"]),
    "a partial final record then NULs": (
        lambda raw: raw + b'{"type":"message","id":"ab12' + b"\0" * 300, ["u1", "u2", "u3", "u4"]
    ),
    "the final record zero-filled from its middle": (
        lambda raw: raw[: raw.rstrip(b"\n").rfind(b"\n") + 40] + b"\0" * 200, ["u1", "u2", "u3"]
    ),
    "NULs only after the header": (None, []),
}


@pytest.mark.parametrize("case", list(NUL_TAILS))
def test_a_nul_padded_tail_is_repaired_like_any_torn_tail(tmp_path, case) -> None:
    damage, kept = NUL_TAILS[case]
    path = tmp_path / "messages.jsonl"
    if damage is None:
        Transcript(path).ensure_created()
        path.write_bytes(path.read_bytes() + b"\0" * 512)
    else:
        path = _four(tmp_path)
        path.write_bytes(damage(path.read_bytes()))
    assert [m.id for m in Transcript(path).load()] == kept
    assert [m.id for m in Transcript(path).tail(2)] == kept[-2:]
    t = Transcript(path)
    t.append([user("u5")])  # the repair: the padding is cut before the append
    repaired = path.read_bytes()
    assert b"\0" not in repaired and repaired.endswith(b"\n")
    assert [m.id for m in Transcript(path).load()] == [*kept, "u5"]
    assert len(Transcript(path).entries()) == len(kept) + 1


def test_nul_bytes_inside_a_committed_line_are_damage_naming_the_line(tmp_path) -> None:
    path = _four(tmp_path)
    lines = path.read_bytes().split(b"\n")
    lines[2] = lines[2][:30] + b"\0" * 64 + lines[2][94:]  # u2's line, a zeroed block inside
    damaged = b"\n".join(lines)
    path.write_bytes(damaged)
    for action in (lambda t: t.load(), lambda t: t.append([user("u5")]), lambda t: t.entries()):
        with pytest.raises(TranscriptCorrupt) as exc:
            action(Transcript(path))
        assert exc.value.line == 3 and "64 NUL bytes at column 31" in str(exc.value)
        assert path.read_bytes() == damaged


def test_nuls_inside_the_last_committed_line_are_damage_not_a_torn_tail(tmp_path) -> None:
    """Its newline made it to disk, so the whole record before the NULs was committed."""
    path = _four(tmp_path)
    damaged = path.read_bytes()[:-1] + b"\0" * 8 + b"\n"
    path.write_bytes(damaged)
    for action in (lambda t: t.load(), lambda t: t.append([user("u5")]), lambda t: t.tail(1)):
        with pytest.raises(TranscriptCorrupt) as exc:
            action(Transcript(path))
        assert exc.value.line == 5 and "8 NUL bytes at column" in str(exc.value)
        assert path.read_bytes() == damaged


def test_a_zero_filled_block_before_a_whole_record_is_damage_not_a_fused_line(tmp_path) -> None:
    path = _four(tmp_path)
    raw = path.read_bytes()
    last = raw.rstrip(b"\n").rfind(b"\n") + 1
    damaged = raw[:last] + b"\0" * 16 + raw[last:]  # zeros, then u4's whole committed line
    path.write_bytes(damaged)
    with pytest.raises(TranscriptCorrupt) as exc:
        Transcript(path).append([user("u5")])
    assert exc.value.line == 5 and "16 NUL bytes at column 1" in str(exc.value)
    assert path.read_bytes() == damaged


# --- records written twice (issue 30 item 9)

def _lines(path) -> list[bytes]:
    return path.read_bytes().split(b"\n")[:-1]


@pytest.mark.parametrize(("copy", "at"), [(3, 5), (3, 4), (2, 6)])
def test_a_record_written_twice_is_damage_naming_the_line_and_the_id(tmp_path, copy, at) -> None:
    path = _four(tmp_path)
    lines = _lines(path)
    eid = orjson.loads(lines[copy - 1])["id"]
    lines.insert(at - 1, lines[copy - 1])  # line `copy` again, as line `at`
    damaged = b"\n".join(lines) + b"\n"
    path.write_bytes(damaged)
    actions = (lambda t: t.load(), lambda t: t.append([user("u5")]), lambda t: t.entries(),
               lambda t: t.tail(1))
    for action in actions:
        with pytest.raises(TranscriptCorrupt) as exc:
            action(Transcript(path))
        assert exc.value.line == at, str(exc.value)
        assert repr(eid) in str(exc.value) and f"on line {copy}" in str(exc.value)
        assert "recorded twice" in str(exc.value)
        assert path.read_bytes() == damaged


def test_a_rollback_or_compaction_written_twice_is_damage(tmp_path) -> None:
    path = tmp_path / "messages.jsonl"
    t = Transcript(path)
    t.append([user("u1"), user("u2"), user("u3")])
    t.rollback("u3")
    t.append_compaction(user("s"), summary="s", first_kept_message_id="u2", tokens_before=9)
    for copy in (5, 6):  # the rollback, the compaction
        lines = _lines(path)
        lines.append(lines[copy - 1])
        damaged = tmp_path / f"copy{copy}.jsonl"
        damaged.write_bytes(b"\n".join(lines) + b"\n")
        with pytest.raises(TranscriptCorrupt) as exc:
            Transcript(damaged).load()
        assert exc.value.line == 7 and f"on line {copy}" in str(exc.value)


def test_a_record_written_twice_after_a_compaction_is_seen_by_a_resumed_reader(tmp_path) -> None:
    path = tmp_path / "messages.jsonl"
    t = Transcript(path)
    t.append([user("u1"), user("u2")])
    t.append_compaction(user("s"), summary="s", first_kept_message_id="u2", tokens_before=9)
    t.append([user("u3"), user("u4")])
    lines = _lines(path)
    with open(path, "ab") as fh:
        fh.write(lines[-2] + b"\n")  # u3's record again, after the compaction
    with pytest.raises(TranscriptCorrupt) as exc:
        Transcript(path).load()  # seeded by the resume index: reads from the compaction on
    assert exc.value.line == len(lines) + 1 and f"on line {len(lines) - 1}" in str(exc.value)


def test_snapshots_replaced_in_place_are_no_duplicates(tmp_path) -> None:
    path = tmp_path / "messages.jsonl"
    t = Transcript(path)
    t.append([user("u1", "a")])
    t.append([user("u2")])
    t.append([user("u1", "b")])  # the same message id, a new snapshot: a new entry id
    t.append([user("u1", "c")])
    assert len(Transcript(path).entries()) == 4
    for view in (Transcript(path).load(), Transcript(path).tail(2)):
        assert [(m.id, m.content[0].text) for m in view] == [("u1", "c"), ("u2", "hello")]


def test_colliding_ids_with_different_parents_are_two_records(tmp_path) -> None:
    """8 random hex digits can collide, and a writer resumed from the resume index cannot see
    the older ids: a repeated id under a different parentId is no duplicate."""
    path = _four(tmp_path)
    lines = _lines(path)
    first = orjson.loads(lines[1])
    last = orjson.loads(lines[-1])
    again = {**last, "id": first["id"], "parentId": last["id"],
             "message": {**last["message"], "id": "u5"}}
    path.write_bytes(path.read_bytes() + orjson.dumps(again) + b"\n")
    assert [m.id for m in Transcript(path).load()] == ["u1", "u2", "u3", "u4", "u5"]



# --- the real command

MODEL = "anthropic/claude-test"


def _conversation_on_disk(tmp_path: Path, fake: FakeProvider) -> tuple[dict[str, str], str, Path]:
    home, workdir = tmp_path / "home", tmp_path / "project"
    workdir.mkdir()
    env = tether_env(fake.url, MODEL, {"TETHER_HOME": str(home)})
    run = run_tether(["-p", "first", "--model", MODEL, "--output-format", "json"], env=env, cwd=workdir)
    assert run.code == 0, run.stderr
    [path] = home.glob("conversations/*/messages.jsonl")
    return env, json.loads(run.stdout)["conversation_id"], path


@pytest.mark.parametrize("padding", [b"\0", b"\0" * 4096])
def test_tether_resumes_a_conversation_whose_final_newline_a_crash_zeroed(
    tmp_path: Path, padding: bytes
) -> None:
    with FakeProvider([{"text": "one"}, {"text": "two"}]) as fake:
        env, conv, path = _conversation_on_disk(tmp_path, fake)
        path.write_bytes(path.read_bytes()[:-1] + padding)  # the reply lost its LF to NULs
        run = run_tether(["-p", "second", "--conversation", conv], env=env, cwd=tmp_path / "project")
    assert (run.code, run.stdout) == (0, "two\n"), run.stderr
    raw = path.read_bytes()
    assert b"\0" not in raw and raw.endswith(b"\n")
    texts = [m.content[0].text for m in Transcript(path).load()]
    assert texts == ["first", "second", "two"]  # the torn reply left out, nothing fused


def test_tether_refuses_a_conversation_with_a_record_written_twice(tmp_path: Path) -> None:
    with FakeProvider([{"text": "one"}, {"text": "never"}]) as fake:
        env, conv, path = _conversation_on_disk(tmp_path, fake)
        lines = path.read_bytes().split(b"\n")[:-1]
        eid = orjson.loads(lines[1])["id"]
        lines.append(lines[1])  # the first record again, at the end
        damaged = b"\n".join(lines) + b"\n"
        path.write_bytes(damaged)
        run = run_tether(["-p", "second", "--conversation", conv], env=env, cwd=tmp_path / "project")
        assert len(fake.requests) == 1  # the model was never asked
    assert run.code == 1 and "Traceback" not in run.stderr, run.stderr
    assert f"{path}:{len(lines)}:" in run.stderr and repr(eid) in run.stderr, run.stderr
    assert "recorded twice, on line 2" in run.stderr
    assert path.read_bytes() == damaged
