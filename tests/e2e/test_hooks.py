"""End to end: hooks from settings around real tool calls of the real `tether` script."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from tests.e2e.support import run_tether, tether_env
from tether.testing.fake_provider import FakeProvider

MODEL = "anthropic/claude-test"




def write_user_hooks(home: Path, hooks: dict[str, Any]) -> None:
    home.mkdir(parents=True, exist_ok=True)
    (home / "settings.json").write_text(json.dumps({"hooks": hooks}))


def command_hook(command: str, matcher: str = "Bash", timeout: float | None = None) -> list[dict[str, Any]]:
    hook: dict[str, Any] = {"type": "command", "command": command}
    if timeout is not None:
        hook["timeout"] = timeout
    return [{"matcher": matcher, "hooks": [hook]}]


def bash(command: str) -> dict[str, Any]:
    return {"name": "Bash", "arguments": {"command": command, "description": "test"}}


def run_with(workdir: Path, script: list[dict[str, Any]], *flags: str) -> tuple[Any, list[dict[str, Any]]]:
    with FakeProvider(script) as fake:
        run = run_tether(["-p", "go", "--model", MODEL, "--output-format", "stream-json", *flags],
                         env=tether_env(fake.url, MODEL), cwd=workdir)
        return run, [r["body"] for r in fake.requests]


def test_pre_tool_use_block_feeds_stderr_back(workdir: Path, tether_home: Path) -> None:
    write_user_hooks(tether_home, {"PreToolUse": command_hook("echo 'no shell today' >&2; exit 2")})
    run, bodies = run_with(workdir, [{"tool_calls": [bash("touch made")]}, {"text": "ok"}], "--yolo")
    assert run.code == 0, run.stderr
    ret = run.of_type("message", "tool_return_message")[0]
    assert ret["status"] == "error"
    assert ret["tool_return"] == "Error: Tool execution blocked by hook. [echo 'no shell today' >&2; exit 2]: no shell today"
    assert not (workdir / "made").exists() and "no shell today" in json.dumps(bodies[1])


def test_crashing_pre_tool_use_hook_does_not_let_the_call_through(workdir: Path, tether_home: Path) -> None:
    write_user_hooks(tether_home, {"PreToolUse": command_hook("exit 1")})
    run, _ = run_with(workdir, [{"tool_calls": [bash("touch made")]}, {"text": "ok"}], "--yolo")
    ret = run.of_type("message", "tool_return_message")[0]
    assert ret["status"] == "error" and "Hook error" in ret["tool_return"]
    assert not (workdir / "made").exists()


def test_pre_tool_use_updated_input_rewrites_arguments(workdir: Path, tether_home: Path) -> None:
    out = json.dumps({"hookSpecificOutput": {"updatedInput": {"command": "echo rewritten > r.txt"}}})
    write_user_hooks(tether_home, {"PreToolUse": command_hook(f"echo '{out}'")})
    run, _ = run_with(workdir, [{"tool_calls": [bash("echo original > o.txt")]}, {"text": "ok"}], "--yolo")
    assert run.code == 0, run.stderr
    assert (workdir / "r.txt").read_text() == "rewritten\n" and not (workdir / "o.txt").exists()


def test_hook_stdin_and_env_and_post_tool_context(workdir: Path, tether_home: Path) -> None:
    ctx = json.dumps({"hookSpecificOutput": {"additionalContext": "remember the style guide"}})
    write_user_hooks(tether_home, {
        "PreToolUse": command_hook('cat > pre.json; echo "$TETHER_HOOK_EVENT" > event.txt'),
        "PostToolUse": command_hook(f"cat > post.json; echo '{ctx}'"),
    })
    run, bodies = run_with(workdir, [{"tool_calls": [bash("echo hi")]}, {"text": "ok"}], "--yolo")
    assert run.code == 0, run.stderr
    pre = json.loads((workdir / "pre.json").read_text())
    assert pre["event_type"] == "PreToolUse" and pre["tool_name"] == "Bash"
    assert pre["tool_input"]["command"] == "echo hi" and pre["working_directory"] == str(workdir)
    assert (workdir / "event.txt").read_text() == "PreToolUse\n"
    post = json.loads((workdir / "post.json").read_text())
    assert post["tool_result"] == {"status": "success", "output": "hi"}
    assert "remember the style guide" in json.dumps(bodies[1])


def test_permission_request_hook_allows_an_ask(workdir: Path, tether_home: Path) -> None:
    allow = json.dumps({"hookSpecificOutput": {"decision": {"behavior": "allow"}}})
    write_user_hooks(tether_home, {"PermissionRequest": command_hook(f"echo '{allow}'")})
    run, _ = run_with(workdir, [{"tool_calls": [bash("touch allowed-by-hook")]}, {"text": "ok"}])  # standard mode
    assert run.code == 0, run.stderr
    assert (workdir / "allowed-by-hook").exists()


def test_permission_request_hook_denies(workdir: Path, tether_home: Path) -> None:
    write_user_hooks(tether_home, {"PermissionRequest": command_hook("echo nope >&2; exit 2")})
    run, _ = run_with(workdir, [{"tool_calls": [bash("touch x")]}, {"text": "ok"}])
    ret = run.of_type("message", "tool_return_message")[0]
    assert ret["status"] == "error" and "nope" in ret["tool_return"] and not (workdir / "x").exists()


def test_hook_timeout_kills_its_process_group(workdir: Path, tether_home: Path) -> None:
    write_user_hooks(tether_home, {"PreToolUse": command_hook("sleep 30 & echo $! > hook-child.pid; wait", timeout=1)})
    started = time.monotonic()
    run, _ = run_with(workdir, [{"tool_calls": [bash("touch x")]}, {"text": "ok"}], "--yolo")
    assert time.monotonic() - started < 15
    ret = run.of_type("message", "tool_return_message")[0]
    assert "timed out" in ret["tool_return"] and not (workdir / "x").exists()
    child = int((workdir / "hook-child.pid").read_text())
    time.sleep(0.2)
    assert not _alive(child)


def test_malformed_hooks_in_settings_are_a_clear_error(workdir: Path, tether_home: Path) -> None:
    write_user_hooks(tether_home, {"PreToolUse": [{"matcher": "Bash", "hooks": [{"type": "command"}]}]})
    run, _ = run_with(workdir, [{"text": "never"}])
    assert run.code == 1 and "settings.json" in run.stderr and "hooks.PreToolUse[0].hooks[0]" in run.stderr


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        return Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"
    except FileNotFoundError:
        return False
