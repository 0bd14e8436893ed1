"""Signals say what they are (issue 22 item 6): SIGINT, SIGTERM and SIGHUP sent to a real
`tether` running a long Bash call stop the call's whole process group, answer the call in the
transcript, name the signal, and exit 128+N (130, 143, 129), headless and bidirectional alike.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.e2e.support import TETHER, tether_env, transcript_lines
from tether.testing.fake_provider import FakeProvider

MODEL = "anthropic/claude-test"
COMMAND = "sleep 60 & echo $! > child.pid; wait"
SIGNALS = [signal.SIGINT, signal.SIGTERM, signal.SIGHUP]


def _call() -> dict:
    return {"name": "Bash", "arguments": {"command": COMMAND, "description": "long"}}


def _alive(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (FileNotFoundError, IndexError):
        return False


def _wait_for_child(workdir: Path) -> int:
    pid_file = workdir / "child.pid"
    deadline = time.monotonic() + 20
    while not (pid_file.exists() and pid_file.read_text().strip()) and time.monotonic() < deadline:
        time.sleep(0.05)
    return int(pid_file.read_text())


def _assert_stopped_and_recorded(child: int, tether_home: Path) -> None:
    deadline = time.monotonic() + 3
    while _alive(child) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(child), "the tool's background child outlived the signal"
    messages = [e["message"] for e in transcript_lines(tether_home)[1:] if e["type"] == "message"]
    assert [m["role"] for m in messages] == ["user", "assistant", "toolResult"]
    assert messages[-1]["isError"] is True


@pytest.mark.parametrize("sig", SIGNALS, ids=lambda s: signal.Signals(s).name)
@pytest.mark.parametrize("fmt", ["stream-json", "text"])
def test_headless_stops_the_tool_and_names_the_signal(
    sig: int, fmt: str, workdir: Path, tether_home: Path
) -> None:
    name = signal.Signals(sig).name
    with FakeProvider([{"tool_calls": [_call()]}, {"text": "never"}]) as fake:
        proc = subprocess.Popen(
            [TETHER, "-p", "run it", "--model", MODEL, "--yolo", "--output-format", fmt],
            env=tether_env(fake.url, MODEL), cwd=workdir, stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        child = _wait_for_child(workdir)
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=20)
        assert len(fake.requests) == 1
    assert proc.returncode == 128 + sig, err
    assert "Traceback" not in err
    if fmt == "stream-json":
        last = json.loads(out.splitlines()[-1])
        assert last["type"] == "error" and last["message"] == f"Interrupted by {name}"
        assert last["stop_reason"] == "cancelled"
    else:
        assert f"Error: Interrupted by {name}" in err
    _assert_stopped_and_recorded(child, tether_home)


@pytest.mark.parametrize("sig", SIGNALS, ids=lambda s: signal.Signals(s).name)
def test_bidirectional_stops_the_turn_and_exits_with_the_signal(
    sig: int, workdir: Path, tether_home: Path
) -> None:
    name = signal.Signals(sig).name
    with FakeProvider([{"tool_calls": [_call()]}, {"text": "never"}]) as fake:
        proc = subprocess.Popen(
            [TETHER, "-p", "--model", MODEL, "--yolo", "--input-format", "stream-json",
             "--output-format", "stream-json"],
            env=tether_env(fake.url, MODEL), cwd=workdir, stdin=subprocess.PIPE,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )
        assert proc.stdin is not None
        proc.stdin.write(json.dumps({"type": "user", "message": {"role": "user", "content": "go"}}) + "\n")
        proc.stdin.flush()
        child = _wait_for_child(workdir)
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=20)
    assert proc.returncode == 128 + sig, err
    events = [json.loads(line) for line in out.splitlines()]
    errors = [e for e in events if e["type"] == "error"]
    assert errors and errors[-1]["message"] == f"Interrupted by {name}"
    result = [e for e in events if e["type"] == "result"]
    assert result and result[-1]["subtype"] == "interrupted"
    _assert_stopped_and_recorded(child, tether_home)


def test_second_run_after_sighup_is_clean(workdir: Path, tether_home: Path) -> None:
    """A hung-up run left nothing behind: the next one on the conversation just works."""
    script = [{"tool_calls": [_call()]}, {"text": "fresh"}]
    with FakeProvider(script) as fake:
        env = tether_env(fake.url, MODEL)
        proc = subprocess.Popen(
            [TETHER, "-p", "run it", "--model", MODEL, "--yolo", "--output-format", "stream-json"],
            env=env, cwd=workdir, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True,
        )
        _wait_for_child(workdir)
        proc.send_signal(signal.SIGHUP)
        out, _ = proc.communicate(timeout=20)
        conv = json.loads(out.splitlines()[0])["conversation_id"]
        again = subprocess.run([TETHER, "-p", "again", "--conversation", conv], env=env, cwd=workdir,
                               capture_output=True, text=True, timeout=60)
    assert (again.returncode, again.stdout) == (0, "fresh\n"), again.stderr
    assert os.listdir(workdir) == ["child.pid"]


def test_closing_the_terminal_stops_the_tool(tmp_path: Path, tether_home: Path) -> None:
    """The real SIGHUP: the terminal tether runs in goes away (tmux kills its pane)."""
    from tests.requirements import need_tmux

    tmux = need_tmux()
    workdir = tmp_path / "project"
    workdir.mkdir()
    with FakeProvider([{"tool_calls": [_call()]}, {"text": "never"}]) as fake:
        env = tether_env(fake.url, MODEL, {"TERM": "xterm-256color"})
        env.pop("TMUX", None)
        base = [tmux, "-S", str(tmp_path / "tmux.sock"), "-f", "/dev/null"]
        command = f"exec {TETHER} -p 'run it' --model {MODEL} --yolo"
        started = subprocess.run([*base, "new-session", "-d", "-s", "hup", "-c", str(workdir), command],
                                 env=env, capture_output=True, text=True, timeout=10)
        assert started.returncode == 0, started.stderr
        pane = subprocess.run([*base, "list-panes", "-t", "hup", "-F", "#{pane_pid}"], env=env,
                              capture_output=True, text=True, timeout=10)
        tether_pid = int(pane.stdout.split()[0])
        child = _wait_for_child(workdir)
        subprocess.run([*base, "kill-server"], env=env, capture_output=True, timeout=10)
        deadline = time.monotonic() + 10
        while _alive(tether_pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _alive(tether_pid), "tether kept running after its terminal closed"
    _assert_stopped_and_recorded(child, tether_home)
