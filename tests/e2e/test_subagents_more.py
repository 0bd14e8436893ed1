"""End to end: background subagents across parent runs, TaskStop, a parent killed with SIGKILL,
the retry on a truncated child stream, the running limit, and the parent's sandbox binding the
child. Parent and child talk to separate fake providers (the child through the Agent call's
`model`), so their scripts cannot race."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.support import TETHER, run_tether, tether_env
from tests.e2e.test_headless import _alive
from tests.requirements import need_bwrap
from tether.runtime.agents.subagents import MAX_RUNNING, ParentScope, Subagents, SubagentType
from tether.testing.fake_provider import FakeProvider

MODEL = "anthropic/claude-test"
CHILD_MODEL = "openai-chat/child-model"




def agent_call(
    prompt: str, *, background: bool = True, kind: str = "general-purpose"
) -> dict[str, Any]:
    return {
        "name": "Agent",
        "arguments": {
            "description": "delegate",
            "prompt": prompt,
            "subagent_type": kind,
            "run_in_background": background,
            "model": CHILD_MODEL,
        },
    }


def bash(command: str) -> dict[str, Any]:
    return {"name": "Bash", "arguments": {"command": command, "description": "step"}}


def wait_for_file(name: str) -> dict[str, Any]:
    return bash(f"for i in $(seq 600); do [ -s {name} ] && break; sleep 0.05; done; cat {name}")


LONG_CHILD = bash("echo $$ > child.pid; exec sleep 60")  # the child's long tool: pid, then sleep


def env_for(
    parent: FakeProvider, child: FakeProvider, extra: dict[str, str] | None = None
) -> dict[str, str]:
    return tether_env(
        parent.url,
        MODEL,
        {"OPENAI_BASE_URL": child.url + "/v1", "OPENAI_API_KEY": "sk-child", **(extra or {})},
    )


def last_user_text(request: dict[str, Any]) -> str:
    return json.dumps(request["body"]["messages"][-1])


def task_log(home: Path) -> list[dict[str, Any]]:
    files = list(home.glob("conversations/*/tasks.jsonl"))
    assert len(files) == 1, files
    return [json.loads(line) for line in files[0].read_text().splitlines()]


def child_pids(home: Path) -> list[int]:
    return [r["pid"] for r in task_log(home) if r["event"] == "spawned"]


def wait_dead(pids: list[int], seconds: float = 10) -> list[int]:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and any(_alive(p) for p in pids):
        time.sleep(0.05)
    return [p for p in pids if _alive(p)]


def test_background_notification_reaches_the_next_run_once(
    workdir: Path, tether_home: Path
) -> None:
    parent_script: list[dict[str, Any]] = [
        {"tool_calls": [agent_call("say hi")]},
        {
            "tool_calls": [
                {
                    "name": "TaskOutput",
                    "arguments": {"task_id": "task_1", "block": True, "timeout": 30000},
                }
            ]
        },
        {"text": "first run done"},
        {"text": "second run done"},
        {"text": "third run done"},
    ]
    with (
        FakeProvider(parent_script) as parent,
        FakeProvider([{"text": "hi from the child"}]) as child,
    ):
        env = env_for(parent, child)
        first = run_tether(
            ["-p", "bg", "--model", MODEL, "--yolo", "--output-format", "stream-json"],
            env=env,
            cwd=workdir,
            timeout=90,
        )
        assert first.code == 0, first.stderr
        conv = first.events[0]["conversation_id"]
        second = run_tether(
            ["-p", "next", "--conv", conv, "--output-format", "stream-json"],
            env=env,
            cwd=workdir,
            timeout=60,
        )
        third = run_tether(
            ["-p", "again", "--conv", conv, "--output-format", "stream-json"],
            env=env,
            cwd=workdir,
            timeout=60,
        )
        requests = parent.requests
    assert second.code == 0 and third.code == 0, (second.stderr, third.stderr)
    delivered = last_user_text(requests[3])
    assert "<task-notification><task-id>task_1</task-id><status>completed</status>" in delivered
    assert "hi from the child" in delivered and "Full transcript available at:" in delivered
    assert delivered.index("task-notification") < delivered.index("next")  # before the prompt
    assert "task-notification" not in last_user_text(requests[4])  # one-shot: given out once
    # The parent's stream shows the child's progress, tagged with the subagent and the Agent call.
    agent_call_id = first.of_type("message", "tool_call_message")[0]["tool_call"]["tool_call_id"]
    relayed = [e for e in first.of_type("stream_event") if e.get("subagent_id") == "task_1"]
    texts = [e["event"] for e in relayed if e["event"].get("message_type") == "assistant_message"]
    assert texts and "hi from the child" in json.dumps(texts)
    assert all(
        e["parent_tool_call_id"] == agent_call_id
        and e["agent_id"] == first.events[0]["agent_id"]
        and e["subagent_agent_id"].startswith("agent-local-")
        for e in relayed
    )


def test_parent_exit_stops_a_running_child_and_records_it_interrupted(
    workdir: Path, tether_home: Path
) -> None:
    parent_script: list[dict[str, Any]] = [
        {"tool_calls": [agent_call("run something long")]},
        {"tool_calls": [wait_for_file("child.pid")]},
        {"text": "leaving while the child runs"},
        {"text": "heard about it"},
    ]
    with (
        FakeProvider(parent_script) as parent,
        FakeProvider([{"tool_calls": [LONG_CHILD]}]) as child,
    ):
        env = env_for(parent, child)
        first = run_tether(
            ["-p", "bg", "--model", MODEL, "--yolo", "--output-format", "stream-json"],
            env=env,
            cwd=workdir,
            timeout=90,
        )
        assert first.code == 0, first.stderr
        leftover = wait_dead(
            [int((workdir / "child.pid").read_text()), *child_pids(tether_home)], 2
        )
        assert leftover == []  # the child tether and its tool's process died with the parent's exit
        ended = [r for r in task_log(tether_home) if r["event"] == "ended"]
        assert [(r["task_id"], r["status"], r["delivered"]) for r in ended] == [
            ("task_1", "interrupted", False)
        ]
        second = run_tether(
            [
                "-p",
                "next",
                "--conv",
                first.events[0]["conversation_id"],
                "--output-format",
                "stream-json",
            ],
            env=env,
            cwd=workdir,
            timeout=60,
        )
        delivered = last_user_text(parent.requests[3])
    assert second.code == 0, second.stderr
    assert "<task-id>task_1</task-id><status>interrupted</status>" in delivered


def test_task_stop_kills_a_long_child(workdir: Path, tether_home: Path) -> None:
    check = (
        "kill -0 $(cat child.pid) 2>/dev/null && echo alive > after.txt || echo gone > after.txt"
    )
    parent_script: list[dict[str, Any]] = [
        {"tool_calls": [agent_call("run something long")]},
        {"tool_calls": [wait_for_file("child.pid")]},
        {"tool_calls": [{"name": "TaskStop", "arguments": {"task_id": "task_1"}}]},
        {
            "tool_calls": [
                bash(check),
                {
                    "name": "TaskOutput",
                    "arguments": {"task_id": "task_1", "block": False, "timeout": 0},
                },
            ]
        },
        {"text": "stopped it"},
    ]
    with (
        FakeProvider(parent_script) as parent,
        FakeProvider([{"tool_calls": [LONG_CHILD]}]) as child,
    ):
        started = time.monotonic()
        run = run_tether(
            ["-p", "stop", "--model", MODEL, "--yolo", "--output-format", "stream-json"],
            env=env_for(parent, child),
            cwd=workdir,
            timeout=90,
        )
    assert run.code == 0, run.stderr
    assert time.monotonic() - started < 30  # not the child's 60 s sleep
    returns = [e["tool_return"] for e in run.of_type("message", "tool_return_message")]
    assert "Stopped task task_1." in returns
    assert any(r.startswith("Task task_1 status: interrupted") for r in returns)
    assert (workdir / "after.txt").read_text() == "gone\n"  # dead before the parent went on
    pids = child_pids(tether_home)
    assert (
        len(pids) == 1
        and not _alive(pids[0])
        and not _alive(int((workdir / "child.pid").read_text()))
    )


def test_a_parent_killed_with_sigkill_leaves_no_running_child(
    workdir: Path, tether_home: Path
) -> None:
    parent_script: list[dict[str, Any]] = [
        {"tool_calls": [agent_call("run something long")]},
        {
            "tool_calls": [
                {
                    "name": "TaskOutput",
                    "arguments": {"task_id": "task_1", "block": True, "timeout": 120000},
                }
            ]
        },
        {"text": "after the restart"},
    ]
    with (
        FakeProvider(parent_script) as parent,
        FakeProvider([{"tool_calls": [LONG_CHILD]}]) as child,
    ):
        env = env_for(parent, child)
        proc = subprocess.Popen(
            [TETHER, "-p", "bg", "--model", MODEL, "--yolo", "--output-format", "stream-json"],
            env=env,
            cwd=workdir,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            assert proc.stdout is not None
            init = json.loads(proc.stdout.readline())
            pid_file = workdir / "child.pid"
            deadline = time.monotonic() + 60
            while (
                not (pid_file.exists() and pid_file.read_text().strip())
                and time.monotonic() < deadline
            ):
                time.sleep(0.05)
            grandchild = int(pid_file.read_text())
            children = child_pids(tether_home)
            assert children and all(_alive(p) for p in [*children, grandchild])
            proc.send_signal(signal.SIGKILL)
            proc.wait(timeout=10)
        finally:
            if proc.poll() is None:
                proc.kill()
            proc.communicate()
        assert wait_dead([*children, grandchild]) == []  # PR_SET_PDEATHSIG took the child down
        restart = run_tether(
            [
                "-p",
                "restarted",
                "--conv",
                init["conversation_id"],
                "--output-format",
                "stream-json",
            ],
            env=env,
            cwd=workdir,
            timeout=60,
        )
        delivered = last_user_text(parent.requests[-1])
    assert restart.code == 0, restart.stderr
    assert "<task-id>task_1</task-id><status>interrupted</status>" in delivered
    assert "the parent process ended before the subagent finished" in delivered
    assert [r["status"] for r in task_log(tether_home) if r["event"] == "ended"] == ["interrupted"]


# --- the child stream and the running limit, with real stand-in child processes ---------------

FLAKY_CHILD = textwrap.dedent("""
    import json, os, sys
    marker = os.environ["FLAKY_MARKER"]
    sys.stdin.read()
    print(json.dumps({"type": "system", "subtype": "init", "agent_id": "agent-x", "conversation_id": "default"}))
    attempts = int(open(marker).read()) if os.path.exists(marker) else 0
    open(marker, "w").write(str(attempts + 1))
    if attempts < int(os.environ["FLAKY_TRUNCATIONS"]):
        sys.stdout.write('{"type": "message", "message_type": "assistant_mess')  # cut mid-line
        sys.stdout.flush()
        sys.stderr.write("Traceback: killed mid-stream\\n")
        os._exit(1)
    print(json.dumps({"type": "result", "subtype": "success", "result": "whole report",
                      "usage": {"total_tokens": 7}}))
