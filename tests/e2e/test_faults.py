"""Faults without surprises (issue 22 items 3 and 4): a full disk, a read-only TETHER_HOME and an
unwritable effect store end a real `tether` run with a clear error naming the path and the
cause, a `result` line with an error subtype for stream-json, a non-zero exit, no traceback,
and the transcript intact.

TETHER_HOME is a small tmpfs (the tests run as root in CI); where mounting is impossible the
tmpfs tests skip and say why. Read-only homes are a read-only remount of that tmpfs.
"""

from __future__ import annotations

import contextlib
import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.e2e.support import Run, run_tether, tether_env
from tether.backends.local.transcript import Transcript
from tether.testing.fake_provider import FakeProvider

MODEL = "anthropic/claude-test"


@contextlib.contextmanager
def tmpfs(path: Path, size: str) -> Iterator[Path]:
    path.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size},mode=0700", "tmpfs", str(path)],
                          capture_output=True, text=True)
    if done.returncode != 0:
        # A small tmpfs is how a full disk is made for real; it is no optional extra: fail.
        pytest.fail(f"cannot mount a tmpfs here ({done.stderr.strip() or done.returncode}): "
                    "these fault tests need root or CAP_SYS_ADMIN (CI runs as root)")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], check=False)


def remount(path: Path, mode: str) -> None:
    subprocess.run(["mount", "-o", f"remount,{mode}", str(path)], check=True)


def fill(home: Path, leave: int) -> None:
    """Fill the tmpfs at `home` to the last byte, then give back about `leave` bytes."""
    filler = home / "filler"
    with open(filler, "wb", buffering=0) as fh:
        for chunk in (65536, 512):  # then the last partial block
            with contextlib.suppress(OSError):
                while fh.write(b"\0" * chunk):
                    pass
    size = filler.stat().st_size
    with open(filler, "r+b") as fh:
        fh.truncate(max(size - leave, 0))


def assert_clear_failure(run: Run, *, path_part: str, cause: str, stream: bool) -> None:
    assert run.code == 1, (run.code, run.stderr)
    assert "Traceback" not in run.stderr and "Traceback" not in run.stdout
    error_line = [line for line in run.stderr.splitlines() if line.startswith("Error: ")]
    assert error_line, run.stderr
    assert path_part in error_line[0] and cause in error_line[0], error_line
    if stream:
        events = run.events
        assert events[-1]["type"] == "result" and events[-1]["subtype"] == "error", events[-1]
        assert path_part in events[-1]["result"] and cause in events[-1]["result"]
        errors = [e for e in events if e["type"] == "error"]
        assert errors and cause in errors[-1]["message"]


def transcript_file(home: Path) -> Path:
    [path] = home.glob("conversations/*/messages.jsonl")
    return path


def first_run(home: Path, workdir: Path, fake: FakeProvider) -> str:
    env = tether_env(fake.url, MODEL, {"TETHER_HOME": str(home)})
    run = run_tether(["-p", "first", "--model", MODEL, "--output-format", "json"], env=env, cwd=workdir)
    assert run.code == 0, run.stderr
    return json.loads(run.stdout)["conversation_id"]


@pytest.mark.parametrize("fault", ["read-only", "full"])
@pytest.mark.parametrize("fmt", ["stream-json", "text"])
def test_an_unwritable_home_at_start_up_is_a_clear_error(
    fault: str, fmt: str, tmp_path: Path, workdir: Path
) -> None:
    with tmpfs(tmp_path / "home-fs", "1m") as home, FakeProvider([{"text": "never"}]) as fake:
        if fault == "read-only":
            remount(home, "ro")
        else:
            fill(home, leave=0)
        env = tether_env(fake.url, MODEL, {"TETHER_HOME": str(home)})
        run = run_tether(["-p", "hi", "--model", MODEL, "--output-format", fmt], env=env, cwd=workdir)
        assert fake.requests == []
    cause = "Read-only file system" if fault == "read-only" else "No space left on device"
    assert_clear_failure(run, path_part=str(home), cause=cause, stream=fmt == "stream-json")


