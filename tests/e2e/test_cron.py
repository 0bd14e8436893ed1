"""`tether cron` end to end: the real command in a subprocess, the store on disk."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tether.backends.local.store import LocalStore

# `tether cron` once cli/main.py dispatches it; the module entry point until then.
CRON = [sys.executable, "-m", "tether.cli.cron_cmd"]


def cron(
    *args: str, home: Path, extra: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "TETHER_HOME": str(home), **(extra or {})}
    return subprocess.run([*CRON, *args], capture_output=True, text=True, env=env, timeout=60)


def ok(proc: subprocess.CompletedProcess[str]) -> Any:
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


@pytest.fixture
def agent(tether_home: Path) -> str:
    return LocalStore(tether_home).create_agent(model="anthropic/claude-test", system="s").id


def test_add_list_get_runs_delete(tether_home: Path, agent: str) -> None:
    task = ok(
        cron(
            "add",
            "--agent",
            agent,
            "--name",
            "tidy",
            "--prompt",
            "tidy up",
            "--every",
            "5m",
            "--timezone",
            "Europe/Berlin",
            "--description",
            "d",
            home=tether_home,
        )
    )
    assert task["status"] == "active" and task["cron"] == "*/5 * * * *" and task["recurring"]
    assert task["conversation_id"] == "new" and task["timezone"] == "Europe/Berlin"
    assert len(task["id"]) == 8 and int(task["id"], 16) >= 0
    one = ok(
        cron(
            "add",
            "--agent",
            agent,
            "--conversation",
            "default",
            "--name",
            "once",
            "--prompt",
            "p",
            "--at",
            "in 45m",
            home=tether_home,
        )
    )
    assert not one["recurring"] and one["scheduled_for"]
    listed = ok(cron("list", home=tether_home))
    assert [t["id"] for t in listed] == [task["id"], one["id"]]
    assert ok(cron("list", "--agent", "agent-local-nobody", home=tether_home)) == []
    assert ok(cron("get", task["id"], home=tether_home)) == task
    assert ok(cron("runs", task["id"], home=tether_home)) == []
    gone = ok(cron("delete", task["id"], home=tether_home))
    assert gone == {"deleted": True, "id": task["id"], "name": "tidy"}
    assert ok(cron("remove", one["id"], home=tether_home))["deleted"]
    missing = cron("get", task["id"], home=tether_home)
    assert missing.returncode == 1 and f"no scheduled task '{task['id']}'" in missing.stderr
    # on disk: SQLite under TETHER_HOME, owner-only
    db = tether_home / "cron.db"
    assert db.is_file() and (db.stat().st_mode & 0o077) == 0
    assert sqlite3.connect(db).execute("SELECT COUNT(*) FROM tasks").fetchone() == (0,)


def test_agent_from_the_agents_shell(tether_home: Path, agent: str) -> None:
    task = ok(
        cron(
            "add",
            "--name",
            "self",
            "--prompt",
            "p",
            "--cron",
            "0 9 * * 1-5",
            home=tether_home,
            extra={"TETHER_AGENT_ID": agent},
        )
    )
    assert task["agent_id"] == agent and task["cron"] == "0 9 * * 1-5"


@pytest.mark.parametrize(
    ("args", "why"),
    [
        (["--name", "n", "--prompt", "p", "--every", "5m"], "needs --agent"),
        (
            ["--agent", "agent-local-missing", "--name", "n", "--prompt", "p", "--every", "5m"],
            "No agent 'agent-local-missing'",
        ),
        (
            [
                "--agent",
                "{agent}",
                "--name",
                "n",
                "--prompt",
                "p",
                "--every",
                "5m",
                "--cron",
                "* * * * *",
            ],
            "exactly one of --every",
        ),
        (["--agent", "{agent}", "--name", "n", "--prompt", "p", "--cron", "* * *"], "5 fields"),
        (
            ["--agent", "{agent}", "--name", "n", "--prompt", "p", "--at", "noonish"],
            "--at 'noonish'",
        ),
        (
            [
                "--agent",
                "{agent}",
                "--name",
                "n",
                "--prompt",
                "p",
                "--every",
                "5m",
                "--timezone",
                "Nowhere/X",
            ],
            "not an IANA time zone",
        ),
        (
            [
                "--agent",
                "{agent}",
                "--conversation",
                "local-conv-999",
                "--name",
                "n",
                "--prompt",
                "p",
                "--every",
                "5m",
            ],
            "No conversation 'local-conv-999'",
        ),
        (["--agent", "{agent}", "--prompt", "p", "--every", "5m"], "--name"),
    ],
)
def test_bad_input_is_named(tether_home: Path, agent: str, args: list[str], why: str) -> None:
    proc = cron("add", *[a.replace("{agent}", agent) for a in args], home=tether_home)
    assert proc.returncode == 1 and why in proc.stderr and proc.stdout == ""
    assert not (tether_home / "cron.db").exists() or ok(cron("list", home=tether_home)) == []


def test_trigger_without_a_running_server_says_how_to_start_one(
    tether_home: Path, agent: str
) -> None:
    task = ok(
        cron(
            "add",
            "--agent",
            agent,
            "--name",
            "n",
            "--prompt",
            "p",
            "--every",
            "1h",
            home=tether_home,
        )
    )
    proc = cron("trigger", task["id"], home=tether_home)
    assert proc.returncode == 1 and "start `tether server`" in proc.stderr
    proc = cron("trigger", "deadbeef", home=tether_home)
    assert proc.returncode == 1 and "no scheduled task 'deadbeef'" in proc.stderr
