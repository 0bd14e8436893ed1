"""Attacks on hook matchers (issue 30.4): a user's PreToolUse guard with matcher `Bash` must keep
guarding when the model is an OpenAI one (`--toolset auto` gives it `exec_command`) or a Gemini
one (`run_shell_command`); an `Edit` guard must guard `apply_patch`. Matchers see the canonical
family name, the hook input keeps the real tool name. Each case runs the real `tether --yolo`
(nothing but the hook stands in the way) and is judged on disk: no MARKER, hook input recorded."""

from __future__ import annotations

import json
import shlex
from typing import Any

import pytest

from tests.e2e.support import run_tether, tether_env
from tests.security.support import MARKER, World, bash, tool
from tether.testing.fake_provider import FakeProvider

PATCH = f"*** Begin Patch\n*** Add File: {MARKER}.txt\n+x\n*** End Patch\n"

# (model, --toolset, the call the model makes, the hook matcher, the tool name the hook must see)
GUARDED = [
    ("openai/gpt-test", "auto", tool("exec_command", cmd=f"touch {MARKER}", description="x"),
     "Bash", "exec_command"),
    ("openai/gpt-test", "codex_snake", tool("exec_command", cmd=f"touch {MARKER}", description="x"),
     "Bash", "exec_command"),
    ("anthropic/claude-test", "gemini", tool("run_shell_command", command=f"touch {MARKER}"),
     "Bash", "run_shell_command"),
    ("anthropic/claude-test", "default", bash(f"touch {MARKER}"), "Bash", "Bash"),
    ("openai/gpt-test", "auto", tool("exec_command", cmd=f"touch {MARKER}", description="x"),
     "Bash|Read", "exec_command"),
    ("openai/gpt-test", "auto", tool("ApplyPatch", input=PATCH), "Edit|Write", "ApplyPatch"),
    ("openai/gpt-test", "codex_snake", tool("apply_patch", input=PATCH), "Edit", "apply_patch"),
    ("anthropic/claude-test", "gemini",
     tool("write_file", file_path=f"{MARKER}.txt", content="x"), "Write", "write_file"),
]


def openai_env(world: World, url: str) -> dict[str, str]:
    return tether_env(url, "openai/gpt-test", {"HOME": str(world.home), "TETHER_HOME": str(world.tether_home)})


def guard(world: World, matcher: str, event: str = "PreToolUse") -> dict[str, Any]:
    """A guard that records its input and blocks (exit 2)."""
    seen = world.outside / "hook-input.json"
    command = f"cat > {shlex.quote(str(seen))}; echo 'blocked by the guard' >&2; exit 2"
    return {"hooks": {event: [{"matcher": matcher, "hooks": [{"type": "command", "command": command}]}]}}


@pytest.mark.parametrize(("model", "toolset", "call", "matcher", "real_name"), GUARDED,
                         ids=[f"{g[1]}-{g[2]['name']}-{g[3]}" for g in GUARDED])
def test_a_family_matcher_guards_every_toolset(world: World, model: str, toolset: str,
                                               call: dict[str, Any], matcher: str, real_name: str) -> None:
    (world.tether_home / "settings.json").write_text(json.dumps(guard(world, matcher)))
    with FakeProvider([{"tool_calls": [call]}, {"text": "done"}]) as fake:
        env = tether_env(fake.url, model, {"HOME": str(world.home), "TETHER_HOME": str(world.tether_home)})
        run = run_tether(["-p", "go", "--model", model, "--output-format", "stream-json", "--yolo",
                          "--toolset", toolset], env=env, cwd=world.project, timeout=60)
    assert run.code == 0, run.stderr
    outputs = [str(e.get("tool_return")) for e in run.events if e.get("message_type") == "tool_return_message"]
    assert not world.effects(), outputs
    assert any("blocked by the guard" in o for o in outputs), outputs
    seen = json.loads((world.outside / "hook-input.json").read_text())
    assert seen["tool_name"] == real_name  # the hook still learns what really ran


def test_a_matcher_for_another_family_does_not_fire(world: World) -> None:
    """Control: a `Read` guard does not block a shell call, whichever toolset."""
    (world.tether_home / "settings.json").write_text(json.dumps(guard(world, "Read")))
    call = tool("exec_command", cmd=f"touch {MARKER}", description="x")
    with FakeProvider([{"tool_calls": [call]}, {"text": "done"}]) as fake:
        run = run_tether(["-p", "go", "--model", "openai/gpt-test", "--output-format", "stream-json",
                          "--yolo"], env=openai_env(world, fake.url), cwd=world.project, timeout=60)
    assert run.code == 0, run.stderr
    assert world.effects() and not (world.outside / "hook-input.json").exists()


def test_a_post_tool_use_hook_sees_the_shell_family(world: World) -> None:
    """PostToolUse `Bash` hooks (formatters, loggers) run after exec_command too."""
    seen = world.outside / "post-input.json"
    hooks = {"hooks": {"PostToolUse": [{"matcher": "Bash", "hooks": [
        {"type": "command", "command": f"cat > {shlex.quote(str(seen))}"}]}]}}
    (world.tether_home / "settings.json").write_text(json.dumps(hooks))
    call = tool("exec_command", cmd="echo hi", description="x")
    with FakeProvider([{"tool_calls": [call]}, {"text": "done"}]) as fake:
        run = run_tether(["-p", "go", "--model", "openai/gpt-test", "--output-format", "stream-json",
                          "--yolo"], env=openai_env(world, fake.url), cwd=world.project, timeout=60)
    assert run.code == 0, run.stderr
    assert json.loads(seen.read_text())["tool_name"] == "exec_command"
