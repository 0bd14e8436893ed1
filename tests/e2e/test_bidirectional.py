"""End to end: a client driving `tether --input-format stream-json` over pipes, as the SDK does."""

from __future__ import annotations

import json
import os
import queue
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

from tests.e2e.support import TETHER, tether_env
from tether.testing.fake_provider import FakeProvider

MODEL = "anthropic/claude-test"


class Client:
    """A stream-json peer: writes lines to tether's stdin, reads its stdout lines."""

    def __init__(self, url: str, cwd: Path, *extra: str, env_extra: dict[str, str] | None = None) -> None:
        self.proc = subprocess.Popen(
            [TETHER, "--input-format", "stream-json", "--output-format", "stream-json", "-m", MODEL, *extra],
            env=tether_env(url, MODEL, env_extra), cwd=cwd, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE, text=True,
        )
        self.lines: queue.Queue[dict[str, Any]] = queue.Queue()
        self.seen: list[dict[str, Any]] = []
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.strip():
                self.lines.put(json.loads(line))

    def send(self, obj: dict[str, Any] | str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write((obj if isinstance(obj, str) else json.dumps(obj)) + "\n")
        self.proc.stdin.flush()

    def user(self, text: str) -> None:
        self.send({"type": "user", "message": {"role": "user", "content": text}})

    def wait_for(self, pred: Any, timeout: float = 20) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                event = self.lines.get(timeout=0.1)
            except queue.Empty:
                continue
            self.seen.append(event)
            if pred(event):
                return event
        raise AssertionError(f"timed out; saw {[e.get('type') + '/' + str(e.get('subtype') or e.get('message_type')) for e in self.seen]}")

    def result(self) -> dict[str, Any]:
        return self.wait_for(lambda e: e["type"] == "result")

    def close(self) -> int:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        code = self.proc.wait(timeout=20)
        assert self.proc.stdout is not None and self.proc.stderr is not None
        self.proc.stderr.close()
        self.proc.stdout.close()
        return code


def bash(command: str) -> dict[str, Any]:
    return {"name": "Bash", "arguments": {"command": command, "description": "test"}}




def is_control(subtype: str) -> Any:
    return lambda e: e["type"] == "control_request" and e["request"]["subtype"] == subtype


def test_initialize_then_text_turn_then_eof(workdir: Path) -> None:
    with FakeProvider([{"text": "hello client"}]) as fake:
        c = Client(fake.url, workdir)
        init = c.wait_for(lambda e: e["type"] == "system")
        assert init["subtype"] == "init" and isinstance(init["tools"], list)
        c.send({"type": "control_request", "request_id": "init_1", "request": {"subtype": "initialize"}})
        resp = c.wait_for(lambda e: e["type"] == "control_response")
        assert resp["response"]["subtype"] == "success" and resp["response"]["request_id"] == "init_1"
        assert resp["response"]["response"]["agent_id"] == init["agent_id"]
        c.user("hi")
        result = c.result()
        assert result["subtype"] == "success" and result["result"] == "hello client"
        assert any(e.get("message_type") == "assistant_message" for e in c.seen)
        assert c.close() == 0


def test_can_use_tool_allow_with_updated_input(workdir: Path) -> None:
    with FakeProvider([{"tool_calls": [bash("echo original > a.txt")]}, {"text": "done"}]) as fake:
        c = Client(fake.url, workdir)
        c.user("run it")
        req = c.wait_for(is_control("can_use_tool"))
        call_id = req["request"]["tool_call_id"]
        assert req["request_id"] == f"perm-{call_id}" and req["request"]["tool_name"] == "Bash"
        assert req["request"]["input"]["command"] == "echo original > a.txt"
        c.send({"type": "control_response", "response": {"subtype": "success", "request_id": req["request_id"],
                "response": {"behavior": "allow", "updatedInput": {"command": "echo rewritten > b.txt", "description": "x"}}}})
        result = c.result()
        assert c.close() == 0
    assert result["subtype"] == "success" and result["result"] == "done"
    assert (workdir / "b.txt").read_text() == "rewritten\n" and not (workdir / "a.txt").exists()


def test_can_use_tool_write_has_diff_and_deny_with_interrupt(workdir: Path) -> None:
    (workdir / "f.txt").write_text("one\ntwo\n")
    call = {"name": "Edit", "arguments": {"file_path": "f.txt", "old_string": "two", "new_string": "TWO"}}
    with FakeProvider([{"tool_calls": [call]}, {"text": "never reached"}]) as fake:
        c = Client(fake.url, workdir)
        c.user("edit")
        req = c.wait_for(is_control("can_use_tool"))
        diff = req["request"]["diffs"][0]
        assert diff["mode"] == "advanced" and diff["fileName"].endswith("f.txt")
        kinds = [(line["type"], line["content"]) for line in diff["hunks"][0]["lines"]]
        assert ("remove", "two") in kinds and ("add", "TWO") in kinds
        c.send({"type": "control_response", "response": {"subtype": "success", "request_id": req["request_id"],
                "response": {"behavior": "deny", "message": "not now", "interrupt": True}}})
        result = c.result()
        assert len(fake.requests) == 1
        assert c.close() == 0
    assert result["subtype"] == "interrupted"
    assert (workdir / "f.txt").read_text() == "one\ntwo\n"


def test_external_tool_registered_and_executed_by_client(workdir: Path) -> None:
    call = {"name": "lookup", "arguments": {"q": "answer"}}
    with FakeProvider([{"tool_calls": [call]}, {"text": "the answer is 42"}]) as fake:
        c = Client(fake.url, workdir)
        c.send({"type": "control_request", "request_id": "reg_1", "request": {"subtype": "register_external_tools",
                "tools": [{"name": "lookup", "description": "look a thing up",
                           "parameters": {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]}}]}})
        assert c.wait_for(lambda e: e["type"] == "control_response")["response"]["response"] == {"registered": 1}
        c.user("look it up")
        req = c.wait_for(is_control("execute_external_tool"))
        assert req["request_id"].startswith("ext-") and req["request"]["input"] == {"q": "answer"}
        c.send({"type": "control_response", "response": {"subtype": "external_tool_result", "request_id": req["request_id"],
                "tool_call_id": req["request"]["tool_call_id"], "content": [{"type": "text", "text": "42"}], "is_error": False}})
        result = c.result()
        tools_sent = [t["name"] for t in fake.requests[0]["body"]["tools"]]
        second = json.dumps(fake.requests[1]["body"])
        assert c.close() == 0
    assert "lookup" in tools_sent and "42" in second and result["subtype"] == "success"