def test_a_home_turned_read_only_fails_the_resume_and_keeps_the_transcript(tmp_path: Path, workdir: Path) -> None:
    with tmpfs(tmp_path / "home-fs", "1m") as home, FakeProvider([{"text": "one"}, {"text": "two"}]) as fake:
        conv = first_run(home, workdir, fake)
        before = transcript_file(home).read_bytes()
        remount(home, "ro")
        env = tether_env(fake.url, MODEL, {"TETHER_HOME": str(home)})
        run = run_tether(["-p", "second", "--conversation", conv, "--output-format", "stream-json"],
                         env=env, cwd=workdir)
        assert transcript_file(home).read_bytes() == before
        remount(home, "rw")
        assert [m.role for m in Transcript(transcript_file(home)).load()] == ["user", "assistant"]
    assert_clear_failure(run, path_part=str(home), cause="Read-only file system", stream=True)


@pytest.mark.parametrize("fmt", ["stream-json", "json"])
def test_a_full_disk_mid_turn_fails_the_append_and_keeps_the_transcript(
    fmt: str, tmp_path: Path, workdir: Path
) -> None:
    big = "x" * 400_000  # the model's answer cannot be appended to a disk this full
    script = [{"text": "one"}, {"text": big, "chunk_size": 100_000}, {"text": "space is back"}]
    with tmpfs(tmp_path / "home-fs", "2m") as home, FakeProvider(script) as fake:
        conv = first_run(home, workdir, fake)
        before = transcript_file(home).read_bytes()
        fill(home, leave=64 * 1024)
        env = tether_env(fake.url, MODEL, {"TETHER_HOME": str(home)})
        run = run_tether(["-p", "second", "--conversation", conv, "--output-format", fmt],
                         env=env, cwd=workdir)
        assert len(fake.requests) == 2  # it failed mid-turn, after the model answered
        after = transcript_file(home).read_bytes()
        (home / "filler").unlink()
        loaded = Transcript(transcript_file(home)).load()
        # Not sticky: once there is room again, the conversation goes on.
        again = run_tether(["-p", "third", "--conversation", conv], env=env, cwd=workdir)
        assert (again.code, again.stdout) == (0, "space is back\n"), again.stderr
    assert_clear_failure(run, path_part="messages.jsonl", cause="No space left on device",
                         stream=fmt == "stream-json")
    # Whole lines only: what was appended before the failure, nothing of the failed write.
    assert after.startswith(before) and after.endswith(b"\n")
    assert all(json.loads(line) for line in after.splitlines())
    assert [m.role for m in loaded][:2] == ["user", "assistant"]
    assert all(big not in json.dumps(line) for line in after.decode().splitlines())


def write_call(path: str) -> dict:
    return {"name": "Write", "arguments": {"file_path": path, "content": "effect\n"}}


def test_an_unwritable_effect_store_refuses_tools_and_fails_the_run(workdir: Path, tether_home: Path) -> None:
    tether_home.mkdir(parents=True, exist_ok=True)
    (tether_home / "checkpoints.db").mkdir()  # sqlite cannot open it: the store is unavailable
    script = [{"tool_calls": [write_call(str(workdir / "out.txt"))]}, {"text": "all done"}]
    with FakeProvider(script) as fake:
        env = tether_env(fake.url, MODEL)
        run = run_tether(["-p", "write it", "--model", MODEL, "--yolo", "--output-format", "stream-json"],
                         env=env, cwd=workdir)
    assert_clear_failure(run, path_part="checkpoints.db", cause="effect store is unavailable", stream=True)
    assert not (workdir / "out.txt").exists()  # nothing ran unrecorded
    returns = run.of_type("message", "tool_return_message")
    assert len(returns) == 1 and returns[0]["status"] == "error"
    assert "effect store is unavailable" in returns[0]["tool_return"]
    assert "blocked by hook" not in returns[0]["tool_return"]
    assert len(fake.requests) == 1  # the run stopped: the model was not asked to carry on
    lines = [json.loads(line) for line in transcript_file(tether_home).read_text().splitlines()]
    roles = [e["message"]["role"] for e in lines[1:] if e["type"] == "message"]
    assert roles == ["user", "assistant", "toolResult"]  # every call answered
