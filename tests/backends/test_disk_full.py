"""A full disk under any store is named as one (issue 29 item 6): the transcript, the agent and
conversation records, the checkpoint database, the cron database and the channels journal all
raise `DiskFull` naming the file, the disk (its mount point) and the space left, and a real
`tether -p` whose TETHER_HOME is a full file system says so on stderr and exits 1.

The full disk is real: a small tmpfs (the tests run as root, as CI does), filled to the last
byte. Where no tmpfs can be mounted the tests fail rather than skip.
"""

from __future__ import annotations

import errno
import json
import os
import sqlite3
from pathlib import Path

import pytest

from tests.backends.support import user
from tests.e2e.support import run_tether, tether_env
from tests.e2e.test_faults import fill, tmpfs
from tether.backends.local.disk_full import disk_full
from tether.backends.local.store import LocalStore
from tether.backends.local.transcript import Transcript
from tether.channels.journal import Journal
from tether.channels.plugins import InboundMessage
from tether.errors import DiskFull
from tether.protocol.tool_calls import ToolCall
from tether.runtime.cron.store import CronStore
from tether.runtime.turns.checkpoints import CheckpointStore
from tether.runtime.turns.input_queue import SqliteInputQueue, StoredInput, StoredMessage, Workspace
from tether.testing.fake_provider import FakeProvider

MODEL = "anthropic/claude-test"


def assert_names_the_full_disk(message: str, path: Path | str, mount: Path) -> None:
    assert message.lower().startswith("the disk is full: "), message
    assert str(path) in message and f"free on {mount}" in message, message
    assert "free some space" in message, message


# --- each store, on a real full file system ------------------------------------------------


def test_a_transcript_append_on_a_full_disk_names_it_and_leaves_nothing_half_written(
    tmp_path: Path,
) -> None:
    with tmpfs(tmp_path / "fs", "1m") as disk:
        path = disk / "messages.jsonl"
        Transcript(path).append([user("u1")])
        before = path.read_bytes()
        fill(disk, leave=0)
        t = Transcript(path)
        with pytest.raises(DiskFull) as exc:
            t.append([user("u2", "x" * 200_000)])
        assert_names_the_full_disk(str(exc.value), path, disk)
        assert "No space left on device" in str(exc.value)
        assert path.read_bytes() == before  # no partial line stays
        (disk / "filler").unlink()
        t.append([user("u3")])  # not sticky: with room again the same reader goes on
        assert [m.id for m in Transcript(path).load()] == ["u1", "u3"]


def test_agent_and_conversation_records_on_a_full_disk_name_it(tmp_path: Path) -> None:
    with tmpfs(tmp_path / "fs", "1m") as disk:
        store = LocalStore(disk)
        agent = store.create_agent(model=MODEL, system="s")
        fill(disk, leave=0)
        for write in (
            lambda: store.create_agent(model=MODEL, system="s" * 100_000),
            lambda: store.create_conversation(agent.id),
        ):
            with pytest.raises(DiskFull) as exc:
                write()
            assert_names_the_full_disk(str(exc.value), disk, disk)


def test_out_of_inodes_is_a_full_disk_saying_so(tmp_path: Path) -> None:
    with tmpfs(tmp_path / "fs", "1m,nr_inodes=8") as disk:
        n = 0
        with pytest.raises(OSError):
            while True:
                (disk / f"f{n}").touch()
                n += 1
        with pytest.raises(DiskFull) as exc:
            LocalStore(disk).create_agent(model=MODEL, system="s")
    assert "no free inodes on" in str(exc.value) and str(disk) in str(exc.value)


