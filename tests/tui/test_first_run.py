"""The first-run screen in a real terminal (tmux): no provider configured, `tether` asks for one,
stores it as `tether connect` does, and the session opens and answers (issue 18 item 3)."""

from __future__ import annotations

import stat
import time
from pathlib import Path

from tests.e2e.support import TETHER, tether_env
from tests.requirements import need_tmux
from tests.tui.support import MODEL
from tests.tui.test_tmux import Tmux
from tether.providers.credentials import auth_path, find_credential, load_credentials, record_key
from tether.testing.fake_provider import FakeProvider


def start(tmp_path: Path, env: dict[str, str]) -> tuple[Tmux, Path]:
    workdir = tmp_path / "project"
    workdir.mkdir()
    status = tmp_path / "exit-status"
    env = {**env, "TERM": "xterm-256color"}
    env.pop("TMUX", None)
    env.pop("ANTHROPIC_API_KEY", None)  # the base URL points at the fake; no key anywhere
    tmux = Tmux(need_tmux(), tmp_path / "tmux.sock", env)
    started = tmux("new-session", "-d", "-s", "tui", "-x", "120", "-y", "40", "-c", str(workdir),
                   f"{TETHER}; echo $? > {status}")
    assert started.returncode == 0, started.stderr
    return tmux, status


def wait_for_file(path: Path) -> str:
    deadline = time.monotonic() + 20
    while not path.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    return path.read_text().strip()


def test_first_run_stores_a_key_and_opens_the_session(tmp_path: Path, tether_home: Path) -> None:
    with FakeProvider([{"text": "hello from the first run"}]) as fake:
        tmux, status = start(tmp_path, tether_env(fake.url, MODEL))
        try:
            tmux.wait_for("Welcome to tether")
            tmux("send-keys", "-t", "tui", "Enter")  # anthropic, the first in tether's order
            # the key box, enabled and named for the chosen provider (the intro line above it
            # may already have scrolled out of a 40-row pane once the box takes the focus)
            tmux.wait_for("API key for anthropic")
            tmux("send-keys", "-t", "tui", "sk-first-run", "Enter")
            tmux.wait_for("○ ready")
            tmux("send-keys", "-t", "tui", "say hi", "Enter")
            tmux.wait_for("hello from the first run")
            tmux.wait_for("○ ready")
            tmux("send-keys", "-t", "tui", "C-c")
            tmux("send-keys", "-t", "tui", "C-c")
            code = wait_for_file(status)
        finally:
            tmux("kill-server")
        assert [r["headers"].get("x-api-key") for r in fake.requests] == ["sk-first-run"]
    assert code == "0"
    # stored exactly as `tether connect anthropic --api-key sk-first-run` stores it
    record = find_credential(load_credentials(tether_home), "anthropic")
    assert record_key(record) == "sk-first-run"
    assert stat.S_IMODE(auth_path(tether_home).stat().st_mode) == 0o600


def test_leaving_the_first_run_screen_stores_nothing_and_exits_1(tmp_path: Path, tether_home: Path) -> None:
    with FakeProvider([]) as fake:
        tmux, status = start(tmp_path, tether_env(fake.url, MODEL))
        try:
            tmux.wait_for("Welcome to tether")
            tmux("send-keys", "-t", "tui", "Escape")
            code = wait_for_file(status)
        finally:
            tmux("kill-server")
        assert fake.requests == []
    assert code == "1"
    assert load_credentials(tether_home) == []
