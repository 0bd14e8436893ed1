"""Interactive start-up: time to the TUI's first frame and to the first streamed token, in tmux.

Run: .venv/bin/python bench/tui.py [--runs N]
Targets (issue 9): first frame within 500 ms of starting `tether`.

Each run starts the installed `tether` in a fresh tmux pane against the fake provider, polls the
pane until the prompt box is drawn (first frame) and the status line says ready (the session was
resolved in the background), types a prompt and polls until the answer's first word shows (first
token), then exits with Ctrl-C twice. A pane running `python -c` that
prints one line gives the tmux + polling overhead, printed beside the figures.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from tether.testing.fake_provider import FakeProvider  # noqa: E402

TETHER = str(Path(sys.executable).with_name("tether"))
POLL_S = 0.005


class Pane:
    def __init__(self, socket: Path, env: dict[str, str]) -> None:
        self.socket, self.env = str(socket), env

    def tmux(self, *args: str) -> str:
        out = subprocess.run(["tmux", "-S", self.socket, "-f", "/dev/null", *args], env=self.env,
                             capture_output=True, text=True, check=False)
        return out.stdout

    def start(self, command: str, cwd: str) -> None:
        self.tmux("new-session", "-d", "-s", "bench", "-x", "120", "-y", "40", "-c", cwd, command)

    def wait_for(self, text: str, timeout: float = 20.0) -> float:
        started = time.perf_counter()
        while time.perf_counter() - started < timeout:
            if text in self.tmux("capture-pane", "-p", "-t", "bench"):
                return time.perf_counter()
            time.sleep(POLL_S)
        raise SystemExit(f"timed out waiting for {text!r} in the pane:\n{self.tmux('capture-pane', '-p', '-t', 'bench')}")

    def stop(self) -> None:
        self.tmux("kill-server")


def one_run(env: dict[str, str], cwd: str, model: str) -> tuple[float, float, float]:
    with tempfile.TemporaryDirectory() as sock_dir:
        pane = Pane(Path(sock_dir) / "sock", env)
        try:
            t0 = time.perf_counter()
            pane.start(f"{TETHER} --model {model}", cwd)
            frame = pane.wait_for("Ask tether") - t0  # the prompt box: drawn in the first frame
            ready = pane.wait_for("○ ready") - t0  # the session resolved (prepare finished)
            pane.tmux("send-keys", "-t", "bench", "ping", "Enter")
            t1 = time.perf_counter()
            token = pane.wait_for("pong") - t1
            pane.tmux("send-keys", "-t", "bench", "C-c", "C-c")
            time.sleep(0.3)
        finally:
            pane.stop()
    return frame * 1000, ready * 1000, token * 1000


def baseline(env: dict[str, str], cwd: str) -> float:
    with tempfile.TemporaryDirectory() as sock_dir:
        pane = Pane(Path(sock_dir) / "sock", env)
        try:
            t0 = time.perf_counter()
            pane.start(f"{sys.executable} -c \"print('ready-line'); import time; time.sleep(5)\"", cwd)
            return (pane.wait_for("ready-line") - t0) * 1000
        finally:
            pane.stop()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=7)
    runs = parser.parse_args().runs
    if shutil.which("tmux") is None:
        raise SystemExit("bench/tui.py needs tmux (apt-get install tmux)")
    model = "anthropic/bench"
    with tempfile.TemporaryDirectory() as tmp, FakeProvider([{"text": "pong and more words"}] * (runs + 2)) as fake:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("TETHER_", "ANTHROPIC_", "OPENAI_"))}
        env.update(TETHER_HOME=str(Path(tmp) / "home"), ANTHROPIC_BASE_URL=fake.url,
                   ANTHROPIC_API_KEY="bench", TERM="xterm-256color")
        cwd = str(Path(tmp) / "project")
        Path(cwd).mkdir()
        one_run(env, cwd, model)  # warm-up: creates the agent, fills the OS caches
        base = statistics.median(baseline(env, cwd) for _ in range(runs))
        results = [one_run(env, cwd, model) for _ in range(runs)]
    frames = [f for f, _, _ in results]
    readies = [r for _, r, _ in results]
    tokens = [t for _, _, t in results]
    print(f"tmux + python -c print     {base:7.1f} ms   (overhead included in the figures below)")
    print(f"first frame (prompt box)   {statistics.median(frames):7.1f} ms   median of {runs}; "
          f"max {max(frames):.1f} ms; target < 500 ms")
    print(f"session ready              {statistics.median(readies):7.1f} ms   (prepare runs after the first frame)")
    print(f"first streamed token       {statistics.median(tokens):7.1f} ms   after enter; max {max(tokens):.1f} ms")


if __name__ == "__main__":
    main()