def test_opening_the_checkpoint_database_on_a_full_disk_names_it(tmp_path: Path) -> None:
    """SQLite says "disk I/O error" here (its shared-memory file cannot grow): still the disk."""
    with tmpfs(tmp_path / "fs", "1m") as disk:
        fill(disk, leave=0)
        store = CheckpointStore(disk / "checkpoints.db")
        with pytest.raises(DiskFull) as exc:
            store.record_before("a/c", ToolCall("call-1", "Write", {"file_path": "x"}), "me")
        (disk / "filler").unlink()  # not sticky: the same store works once there is room
        store.record_before("a/c", ToolCall("call-2", "Write", {"file_path": "x"}), "me")
        store.close()
    message = str(exc.value)
    assert_names_the_full_disk(message, disk / "checkpoints.db", disk)
    assert "SQLite: disk I/O error" in message or "SQLite: database or disk is full" in message
    assert "effectful tool calls cannot be recorded, so they are not run" in message


def test_a_checkpoint_write_that_fills_the_disk_names_it(tmp_path: Path) -> None:
    """SQLite says "database or disk is full" (SQLITE_FULL) when a write comes up short."""
    with tmpfs(tmp_path / "fs", "1m") as disk:
        store = CheckpointStore(disk / "checkpoints.db")
        store.record_before("a/c", ToolCall("call-0", "Write", {"file_path": "x"}), "me")
        fill(disk, leave=0)
        with pytest.raises(DiskFull) as exc:
            for i in range(1, 1000):
                store.record_before("a/c", ToolCall(f"call-{i}", "Write", {"content": "y" * 4000}), "me")
        (disk / "filler").unlink()
        store.record_before("a/c", ToolCall("later", "Write", {"file_path": "x"}), "me")
        assert {"call-0", "later"} <= set(store.for_conversation("a/c"))
        store.close()
    assert_names_the_full_disk(str(exc.value), disk / "checkpoints.db", disk)


def test_the_channels_journal_on_a_full_disk_names_it(tmp_path: Path) -> None:
    with tmpfs(tmp_path / "fs", "1m") as disk:
        path = disk / "channels" / "gateway.db"
        journal = Journal(path)
        assert journal.receive(_inbound(0))
        fill(disk, leave=0)
        with pytest.raises(DiskFull) as exc:
            for i in range(1, 1000):
                journal.receive(_inbound(i))
        (disk / "filler").unlink()
        assert journal.receive(_inbound(1000))
        journal.close()
        fill(disk, leave=0)
        with pytest.raises(DiskFull) as at_open:
            Journal(disk / "channels" / "other.db")
    assert_names_the_full_disk(str(exc.value), path, disk)
    assert "cannot write the channels journal" in str(exc.value)
    assert_names_the_full_disk(str(at_open.value), disk / "channels" / "other.db", disk)


def test_the_cron_store_on_a_full_disk_names_it(tmp_path: Path) -> None:
    with tmpfs(tmp_path / "fs", "1m") as disk:
        store = CronStore(disk)
        store.add(_task(0), 0, 60_000)
        fill(disk, leave=0)
        with pytest.raises(DiskFull) as exc:
            for i in range(1, 50):
                store.add(_task(i), 0, 60_000)
        (disk / "filler").unlink()
        store.add(_task(100), 0, 60_000)
        store.close()
        fill(disk, leave=0)
        (disk / "second").mkdir()
        with pytest.raises(DiskFull) as at_open:
            CronStore(disk / "second").tasks()
    for err, path in ((exc.value, disk / "cron.db"), (at_open.value, disk / "second" / "cron.db")):
        assert_names_the_full_disk(str(err), path, disk)
        assert "cannot write the schedule store" in str(err)


def test_the_app_servers_input_queue_on_a_full_disk_names_it(tmp_path: Path) -> None:
    with tmpfs(tmp_path / "fs", "1m") as disk:
        path = disk / "inputs.db"
        queue = SqliteInputQueue(path, "owner-1")
        queue.accept(_input(0))
        fill(disk, leave=0)
        with pytest.raises(DiskFull) as exc:
            for i in range(1, 1000):
                queue.accept(_input(i))
        (disk / "filler").unlink()
        queue.accept(_input(1000))  # not sticky
        queue.close()
    assert_names_the_full_disk(str(exc.value), path, disk)
    assert "cannot write the input queue" in str(exc.value)
    assert "the input was not accepted" in str(exc.value)


