"""End to end: Claude Code hook scripts, as its documentation writes them, run unchanged.

Three scripts in the documentation's style (a rewrite, a deny by JSON with exit 0, a notifier)
plus each JSON decision Claude Code documents; effects are checked on disk and in what the
model was sent next, never only the verdict.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.support import run_tether, tether_env
from tether.testing.fake_provider import FakeProvider

MODEL = "anthropic/claude-test"

# The documentation's PreToolUse validator: exit 0, the decision in JSON.
DENY_RM = '''
import json, sys
data = json.load(sys.stdin)
command = data["tool_input"].get("command", "")
if data["hook_event_name"] == "PreToolUse" and command.startswith("rm "):
    print(json.dumps({"hookSpecificOutput": {
        "hookEventName": "PreToolUse",
        "permissionDecision": "deny",
        "permissionDecisionReason": "Destructive command blocked by hook",
    }}))
sys.exit(0)
'''

# The documentation's input rewrite: allow, with updatedInput.
REWRITE = '''
import json, sys
data = json.load(sys.stdin)
command = data["tool_input"].get("command", "")
if command.startswith("npm test"):
    print(json.dumps({"hookSpecificOutput": {
        "hookEventName": "PreToolUse",
        "permissionDecision": "allow",
        "permissionDecisionReason": "run the project's test wrapper instead",
        "updatedInput": {"command": "echo wrapped > rewritten.txt"},
    }}))
sys.exit(0)
'''

# A notifier: logs that permission was asked for, prints nothing, exits 0.
NOTIFY = '''
import json, sys
data = json.load(sys.stdin)
with open("notified.log", "a") as log:
    log.write(data["hook_event_name"] + " " + data["tool_name"] + " " + data["tool_use_id"] + "\\n")
'''


def script(tmp_path: Path, name: str, body: str) -> str:
    path = tmp_path / "hooks" / f"{name}.py"
    path.parent.mkdir(exist_ok=True)
    path.write_text(body)
    return f"{sys.executable} {path}"


def hooks(home: Path, config: dict[str, list[dict[str, Any]]]) -> None:
    home.mkdir(parents=True, exist_ok=True)
    (home / "settings.json").write_text(json.dumps({"hooks": config}))


def group(*commands: str, matcher: str = "Bash") -> list[dict[str, Any]]:
    return [{"matcher": matcher, "hooks": [{"type": "command", "command": c} for c in commands]}]


def echo(doc: dict[str, Any]) -> str:
    return f"echo '{json.dumps(doc)}'"


def bash(command: str, call_id: str | None = None) -> dict[str, Any]:
    call: dict[str, Any] = {"name": "Bash", "arguments": {"command": command, "description": "t"}}
    if call_id:
        call["id"] = call_id
    return call


def run_with(
    workdir: Path, calls: list[dict[str, Any]], *flags: str, later: Sequence[dict[str, Any]] = ()
) -> tuple[Any, list[str]]:
    """One step with `calls`, then one step per call of `later`, then a text reply."""
    steps = [{"tool_calls": calls}, *({"tool_calls": [c]} for c in later), {"text": "done"}]
    with FakeProvider(steps) as fake:
        run = run_tether(["-p", "go", "--model", MODEL, "--output-format", "stream-json", *flags],
                         env=tether_env(fake.url, MODEL), cwd=workdir)
        return run, [json.dumps(r["body"]) for r in fake.requests]


def returns(run: Any) -> list[dict[str, Any]]:
    return run.of_type("message", "tool_return_message")


def test_documented_scripts_block_the_right_call_and_rewrite_another(
    workdir: Path, tether_home: Path, tmp_path: Path
) -> None:
    (workdir / "keep").mkdir()
    hooks(tether_home, {"PreToolUse": group(script(tmp_path, "deny", DENY_RM),
                                            script(tmp_path, "rewrite", REWRITE))})
    run, bodies = run_with(workdir, [bash("rm -r keep"), bash("npm test"), bash("touch ran.txt")],
                           "--yolo")
    assert run.code == 0, run.stderr
    denied, rewritten, plain = returns(run)
    assert denied["status"] == "error" and "Destructive command blocked by hook" in denied["tool_return"]
    assert (workdir / "keep").is_dir()  # the deny held although the hook exited 0
    assert rewritten["status"] == "success" and (workdir / "rewritten.txt").read_text() == "wrapped\n"
    assert plain["status"] == "success" and (workdir / "ran.txt").exists()
    assert "Destructive command blocked by hook" in bodies[1]


def test_a_notifier_on_permission_request_approves_nothing(
    workdir: Path, tether_home: Path, tmp_path: Path
) -> None:
    hooks(tether_home, {"PermissionRequest": group(script(tmp_path, "notify", NOTIFY))})
    run, _ = run_with(workdir, [bash("touch asked.txt", "call-asked")])  # standard mode: Bash asks
    assert run.code == 0, run.stderr
    assert (workdir / "notified.log").read_text() == "PermissionRequest Bash call-asked\n"
    assert returns(run)[0]["status"] == "error" and not (workdir / "asked.txt").exists()


@pytest.mark.parametrize(
    ("output", "approved"),
    [
        ({"hookSpecificOutput": {"hookEventName": "PermissionRequest",
                                 "decision": {"behavior": "allow"}}}, True),
        ({"hookSpecificOutput": {"hookEventName": "PermissionRequest",
                                 "decision": {"behavior": "deny", "message": "not on Fridays"}}}, False),
        ({"hookSpecificOutput": {"decision": {"behavior": "allow",
                                              "updatedInput": {"command": "touch other.txt"}}}}, False),
        ({"hookSpecificOutput": {"decision": {"behavior": "maybe"}}}, False),
        ({"continue": False, "stopReason": "out of budget"}, False),
        ({"suppressOutput": True}, False),
        ({}, False),
    ],
)
def test_permission_request_json_decisions(
    output: dict[str, Any], approved: bool, workdir: Path, tether_home: Path
) -> None:
    hooks(tether_home, {"PermissionRequest": group(echo(output))})
    run, bodies = run_with(workdir, [bash("touch asked.txt")])
    assert run.code == 0, run.stderr
    assert (workdir / "asked.txt").exists() is approved
    assert not (workdir / "other.txt").exists()
    if "not on Fridays" in json.dumps(output):
        assert "not on Fridays" in returns(run)[0]["tool_return"] and "not on Fridays" in bodies[1]


@pytest.mark.parametrize(
    ("output", "reason"),
    [
        ({"decision": "block", "reason": "legacy block"}, "legacy block"),
        ({"hookSpecificOutput": {"permissionDecision": "ask",
                                 "additionalContext": "needs a human"}}, "needs a human"),
        ({"continue": False, "stopReason": "budget exhausted"}, "budget exhausted"),
        ({"hookSpecificOutput": {"permissionDecision": "nope"}}, "permissionDecision"),
        ('{"hookSpecificOutput": {"permissionDecision": "deny"', "does not parse"),
    ],
)
def test_pre_tool_use_json_that_does_not_allow_blocks(
    output: dict[str, Any] | str, reason: str, workdir: Path, tether_home: Path
) -> None:
    text = output if isinstance(output, str) else json.dumps(output)
    hooks(tether_home, {"PreToolUse": group(f"echo '{text}'")})
    run, _ = run_with(workdir, [bash("touch blocked.txt")], "--yolo")
    assert run.code == 0, run.stderr
    ret = returns(run)[0]
    assert ret["status"] == "error" and reason in ret["tool_return"]
    assert not (workdir / "blocked.txt").exists()


def test_continue_false_stops_every_later_tool_call(workdir: Path, tether_home: Path) -> None:
    stop = echo({"continue": False, "stopReason": "the user is away"})
    hooks(tether_home, {"PostToolUse": group(stop)})
    run, bodies = run_with(workdir, [bash("touch first.txt")], "--yolo", later=[bash("touch second.txt")])
    assert run.code == 0, run.stderr
    assert (workdir / "first.txt").exists() and not (workdir / "second.txt").exists()
    assert "the user is away" in returns(run)[1]["tool_return"]


def test_post_tool_use_block_and_context_reach_the_model(workdir: Path, tether_home: Path) -> None:
    block = echo({"decision": "block", "reason": "lint failed: fix it",
                  "hookSpecificOutput": {"hookEventName": "PostToolUse",
                                         "additionalContext": "style guide: PEP 8"}})
    hooks(tether_home, {"PostToolUse": group(block)})
    run, bodies = run_with(workdir, [bash("touch made.txt")], "--yolo")
    assert run.code == 0, run.stderr
    assert (workdir / "made.txt").exists()
    assert "lint failed: fix it" in bodies[1] and "style guide: PEP 8" in bodies[1]


def test_payload_has_claude_code_field_names(workdir: Path, tether_home: Path) -> None:
    hooks(tether_home, {"PreToolUse": group('cat > pre.json; echo "$CLAUDE_PROJECT_DIR" > dir.txt'),
                        "PostToolUse": group("cat > post.json")})
    run, _ = run_with(workdir, [bash("echo hi", "call-1")], "--yolo")
    assert run.code == 0, run.stderr
    pre = json.loads((workdir / "pre.json").read_text())
    assert (pre["hook_event_name"], pre["cwd"], pre["tool_use_id"]) == ("PreToolUse", str(workdir), "call-1")
    assert pre["tool_input"]["command"] == "echo hi"
    post = json.loads((workdir / "post.json").read_text())
    assert post["tool_response"]["output"] == "hi"
    assert (workdir / "dir.txt").read_text() == f"{workdir}\n"


def test_pre_tool_use_ask_goes_to_the_sdk_client(workdir: Path, tether_home: Path) -> None:
    from tests.e2e.test_bidirectional import Client, is_control
    from tether.testing.fake_provider import FakeProvider

    ask = {"hookSpecificOutput": {"permissionDecision": "ask", "additionalContext": "confirm it"}}
    hooks(tether_home, {"PreToolUse": group(f"echo '{json.dumps(ask)}'")})
    with FakeProvider([{"tool_calls": [bash("touch asked.txt")]}, {"text": "done"}]) as fake:
        c = Client(fake.url, workdir, "--yolo")  # the mode allows it; the hook still wants a yes
        c.user("go")
        req = c.wait_for(is_control("can_use_tool"))
        assert req["request"]["tool_name"] == "Bash"
        c.send({"type": "control_response", "response": {"subtype": "success",
                "request_id": req["request_id"], "response": {"behavior": "allow"}}})
        assert c.result()["subtype"] == "success"
        assert c.close() == 0
    assert (workdir / "asked.txt").exists()
