"""End to end: every hook event the headless path runs, with real shell and Python hook scripts."""

from __future__ import annotations

import json
import sys
import textwrap
import time
from pathlib import Path
from typing import Any

from tests.e2e.support import Run, run_tether, tether_env
from tether.testing.fake_provider import FakeProvider

MODEL = "anthropic/claude-test"




def settings(home: Path, hooks: dict[str, Any], **extra: Any) -> None:
    home.mkdir(parents=True, exist_ok=True)
    (home / "settings.json").write_text(json.dumps({"hooks": hooks, **extra}))


def python_hook(folder: Path, name: str, body: str) -> str:
    """A Python hook script; returns the command that runs it."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.py"
    path.write_text("import json, os, sys\nevent = json.load(sys.stdin)\n" + textwrap.dedent(body))
    return f"{sys.executable} {path}"


def group(command: str, matcher: str | None = "Bash", **hook: Any) -> list[dict[str, Any]]:
    entry: dict[str, Any] = {"hooks": [{"type": "command", "command": command, **hook}]}
    if matcher is not None:
        entry["matcher"] = matcher
    return [entry]


def bash(command: str) -> dict[str, Any]:
    return {"name": "Bash", "arguments": {"command": command, "description": "test"}}


def run_with(workdir: Path, script: list[Any], *flags: str) -> tuple[Run, list[dict[str, Any]]]:
    with FakeProvider(script) as fake:
        run = run_tether(["-p", "go", "--model", MODEL, "--output-format", "stream-json", *flags],
                         env=tether_env(fake.url, MODEL), cwd=workdir, timeout=90)
        assert fake.violations == []
        return run, [r["body"] for r in fake.requests]


def returns(run: Run) -> list[dict[str, Any]]:
    return run.of_type("message", "tool_return_message")


def test_python_pre_tool_use_blocks_by_exit_2(workdir: Path, tether_home: Path, tmp_path: Path) -> None:
    cmd = python_hook(tmp_path / "hooks", "guard", """
        if event["tool_input"]["command"].startswith("rm "):
            print("rm is not allowed here", file=sys.stderr)
            sys.exit(2)
    """)
    settings(tether_home, {"PreToolUse": group(cmd)})
    (workdir / "keep").write_text("x")
    run, bodies = run_with(workdir, [{"tool_calls": [bash("rm keep")]}, {"tool_calls": [bash("echo fine")]},
                                     {"text": "ok"}], "--yolo")
    assert run.code == 0, run.stderr
    first, second = returns(run)
    assert first["status"] == "error" and first["tool_return"].endswith("rm is not allowed here")
    assert (workdir / "keep").exists() and second["status"] == "success" and second["tool_return"] == "fine"


def test_crashing_python_pre_tool_use_hook_never_lets_the_call_through(
    workdir: Path, tether_home: Path, tmp_path: Path
) -> None:
    cmd = python_hook(tmp_path / "hooks", "crash", "raise RuntimeError('hook bug')\n")
    settings(tether_home, {"PreToolUse": group(cmd)})
    run, _ = run_with(workdir, [{"tool_calls": [bash("touch made")]}, {"text": "ok"}], "--yolo")
    assert run.code == 0, run.stderr
    ret = returns(run)[0]
    assert ret["status"] == "error" and "Hook error" in ret["tool_return"] and "hook bug" in ret["tool_return"]
    assert not (workdir / "made").exists()


def test_rewritten_arguments_are_checked_again_and_a_deny_wins(
    workdir: Path, tether_home: Path, tmp_path: Path
) -> None:
    cmd = python_hook(tmp_path / "hooks", "rewrite", """
        new = {"command": event["tool_input"]["command"].replace("echo", "rm")}
        print(json.dumps({"hookSpecificOutput": {"updatedInput": new}}))
    """)
    settings(tether_home, {"PreToolUse": group(cmd)}, permissions={"deny": ["Bash(rm:*)"]})
    (workdir / "victim").write_text("x")
    run, _ = run_with(workdir, [{"tool_calls": [bash("echo victim")]}, {"text": "ok"}], "--yolo")
    assert run.code == 0, run.stderr
    ret = returns(run)[0]
    assert ret["status"] == "error" and "Permission denied" in ret["tool_return"]
    assert (workdir / "victim").exists()


def test_a_hanging_post_hook_is_killed_on_timeout_and_the_turn_goes_on(workdir: Path, tether_home: Path) -> None:
    settings(tether_home, {"PostToolUse": group("sleep 30", timeout=1)})
    started = time.monotonic()
    run, bodies = run_with(workdir, [{"tool_calls": [bash("echo ran")]}, {"text": "finished"}], "--yolo")
    assert time.monotonic() - started < 20
    assert run.code == 0, run.stderr
    ret = returns(run)[0]
    assert ret["tool_return"].startswith("ran") and "timed out after 1 s" in ret["tool_return"]
    assert run.events[-1]["result"] == "finished" and len(bodies) == 2


def test_post_tool_use_failure_gets_the_error(workdir: Path, tether_home: Path) -> None:
    settings(tether_home, {
        "PostToolUse": group("cat > post.json"),
        "PostToolUseFailure": group("cat > failure.json; echo \"$TETHER_HOOK_EVENT\" > failure-event.txt"),
    })
    run, _ = run_with(workdir, [{"tool_calls": [bash("exit 3")]}, {"text": "ok"}], "--yolo")
    assert run.code == 0, run.stderr
    failure = json.loads((workdir / "failure.json").read_text())
    assert failure["event_type"] == "PostToolUseFailure" and failure["tool_name"] == "Bash"
    assert "error_message" in failure and failure["tool_input"]["command"] == "exit 3"
    assert (workdir / "failure-event.txt").read_text() == "PostToolUseFailure\n"
    assert not (workdir / "post.json").exists()


def test_hook_environment_and_payload(workdir: Path, tether_home: Path, tmp_path: Path) -> None:
    cmd = python_hook(tmp_path / "hooks", "env", """
        keys = ("TETHER_HOOK_EVENT", "TETHER_WORKING_DIR", "USER_CWD", "TETHER_AGENT_ID", "AGENT_ID",
                "TETHER_CONVERSATION_ID")
        json.dump({"event": event, "env": {k: os.environ.get(k) for k in keys}, "cwd": os.getcwd()},
                  open("seen.json", "w"))
        print(json.dumps({"hookSpecificOutput": {"decision": {"behavior": "allow"}}}))
    """)
    settings(tether_home, {"PermissionRequest": group(cmd)})
    run, _ = run_with(workdir, [{"tool_calls": [bash("touch asked")]}, {"text": "ok"}])  # standard: asks
    assert run.code == 0, run.stderr
    seen = json.loads((workdir / "seen.json").read_text())
    agent = run.events[0]["agent_id"]
    assert seen["env"] == {"TETHER_HOOK_EVENT": "PermissionRequest", "TETHER_WORKING_DIR": str(workdir),
                           "USER_CWD": str(workdir), "TETHER_AGENT_ID": agent, "AGENT_ID": agent,
                           "TETHER_CONVERSATION_ID": None}
    assert seen["cwd"] == str(workdir) and seen["event"]["agent_id"] == agent
    assert seen["event"]["permission"] == {"type": "tool", "scope": "Bash"}
    assert (workdir / "asked").exists()  # the hook's JSON allow (issue 18: a bare exit 0 approves nothing)


def test_prompt_hook_asks_the_sessions_model_and_blocks(workdir: Path, tether_home: Path) -> None:
    settings(tether_home, {"PreToolUse": [{"matcher": "Bash", "hooks": [
        {"type": "prompt", "prompt": "Is this call safe? $ARGUMENTS"}]}]})
    script = [
        {"tool_calls": [bash("touch judged")]},
        {"text": '{"ok": false, "reason": "touching files is not allowed"}'},  # the hook's model call
        {"text": "understood"},
    ]
    run, bodies = run_with(workdir, script, "--yolo")
    assert run.code == 0, run.stderr
    judge = json.dumps(bodies[1])
    assert "Is this call safe?" in judge and "touch judged" in judge and bodies[1].get("tools") in (None, [])
    ret = returns(run)[0]
    assert ret["status"] == "error" and "[prompt hook]: touching files is not allowed" in ret["tool_return"]
    assert not (workdir / "judged").exists()


def test_prompt_hook_ok_allows_and_garbage_is_an_error(workdir: Path, tether_home: Path) -> None:
    settings(tether_home, {"PreToolUse": [{"matcher": "Bash", "hooks": [
        {"type": "prompt", "prompt": "judge", "timeout": 10}]}]})
    script = [
        {"tool_calls": [bash("touch first")]},
        {"text": 'Sure: {"ok": true}'},
        {"tool_calls": [bash("touch second")]},
        {"text": "I think it is fine"},
        {"text": "done"},
    ]
    run, bodies = run_with(workdir, script, "--yolo")
    assert run.code == 0, run.stderr
    assert (workdir / "first").exists() and not (workdir / "second").exists()
    assert "ARGUMENTS:" in json.dumps(bodies[1])  # no $ARGUMENTS: the event is appended
    assert "Hook error" in returns(run)[1]["tool_return"]


def test_headless_runs_the_session_events_but_not_notification(workdir: Path, tether_home: Path) -> None:
    settings(tether_home, {
        event: group(f"touch {event}.ran", matcher=None)
        for event in ("UserPromptSubmit", "SessionStart", "Stop", "SessionEnd", "Notification")
    })
    run, _ = run_with(workdir, [{"text": "ok"}])
    assert run.code == 0, run.stderr
    # the session events run headless as in the TUI (tests/e2e/test_session_hooks.py); nothing
    # raises Notification yet
    assert sorted(p.name for p in workdir.iterdir()) == [
        "SessionEnd.ran", "SessionStart.ran", "Stop.ran", "UserPromptSubmit.ran"]


def test_trusted_project_hooks_fire_for_a_subagents_tool_calls(workdir: Path, tether_home: Path) -> None:
    (workdir / ".tether").mkdir()
    (workdir / ".tether" / "settings.json").write_text(json.dumps({"hooks": {
        "PreToolUse": group("echo 'project says no' >&2; exit 2"),
    }}))
    env = tether_env("http://127.0.0.1:9", MODEL)
    assert run_tether(["trust"], env=env, cwd=workdir).code == 0
    agent_call = {"name": "Agent", "arguments": {"description": "d", "prompt": "shell", "subagent_type":
                                                 "general-purpose", "run_in_background": False}}
    script = [{"tool_calls": [agent_call]}, {"tool_calls": [bash("touch from-child")]},
              {"text": "child blocked"}, {"text": "parent done"}]
    run, bodies = run_with(workdir, script, "--yolo")
    assert run.code == 0, run.stderr
    assert not (workdir / "from-child").exists()
    assert "project says no" in json.dumps(bodies[2])  # the child's second request carries the block
