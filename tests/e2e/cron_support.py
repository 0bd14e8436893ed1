"""What the `tether cron` end-to-end tests share: the real command, a task added, the fake clock."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path
from typing import Any

from tests.e2e.support import TETHER
from tether.backends.local.store import LocalStore

CRON = [TETHER, "cron"]

T0 = 1_900_000_000_000 - (1_900_000_000_000 % 60_000) + 10_000  # hh:mm:10, a fixed fake time
MIN = 60_000


def cron(
    *args: str, home: Path, extra: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "TETHER_HOME": str(home), **(extra or {})}
    return subprocess.run([*CRON, *args], capture_output=True, text=True, env=env, timeout=60)


def ok(proc: subprocess.CompletedProcess[str]) -> Any:
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def new_agent(home: Path) -> str:
    return LocalStore(home).create_agent(model="anthropic/claude-test", system="s").id


def add_task(
    home: Path,
    agent: str,
    name: str,
    prompt: str,
    *schedule: str,
    conversation: str | None = None,
    extra: dict[str, str] | None = None,
) -> Any:
    """`tether cron add --agent … [--conversation …] --name … --prompt … <schedule>`: the task."""
    target = ["--agent", agent] + (["--conversation", conversation] if conversation else [])
    args = [*target, "--name", name, "--prompt", prompt, *schedule]
    return ok(cron("add", *args, home=home, extra=extra))


class Clock:
    """The servers' and the CLI's time (TETHER_CRON_CLOCK_FILE), moved by the test."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.now = T0
        self.set(T0)

    def set(self, ms: int) -> None:
        self.now = ms
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(str(ms))
        tmp.replace(self.path)

    def advance(self, ms: int) -> None:
        self.set(self.now + ms)


def scheduled_env(fake_url: str, home: Path, tmp: Path, clock: Clock) -> dict[str, str]:
    from tests.server.support import server_env

    env = server_env(fake_url, home, tmp)
    env.update(TETHER_CRON_CLOCK_FILE=str(clock.path), TETHER_CRON_POLL_S="0.05")
    return env


def prompts(fake: Any) -> list[str]:
    """The last user message of each request the provider received."""
    out = []
    for request in fake.requests:
        last = request["body"]["messages"][-1]
        content = last["content"]
        out.append(
            content if isinstance(content, str) else " ".join(p.get("text", "") for p in content)
        )
    return out


def wait_until(pred: Any, timeout: float = 30, what: str = "") -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if pred():
            return
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def settle() -> None:
    """Long enough for many scheduler polls (0.05 s) to have happened."""
    time.sleep(1.0)
