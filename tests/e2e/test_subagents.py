"""End to end: the Agent (Task) tool runs a real child `tether` against the same fake provider."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tests.e2e.support import run_tether, tether_env
from tether.testing.fake_provider import FakeProvider

MODEL = "anthropic/claude-test"




def agent_call(prompt: str, background: bool, kind: str = "general-purpose") -> dict[str, Any]:
    return {"name": "Agent", "arguments": {"description": "delegate", "prompt": prompt,
                                           "subagent_type": kind, "run_in_background": background}}


def test_foreground_subagent_runs_a_child_and_reports(workdir: Path, tether_home: Path) -> None:
    script = [
        {"tool_calls": [agent_call("write child.txt", background=False)]},  # parent step 1
        {"tool_calls": [{"name": "Bash", "arguments": {"command": "echo by-child > child.txt",  # child step 1
                                                       "description": "write"}}]},
        {"text": "child wrote child.txt"},  # child step 2 (its report)
        {"text": "parent done"},  # parent step 2
    ]
    with FakeProvider(script) as fake:
        run = run_tether(["-p", "delegate", "--model", MODEL, "--yolo", "--output-format", "stream-json"],
                         env=tether_env(fake.url, MODEL), cwd=workdir, timeout=90)
        child_request = fake.requests[1]["body"]
        assert fake.violations == []
    assert run.code == 0, run.stderr
    assert (workdir / "child.txt").read_text() == "by-child\n"
    ret = run.of_type("message", "tool_return_message")[0]
    assert ret["status"] == "success", ret
    head = ret["tool_return"].splitlines()[0]
    assert head.startswith("subagent_type=general-purpose, subagent_id=task_1, agent_id=agent-local-")
    assert head.endswith("status=completed") and "child wrote child.txt" in ret["tool_return"]
    assert "Output file:" in ret["tool_return"]
    child_tools = {t["name"] for t in child_request["tools"]}
    assert "Bash" in child_tools and "Agent" not in child_tools  # the type's tool list binds the child
    assert "delegated task for a parent agent" in json.dumps(child_request["system"])
    agents = json.loads(run_tether(["agents", "list"], env=tether_env("http://127.0.0.1:9", MODEL), cwd=workdir).stdout)
    child = [a for a in agents if "type:general-purpose" in a["tags"]]
    assert len(child) == 1 and any(t.startswith("parent:agent-local-") for t in child[0]["tags"])


def test_background_subagent_then_task_output(workdir: Path) -> None:
    # The child talks to its own fake (via the Agent call's model), so the two scripts cannot race.
    call = agent_call("say hi", background=True)
    call["arguments"]["model"] = "openai-chat/child-model"
    parent_script = [
        {"tool_calls": [call]},
        {"tool_calls": [{"name": "TaskOutput", "arguments": {"task_id": "task_1", "block": True, "timeout": 20000}}]},
        {"text": "parent saw it"},
    ]
    with FakeProvider(parent_script) as parent, FakeProvider([{"text": "hi from the child"}]) as child:
        env = tether_env(parent.url, MODEL, {"OPENAI_BASE_URL": child.url + "/v1", "OPENAI_API_KEY": "sk-child"})
        run = run_tether(["-p", "bg", "--model", MODEL, "--yolo", "--output-format", "stream-json"],
                         env=env, cwd=workdir, timeout=90)
        assert child.requests[0]["body"]["model"] == "child-model"
    assert run.code == 0, run.stderr
    started, output = run.of_type("message", "tool_return_message")
    assert started["tool_return"].startswith("Task running in background with task ID: task_1")
    assert "completed" in output["tool_return"] and "hi from the child" in output["tool_return"]
    assert run.events[-1]["result"] == "parent saw it"


def test_disallowed_tools_bind_the_child(workdir: Path) -> None:
    script = [
        {"tool_calls": [agent_call("try the shell", background=False)]},
        {"tool_calls": [{"name": "Bash", "arguments": {"command": "touch forbidden", "description": "x"}}]},
        {"text": "could not"},
        {"text": "ok"},
    ]
    with FakeProvider(script) as fake:
        run = run_tether(["-p", "x", "--model", MODEL, "--yolo", "--disallowedTools", "Bash",
                          "--output-format", "stream-json"], env=tether_env(fake.url, MODEL), cwd=workdir, timeout=90)
        child_second = json.dumps(fake.requests[2]["body"])
    assert run.code == 0, run.stderr
    assert not (workdir / "forbidden").exists()
    assert "Permission denied by rule: Bash" in child_second


def test_parent_hooks_fire_for_child_tool_calls_and_subagent_stop(workdir: Path, tether_home: Path) -> None:
    tether_home.mkdir(parents=True, exist_ok=True)
    (tether_home / "settings.json").write_text(json.dumps({"hooks": {
        "PreToolUse": [{"matcher": "Bash", "hooks": [{"type": "command", "command": "echo 'no shell' >&2; exit 2"}]}],
        "SubagentStop": [{"hooks": [{"type": "command", "command": "cat > subagent-stop.json"}]}],
    }}))
    script = [
        {"tool_calls": [agent_call("use the shell", background=False)]},
        {"tool_calls": [{"name": "Bash", "arguments": {"command": "touch from-child", "description": "x"}}]},
        {"text": "blocked"},
        {"text": "ok"},
    ]
    with FakeProvider(script) as fake:
        run = run_tether(["-p", "x", "--model", MODEL, "--yolo", "--output-format", "stream-json"],
                         env=tether_env(fake.url, MODEL), cwd=workdir, timeout=90)
        child_second = json.dumps(fake.requests[2]["body"])
    assert run.code == 0, run.stderr
    assert not (workdir / "from-child").exists() and "Tool execution blocked by hook" in child_second
    stop = json.loads((workdir / "subagent-stop.json").read_text())
    assert stop["event_type"] == "SubagentStop" and stop["subagent_type"] == "general-purpose"
    assert stop["subagent_id"] == "task_1" and stop["success"] is True


def test_interrupting_the_parent_stops_the_child_and_its_tools(workdir: Path) -> None:
    import signal
    import subprocess
    import time

    from tests.e2e.support import TETHER
    from tests.e2e.test_headless import _alive

    script = [
        {"tool_calls": [agent_call("run a long command", background=False)]},
        {"tool_calls": [{"name": "Bash", "arguments": {"command": "sleep 60 & echo $! > grandchild.pid; wait",
                                                       "description": "long"}}]},
    ]
    with FakeProvider(script) as fake:
        proc = subprocess.Popen([TETHER, "-p", "x", "--model", MODEL, "--yolo", "--output-format", "stream-json"],
                                env=tether_env(fake.url, MODEL), cwd=workdir, stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        pid_file = workdir / "grandchild.pid"
        deadline = time.monotonic() + 30
        while not (pid_file.exists() and pid_file.read_text().strip()) and time.monotonic() < deadline:
            time.sleep(0.05)
        grandchild = int(pid_file.read_text())
        proc.send_signal(signal.SIGINT)
        proc.communicate(timeout=30)
    assert proc.returncode == 130
    time.sleep(0.3)
    assert not _alive(grandchild)


def test_a_child_agent_never_becomes_the_projects_last_agent(workdir: Path) -> None:
    script = [{"tool_calls": [agent_call("hi", background=False)]}, {"text": "child"}, {"text": "parent"},
              {"text": "next run"}]
    with FakeProvider(script) as fake:
        env = tether_env(fake.url, MODEL)
        first = run_tether(["-p", "x", "--model", MODEL, "--yolo", "--output-format", "json"], env=env, cwd=workdir)
        second = run_tether(["-p", "y", "--output-format", "json"], env=env, cwd=workdir)
    assert first.code == 0 and second.code == 0, (first.stderr, second.stderr)
    assert json.loads(second.stdout)["agent_id"] == json.loads(first.stdout)["agent_id"]