""")

KIND = SubagentType("general-purpose", "", ("Bash",), "system")


def stand_in(tmp_path: Path, command: list[str], log: bool = False) -> Subagents:
    scope = ParentScope("agent-parent", "default", MODEL, tmp_path)
    return Subagents(
        scope,
        {KIND.name: KIND},
        tmp_path / "scratch",
        command=command,
        task_log=tmp_path / "tasks.jsonl" if log else None,
    )


@pytest.mark.parametrize(
    ("truncations", "report", "attempts"), [(1, "whole report", 2), (2, "after one retry", 2)]
)
def test_a_truncated_child_stream_is_retried_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, truncations: int, report: str, attempts: int
) -> None:
    script = tmp_path / "flaky_child.py"
    script.write_text(FLAKY_CHILD)
    monkeypatch.setenv("FLAKY_MARKER", str(tmp_path / "attempts"))
    monkeypatch.setenv("FLAKY_TRUNCATIONS", str(truncations))
    subagents = stand_in(tmp_path, [sys.executable, str(script)])
    args = {
        "description": "d",
        "prompt": "p",
        "subagent_type": KIND.name,
        "run_in_background": False,
    }
    result = asyncio.run(subagents.launch(args, asyncio.Event()))
    task = subagents.get("task_1")
    assert task is not None and len(task.pids) == attempts
    assert (tmp_path / "attempts").read_text() == str(attempts)
    assert report in result.output and result.is_error == (truncations == 2)


def test_at_most_32_children_run_and_stop_all_leaves_none(tmp_path: Path) -> None:
    subagents = stand_in(tmp_path, ["/bin/sh", "-c", "exec sleep 60"], log=True)
    args = {"description": "d", "prompt": "p", "subagent_type": KIND.name}

    async def scenario() -> tuple[list[Any], Any, list[int]]:
        started = [await subagents.launch(args, asyncio.Event()) for _ in range(MAX_RUNNING)]
        deadline = time.monotonic() + 20
        while (
            sum(len(t.pids) for t in subagents.tasks()) < MAX_RUNNING
            and time.monotonic() < deadline
        ):
            await asyncio.sleep(0.02)
        refused = await subagents.launch(args, asyncio.Event())
        pids = [p for t in subagents.tasks() for p in t.pids]
        await subagents.stop_all()
        return started, refused, pids

    started, refused, pids = asyncio.run(scenario())
    assert all(not r.is_error for r in started) and len(pids) == MAX_RUNNING
    assert refused.is_error and "Too many subagents" in refused.output
    assert wait_dead(pids, 5) == []
    log = [json.loads(line) for line in (tmp_path / "tasks.jsonl").read_text().splitlines()]
    ended = [r for r in log if r["event"] == "ended"]
    assert len(ended) == MAX_RUNNING and {r["status"] for r in ended} == {"interrupted"}
    assert not any(r["delivered"] for r in ended)  # waiting for the conversation's next turn
    assert len(stand_in(tmp_path, ["true"], log=True).take_notifications()) == MAX_RUNNING


# --- the parent's sandbox binds the child --------------------------------------------------------


@pytest.fixture
def bwrap_available() -> None:
    need_bwrap(seccomp=True)


@pytest.mark.usefixtures("bwrap_available")
def test_fs_sandbox_of_the_parent_confines_the_childs_shell(workdir: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside.txt"
    script: list[dict[str, Any]] = [
        {"tool_calls": [agent_call("write two files", background=False)]},
        {"text": "parent done"},
    ]
    child_script: list[dict[str, Any]] = [
        {"tool_calls": [bash(f"touch {outside}"), bash("touch inside.txt")]},
        {"text": "child done"},
    ]
    with FakeProvider(script) as parent, FakeProvider(child_script) as child:
        run = run_tether(
            ["-p", "x", "--model", MODEL, "--yolo", "--output-format", "stream-json"],
            env=env_for(parent, child, {"TETHER_FS_SANDBOX": "1"}),
            cwd=workdir,
            timeout=90,
        )
        child_second = json.dumps(child.requests[1]["body"])
    assert run.code == 0, run.stderr
    assert not outside.exists() and (workdir / "inside.txt").exists()
    assert "Read-only file system" in child_second or "Permission denied" in child_second
