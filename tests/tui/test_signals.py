"""SIGTERM and SIGHUP (the terminal closed) end the TUI like a quit, not like `kill -9`: the
running tool's process group is stopped, the call answered on disk, and the exit is 128+N."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

import pytest

from tests.e2e.support import TETHER, tether_env
from tests.requirements import need_tmux
from tests.tui.support import MODEL, bash, disk_entries
from tests.tui.test_tmux import Tmux
from tether.testing.fake_provider import FakeProvider


def _children(pid: int) -> list[int]:
    try:
        return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP], ids=["SIGTERM", "SIGHUP"])
def test_a_signal_stops_the_tool_and_records_the_call(tmp_path: Path, tether_home: Path,
                                                      signum: signal.Signals) -> None:
    workdir = tmp_path / "project"
    workdir.mkdir()
    status = tmp_path / "exit-status"
    script = [{"tool_calls": [bash("sleep 120 & echo $! > sleep.pid; wait")]}, {"text": "never"}]
    with FakeProvider(script) as fake:
        env = tether_env(fake.url, MODEL, {"TERM": "xterm-256color"})
        env.pop("TMUX", None)
        tmux = Tmux(need_tmux(), tmp_path / "tmux.sock", env)
        command = f"{TETHER} --model {MODEL} --yolo; echo $? > {status}"
        try:
            started = tmux("new-session", "-d", "-s", "tui", "-x", "120", "-y", "40", "-c",
                           str(workdir), command)
            assert started.returncode == 0, started.stderr
            tmux.wait_for("○ ready")
            tmux("send-keys", "-t", "tui", "start the long job", "Enter")
            pidfile = workdir / "sleep.pid"
            deadline = time.monotonic() + 30
            while not (pidfile.exists() and pidfile.read_text().strip()) and time.monotonic() < deadline:
                time.sleep(0.05)
            sleeper = int(pidfile.read_text())
            shell = int(tmux("list-panes", "-t", "tui", "-F", "#{pane_pid}").stdout.split()[0])
            tether = _children(shell)[0]
            os.kill(tether, signum)
            deadline = time.monotonic() + 30
            while not status.exists() and time.monotonic() < deadline:
                time.sleep(0.05)
        finally:
            tmux("kill-server")
    assert status.read_text().strip() == str(128 + signum)
    deadline = time.monotonic() + 5
    while _alive(sleeper) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not _alive(sleeper), "the tool's process group outlived tether"
    roles = [m["role"] for m in disk_entries(tether_home)]
    assert roles[:2] == ["user", "assistant"] and "toolResult" in roles  # the call was answered
