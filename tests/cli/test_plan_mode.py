"""Plan mode (`--permission-mode plan`, the SDK's `permissionMode: "plan"`): reads run, edits and
other commands are denied with a plan-mode reason, and ExitPlanMode hands over the plan."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from tests.e2e.support import TETHER, run_tether, tether_env
from tether.testing.fake_provider import FakeProvider

MODEL = "anthropic/claude-test"
PLAN = "1. add hello.txt\n2. say hello in it"


def call(name: str, **arguments: Any) -> dict[str, Any]:
    return {"name": name, "arguments": arguments}


EXPLORE = {"tool_calls": [call("Read", file_path="README.md"),
                          call("Write", file_path="hello.txt", content="hi"),
                          call("Bash", command="touch made-by-shell", description="t")]}


def test_headless_plan_mode_reads_denies_edits_and_prints_the_plan(workdir: Path, tether_home: Path) -> None:
    (workdir / "README.md").write_text("the readme\n")
    script = [EXPLORE, {"tool_calls": [call("ExitPlanMode", plan=PLAN)]}, {"text": "never sent"}]
    with FakeProvider(script) as fake:
        run = run_tether(["-p", "plan a greeting", "--model", MODEL, "--toolset", "default",
                          "--permission-mode", "plan", "--output-format", "stream-json"],
                         env=tether_env(fake.url, MODEL), cwd=workdir)
        assert len(fake.requests) == 2  # the run stops at the plan
    assert run.code == 0, run.stderr
    returns = {r["tool_call_id"]: r for r in run.of_type("message", "tool_return_message")}
    by_name = {c["tool_call"]["name"]: returns[c["tool_call"]["tool_call_id"]]
               for c in run.of_type("message", "tool_call_message")}
    assert by_name["Read"]["status"] == "success" and "the readme" in by_name["Read"]["tool_return"]
    for name in ("Write", "Bash"):
        assert by_name[name]["status"] == "error" and "plan mode" in by_name[name]["tool_return"]
    assert not (workdir / "hello.txt").exists() and not (workdir / "made-by-shell").exists()
    assert run.of_type("error") == []
    result = run.events[-1]
    assert result["type"] == "result" and result["subtype"] == "success" and result["result"] == PLAN


def test_headless_plan_text_output_is_the_plan(workdir: Path, tether_home: Path) -> None:
    with FakeProvider([{"tool_calls": [call("ExitPlanMode", plan=PLAN)]}]) as fake:
        run = run_tether(["-p", "plan", "--model", MODEL, "--permission-mode", "plan"],
                         env=tether_env(fake.url, MODEL), cwd=workdir)
    assert run.code == 0, run.stderr
    assert run.stdout == PLAN + "\n"


def test_sdk_plan_approved_through_can_use_tool_switches_the_mode_back(workdir: Path, tether_home: Path) -> None:
    script = [{"tool_calls": [call("Write", file_path="early.txt", content="x")]},
              {"tool_calls": [call("ExitPlanMode", plan=PLAN)]},
              {"tool_calls": [call("Write", file_path="hello.txt", content="hello")]},
              {"text": "done"}]
    with FakeProvider(script) as fake:
        proc = subprocess.Popen(
            [TETHER, "--input-format", "stream-json", "--output-format", "stream-json", "--model", MODEL,
             "--toolset", "default", "--permission-mode", "plan"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env=tether_env(fake.url, MODEL), cwd=workdir,
        )
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(json.dumps({"type": "user", "message": {"role": "user", "content": "plan it"}}) + "\n")
        proc.stdin.flush()
        asked: list[dict[str, Any]] = []
        events: list[dict[str, Any]] = []
        while not events or events[-1]["type"] != "result":
            event = json.loads(proc.stdout.readline())
            events.append(event)
            if event["type"] == "control_request" and event["request"]["subtype"] == "can_use_tool":
                asked.append(event["request"])
                answer = {"behavior": "allow"}
                proc.stdin.write(json.dumps({"type": "control_response", "response": {
                    "subtype": "success", "request_id": event["request_id"], "response": answer}}) + "\n")
                proc.stdin.flush()
        _out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert [a["tool_name"] for a in asked] == ["ExitPlanMode", "Write"]  # edits ask again after the plan
    assert asked[0]["input"]["plan"] == PLAN
    assert not (workdir / "early.txt").exists()
    assert (workdir / "hello.txt").read_text() == "hello"
    assert events[-1]["subtype"] == "success"


def test_sdk_set_permission_mode_plan_denies_edits(workdir: Path, tether_home: Path) -> None:
    script = [{"tool_calls": [call("Write", file_path="early.txt", content="x")]}, {"text": "planned"}]
    lines = [{"type": "control_request", "request_id": "m1",
              "request": {"subtype": "set_permission_mode", "mode": "plan"}},
             {"type": "control_request", "request_id": "m2",
              "request": {"subtype": "set_permission_mode", "mode": "sideways"}},
             {"type": "user", "message": {"role": "user", "content": "plan it"}}]
    with FakeProvider(script) as fake:
        proc = subprocess.Popen(
            [TETHER, "--input-format", "stream-json", "--output-format", "stream-json", "--model", MODEL,
             "--toolset", "default"],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
            env=tether_env(fake.url, MODEL), cwd=workdir,
        )
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write("".join(json.dumps(line) + "\n" for line in lines))
        proc.stdin.flush()
        events: list[dict[str, Any]] = []
        while not events or events[-1]["type"] != "result":  # stdin stays open until the turn ends
            events.append(json.loads(proc.stdout.readline()))
        _out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    responses = {e["response"]["request_id"]: e["response"] for e in events if e["type"] == "control_response"}
    assert responses["m1"]["subtype"] == "success" and responses["m1"]["response"]["mode"] == "plan"
    assert responses["m2"]["subtype"] == "error" and "sideways" in responses["m2"]["error"]
    assert not [e for e in events if e["type"] == "control_request"]  # denied outright, nothing asked
    ret = next(e for e in events if e.get("message_type") == "tool_return_message")
    assert ret["status"] == "error" and "plan mode" in ret["tool_return"]
    assert not (workdir / "early.txt").exists()