def _input(i: int) -> StoredInput:
    text = "w" * 4000
    message = StoredMessage(f"cm-{i}", text, ({"type": "text", "text": text},))
    return StoredInput("agent-1/conv-1", f"item-{i}", "websocket", "queued", (message,),
                       Workspace("/", None, sandboxed=False))


def _task(i: int) -> dict[str, object]:
    return {"id": f"task-{i}", "agent_id": "agent-1", "status": "active", "prompt": "z" * 8000}


def _inbound(i: int) -> InboundMessage:
    return InboundMessage("telegram", "acct", "chat", "someone", "y" * 4000, float(i), f"m{i}")


# --- which errors are a full disk ----------------------------------------------------------


def _sqlite_error(message: str, name: str) -> sqlite3.Error:
    exc = sqlite3.OperationalError(message)
    exc.sqlite_errorname = name  # what sqlite3 sets on the errors it raises
    return exc


def test_an_io_error_on_a_disk_with_room_is_not_called_full(tmp_path: Path) -> None:
    io_error = _sqlite_error("disk I/O error", "SQLITE_IOERR_WRITE")
    assert disk_full(tmp_path / "x.db", io_error) is None  # the test folder's disk has room
    assert disk_full(tmp_path / "x.db", _sqlite_error("database is locked", "SQLITE_BUSY")) is None
    assert disk_full(tmp_path / "x", OSError(errno.EIO, "Input/output error")) is None
    with tmpfs(tmp_path / "fs", "1m") as disk:
        fill(disk, leave=0)
        full = disk_full(disk / "x.db", io_error, "write the test database")
    assert full is not None
    assert_names_the_full_disk(str(full), disk / "x.db", disk)
    assert "cannot write the test database" in str(full) and "SQLite: disk I/O error" in str(full)


def test_a_full_disk_error_naming_no_file_names_no_other_disk() -> None:
    full = disk_full("TETHER_HOME", OSError(errno.ENOSPC, os.strerror(errno.ENOSPC)))
    assert full is not None and full.mount is None and " free on " not in str(full)
    assert str(full) == (
        "the disk is full: cannot write TETHER_HOME (No space left on device); free some space "
        "on that disk, or point TETHER_HOME at another disk"
    )


def test_a_used_up_quota_says_so(tmp_path: Path) -> None:
    full = disk_full(tmp_path / "f", OSError(errno.EDQUOT, os.strerror(errno.EDQUOT)), "append to")
    assert full is not None and isinstance(full, OSError) and full.errno == errno.EDQUOT
    assert str(full).startswith(f"the disk quota is used up: cannot append to {tmp_path / 'f'} (")
    assert f"free on {Path(full.mount or '')}" in str(full) and full.mount


# --- the real command ---------------------------------------------------------------------


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    d = tmp_path / "project"
    d.mkdir()
    return d


def _first_run(home: Path, workdir: Path, fake: FakeProvider) -> str:
    env = tether_env(fake.url, MODEL, {"TETHER_HOME": str(home)})
    run = run_tether(["-p", "first", "--model", MODEL, "--output-format", "json"], env=env, cwd=workdir)
    assert run.code == 0, run.stderr
    return str(json.loads(run.stdout)["conversation_id"])


def _error_line(stderr: str) -> str:
    lines = [line for line in stderr.splitlines() if line.startswith("Error: ")]
    assert lines, stderr
    return lines[-1].removeprefix("Error: ")


def test_tether_with_its_checkpoint_database_on_a_full_disk_names_the_disk(
    tmp_path: Path, workdir: Path
) -> None:
    """The tester's case: room left for the transcript's lines, none for the checkpoint
    database, which SQLite reported as a bare "disk I/O error"."""
    target = workdir / "out.txt"
    script = [
        {"text": "one"},
        {"tool_calls": [{"name": "Write", "arguments": {"file_path": str(target), "content": "x\n"}}]},
        {"text": "never asked"},
    ]
    with tmpfs(tmp_path / "home-fs", "2m") as home, FakeProvider(script) as fake:
        conv = _first_run(home, workdir, fake)
        fill(home, leave=16 * 1024)
        env = tether_env(fake.url, MODEL, {"TETHER_HOME": str(home)})
        run = run_tether(["-p", "write it", "--conversation", conv, "--yolo"], env=env, cwd=workdir)
        lines = (next(home.glob("conversations/*/messages.jsonl"))).read_bytes()
    assert run.code == 1, (run.code, run.stderr)
    assert "Traceback" not in run.stderr
    message = _error_line(run.stderr)
    assert_names_the_full_disk(message, home / "checkpoints.db", home)
    assert "disk I/O error" in message or "database or disk is full" in message
    assert not target.exists()  # nothing ran unrecorded
    assert lines.endswith(b"\n") and all(json.loads(line) for line in lines.splitlines())