def test_interrupt_during_long_bash_kills_group_and_next_turn_works(workdir: Path) -> None:
    script = [{"tool_calls": [bash("sleep 60 & echo $! > child.pid; wait")]}, {"text": "second turn ok"}]
    with FakeProvider(script) as fake:
        c = Client(fake.url, workdir, "--yolo")
        c.user("go")
        pid_file = workdir / "child.pid"
        deadline = time.monotonic() + 20
        while not (pid_file.exists() and pid_file.read_text().strip()) and time.monotonic() < deadline:
            time.sleep(0.05)
        child = int(pid_file.read_text())
        c.send({"type": "control_request", "request_id": "int_1", "request": {"subtype": "interrupt"}})
        result = c.result()
        assert result["subtype"] == "interrupted"
        time.sleep(0.2)
        assert not _alive(child)
        c.user("again")
        second = c.result()
        assert second["subtype"] == "success" and second["result"] == "second turn ok"
        assert fake.violations == []  # the interrupted call was answered before the next send
        assert c.close() == 0


def test_bad_json_and_unknown_requests_keep_the_session(workdir: Path) -> None:
    with FakeProvider([{"text": "still here"}]) as fake:
        c = Client(fake.url, workdir)
        c.send("{not json")
        err = c.wait_for(lambda e: e["type"] == "error")
        assert err["message"] == "Invalid JSON input"
        c.send({"type": "control_request", "request_id": "x1", "request": {"subtype": "frobnicate"}})
        resp = c.wait_for(lambda e: e["type"] == "control_response")
        assert resp["response"] == {"subtype": "error", "request_id": "x1", "error": "Unknown control request subtype: frobnicate"} or \
            resp["response"]["error"] == "Unknown control request subtype: frobnicate"
        c.send({"type": "bogus"})
        assert c.wait_for(lambda e: e["type"] == "error")["message"] == "Unknown message type: bogus"
        c.user("hello?")
        assert c.result()["result"] == "still here"
        assert c.close() == 0


def test_list_messages_and_bootstrap(workdir: Path) -> None:
    with FakeProvider([{"text": "first"}]) as fake:
        c = Client(fake.url, workdir)
        c.user("one")
        c.result()
        c.send({"type": "control_request", "request_id": "lm", "request": {"subtype": "list_messages", "limit": 1}})
        listed = c.wait_for(lambda e: e["type"] == "control_response")["response"]["response"]
        assert [m["role"] for m in listed["messages"]] == ["assistant"] and listed["has_more"] is True
        c.send({"type": "control_request", "request_id": "bs", "request": {"subtype": "bootstrap_session_state"}})
        boot = c.wait_for(lambda e: e["type"] == "control_response")["response"]["response"]
        assert [m["role"] for m in boot["messages"]] == ["assistant", "user"] and boot["has_pending_approval"] is False
        assert c.close() == 0


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except FileNotFoundError:
        return False


