"""The installed `tether` command in a real terminal (tmux): type a prompt, see the answer, exit."""

from __future__ import annotations

import subprocess
import time
from pathlib import Path

from tests.e2e.support import TETHER, tether_env
from tests.requirements import need_tmux
from tests.tui.support import MODEL, disk_entries
from tether.testing.fake_provider import FakeProvider


def _require_tmux() -> str:
    return need_tmux()


class Tmux:
    def __init__(self, tmux: str, socket: Path, env: dict[str, str]) -> None:
        self.base = [tmux, "-S", str(socket), "-f", "/dev/null"]
        self.env = env

    def __call__(self, *args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*self.base, *args], env=self.env, capture_output=True, text=True, timeout=10)

    def screen(self) -> str:
        return self("capture-pane", "-p", "-t", "tui").stdout

    def wait_for(self, text: str, timeout: float = 30) -> str:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            shown = self.screen()
            if text in shown:
                return shown
            time.sleep(0.05)
        raise AssertionError(f"{text!r} never appeared; the pane shows:\n{self.screen()}")


def test_prompt_and_answer_in_a_real_terminal(tmp_path: Path, tether_home: Path) -> None:
    tmux_bin = _require_tmux()
    workdir = tmp_path / "project"
    workdir.mkdir()
    status = tmp_path / "exit-status"
    with FakeProvider([{"text": "pong from the fake model", "chunk_size": 4}]) as fake:
        env = tether_env(fake.url, MODEL, {"TERM": "xterm-256color"})
        env.pop("TMUX", None)
        tmux = Tmux(tmux_bin, tmp_path / "tmux.sock", env)
        command = f"{TETHER} --model {MODEL}; echo $? > {status}"
        try:
            started = tmux("new-session", "-d", "-s", "tui", "-x", "120", "-y", "40", "-c", str(workdir), command)
            assert started.returncode == 0, started.stderr
            tmux.wait_for("Ask tether")
            tmux.wait_for("○ ready")
            tmux("send-keys", "-t", "tui", "ping the model", "Enter")
            shown = tmux.wait_for("pong from the fake model")
            assert "> ping the model" in shown
            tmux.wait_for("○ ready")  # the turn finished
            tmux("send-keys", "-t", "tui", "C-c")
            tmux.wait_for("press Ctrl-C again to exit")
            tmux("send-keys", "-t", "tui", "C-c")
            deadline = time.monotonic() + 20
            while not status.exists() and time.monotonic() < deadline:
                time.sleep(0.05)
        finally:
            tmux("kill-server")
        assert len(fake.requests) == 1
    assert status.read_text().strip() == "0"
    assert [m["role"] for m in disk_entries(tether_home)] == ["user", "assistant"]