def test_tether_on_a_full_disk_at_start_up_names_the_disk(tmp_path: Path, workdir: Path) -> None:
    with tmpfs(tmp_path / "home-fs", "1m") as home, FakeProvider([{"text": "never"}]) as fake:
        fill(home, leave=0)
        env = tether_env(fake.url, MODEL, {"TETHER_HOME": str(home)})
        run = run_tether(["-p", "hi", "--model", MODEL], env=env, cwd=workdir)
        assert fake.requests == []
    assert run.code == 1, (run.code, run.stderr)
    assert "Traceback" not in run.stderr
    assert_names_the_full_disk(_error_line(run.stderr), home, home)


@pytest.mark.parametrize("resume", [False, True], ids=["fresh-home", "resumed-conversation"])
def test_every_fill_level_either_runs_or_names_the_full_disk(
    resume: bool, tmp_path: Path, workdir: Path
) -> None:
    """Whichever store the disk runs out under (records, counters, manifest, transcript, the
    checkpoint database, session state), the run says the disk is full and where."""
    target = workdir / "out.txt"
    write = {"tool_calls": [{"name": "Write", "arguments": {"file_path": str(target), "content": "x\n"}}]}
    outcomes = []
    for leave in (0, 4096, 16384, 49152, 131072, 200000, 600000):
        script = [{"text": "one"}, write, {"text": "done"}] if resume else [write, {"text": "done"}]
        with tmpfs(tmp_path / f"home-{leave}", "4m") as home, FakeProvider(script) as fake:
            env = tether_env(fake.url, MODEL, {"TETHER_HOME": str(home)})
            args = ["-p", "write it", "--yolo", "--model", MODEL]
            if resume:
                args += ["--conversation", _first_run(home, workdir, fake)]
            fill(home, leave=leave)
            run = run_tether(args, env=env, cwd=workdir)
            transcripts = [p.read_bytes() for p in home.glob("conversations/*/messages.jsonl")]
        assert "Traceback" not in run.stderr, run.stderr
        assert run.code in (0, 1), (leave, run.code, run.stderr)
        if run.code == 1:
            assert_names_the_full_disk(_error_line(run.stderr), home, home)
        for raw in transcripts:  # whole lines only, whatever failed
            assert not raw or raw.endswith(b"\n")
            assert all(json.loads(line) for line in raw.splitlines())
        outcomes.append(run.code)
        target.unlink(missing_ok=True)
    assert outcomes[0] == 1 and outcomes[-1] == 0, outcomes


def test_a_memory_commit_on_a_full_disk_names_it_and_keeps_the_last_commit(tmp_path: Path) -> None:
    from tether.memory.memfs import MemFS

    with tmpfs(tmp_path / "fs", "2m") as disk:
        memory = MemFS(disk / "memory", agent_id="agent-local-1")
        memory.ensure_created()
        head = memory.revision()
        memory.write_working("system/human.md", "x" * 200_000)
        fill(disk, leave=0)
        with memory.writing(), pytest.raises(DiskFull) as exc:
            memory.commit(["system/human.md"], "remember")
        assert_names_the_full_disk(str(exc.value), disk / "memory", disk)
        assert "git " in str(exc.value) and "\n" not in str(exc.value)
        assert memory.revision() == head  # nothing half-committed
        (disk / "filler").unlink()
        with memory.writing():
            assert memory.commit(["system/human.md"], "remember") is not None