def test_background_subagent_notification_starts_a_turn(workdir: Path) -> None:
    call = {"name": "Agent", "arguments": {"description": "side job", "prompt": "say hi",
                                           "subagent_type": "general-purpose", "model": "openai-chat/child"}}
    parent_script = [{"tool_calls": [call]}, {"text": "launched"}, {"text": "got the notification"}]
    with FakeProvider(parent_script) as parent, FakeProvider([{"text": "child says hi", "delay_ms": 300}]) as child:
        env_extra = {"OPENAI_BASE_URL": child.url + "/v1", "OPENAI_API_KEY": "sk-child"}
        c = Client(parent.url, workdir, "--yolo", env_extra=env_extra)
        c.user("start a side job")
        assert c.result()["result"] == "launched"
        second = c.result()  # no user line: the notification itself started this turn
        assert second["result"] == "got the notification"
        body = json.dumps(parent.requests[-1]["body"])
        assert "<task-notification><task-id>task_1</task-id><status>completed</status>" in body
        assert "child says hi" in body
        assert c.close() == 0


def allow(req: dict[str, Any], **extra: Any) -> dict[str, Any]:
    return {"type": "control_response", "response": {"subtype": "success", "request_id": req["request_id"],
            "response": {"behavior": "allow", **extra}}}


def test_always_allow_adds_a_session_rule_and_updated_input_cannot_dodge_a_deny(
    workdir: Path, tether_home: Path
) -> None:
    tether_home.mkdir(parents=True, exist_ok=True)
    (tether_home / "settings.json").write_text(json.dumps({"permissions": {"deny": ["Bash(rm:*)"]}}))
    (workdir / "keep").write_text("x")
    script = [
        {"tool_calls": [bash("touch one")]}, {"text": "first"},
        {"tool_calls": [bash("touch two")]}, {"text": "second"},
        {"tool_calls": [bash("touch three")]}, {"text": "third"},
    ]
    with FakeProvider(script) as fake:
        c = Client(fake.url, workdir)
        c.user("one")
        req = c.wait_for(is_control("can_use_tool"))
        assert "touch one" in req["request"]["decision_reason"]
        rules = [{"toolName": "Bash", "ruleContent": "touch:*"}]
        c.send(allow(req, updatedPermissions=[{"type": "addRules", "behavior": "allow",
                                                "destination": "session", "rules": rules}]))
        assert c.result()["result"] == "first"
        c.user("two")  # the session rule admits it: no can_use_tool this time
        assert c.result()["result"] == "second"
        assert not [e for e in c.seen if is_control("can_use_tool")(e) and "two" in json.dumps(e)]
        c.user("three")  # still admitted by the session rule
        assert c.result()["result"] == "third"
        assert c.close() == 0
    assert all((workdir / n).exists() for n in ("one", "two", "three"))

    with FakeProvider([{"tool_calls": [bash("echo hi > x.txt")]}, {"text": "done"}]) as fake:
        c = Client(fake.url, workdir)
        c.user("go")
        req = c.wait_for(is_control("can_use_tool"))
        c.send(allow(req, updatedInput={"command": "rm keep", "description": "sneaky"}))
        result = c.result()
        returns = [e for e in c.seen if e.get("message_type") == "tool_return_message"]
        assert c.close() == 0
    assert result["subtype"] == "success" and (workdir / "keep").exists()
    assert "Permission denied by rule: Bash(rm:*)" in returns[0]["tool_return"]


def test_recover_pending_approvals_denies_what_a_killed_run_left_waiting(
    workdir: Path, tether_home: Path
) -> None:
    with FakeProvider([{"tool_calls": [bash("touch never")]}, {"text": "after recovery"}]) as fake:
        c = Client(fake.url, workdir)
        c.user("go")
        req = c.wait_for(is_control("can_use_tool"))
        conversation = req.get("conversation_id") or c.seen[0]["conversation_id"]
        c.proc.kill()  # dies while the approval is pending: the call stays open on disk
        c.proc.wait(timeout=10)
        assert c.proc.stdin is not None and c.proc.stdout is not None and c.proc.stderr is not None
        for pipe in (c.proc.stdin, c.proc.stdout, c.proc.stderr):
            pipe.close()

        d = Client(fake.url, workdir, "--conversation", conversation)
        d.send({"type": "control_request", "request_id": "rp", "request": {"subtype": "recover_pending_approvals"}})
        resp = d.wait_for(lambda e: e["type"] == "control_response")["response"]
        assert resp["subtype"] == "success", resp
        assert resp["response"] == {"recovered": True, "pending_approval": False, "approvals_processed": 1}
        d.send({"type": "control_request", "request_id": "rp2", "request": {"subtype": "recover_pending_approvals"}})
        again = d.wait_for(lambda e: e["type"] == "control_response" and e["response"]["request_id"] == "rp2")
        assert again["response"]["response"]["approvals_processed"] == 0
        d.user("continue")
        assert d.result()["result"] == "after recovery"
        assert d.close() == 0
        assert fake.violations == []  # the denial answered the call in what the model saw
    assert not (workdir / "never").exists()
