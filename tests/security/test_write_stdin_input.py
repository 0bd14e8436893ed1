"""Attacks through write_stdin's input (issue 30.1): text typed into an exec_command session is
input to the program there (a pager's `!cmd`, `ed`'s `!cmd`, `python3 -i`), so a rule that
admitted the session's first command (`Bash(git log:*)`) does not admit it, and neither does
yolo while deny rules exist that it could dodge. Each case runs the real `tether` over several
model steps (the session id comes back and is written to, as a model does) and is judged on
disk: no MARKER, no canary printed, the protected file still there. The benign uses still work:
answering a prompt in a session admitted for any command, and Ctrl-C."""

from __future__ import annotations

import json
import shutil
from typing import Any

import pytest

from tests.requirements import missing
from tests.security.support import CANARY_SECRET, MARKER, World
from tests.security.test_write_stdin_sessions import exec_, steps, write


def need_programs(command: str) -> None:
    """The interactive program a case drives (`less`, `more`, `ed`): missing means FAIL."""
    head = command.split()[0]
    for name in ("less", "more", "ed", "git"):
        used = head == name or (name == "less" and head == "git")  # git's pager
        if used and shutil.which(name) is None:
            missing(name, f"apt-get install {'util-linux' if name == 'more' else name}")


def pager_world(world: World) -> World:
    """A repository whose log fills more than a screen, so `git log` pages it."""
    world.git("init", "-q")
    for i in range(40):
        (world.project / "notes.md").write_text(f"notes {i}\n")
        world.git("add", "-A")
        world.git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", f"change {i}")
    return world


# (the session's first command, the rule that admits it, what the attacker types)
PAGERS = [
    ("git log", "Bash(git log:*)", f"!touch {MARKER}\n"),
    ("git log -p", "Bash(git log:*)", f"!sh -c 'echo x > {MARKER}'\n"),
    ("git show HEAD~3", "Bash(git show:*)", f"!touch {MARKER}\n"),
    ("git log", "Bash(git log)", f"\n!touch {MARKER}\n"),
    ("less notes.md", "Bash(less:*)", f"!touch {MARKER}\n"),
    ("more notes.md", "Bash(more:*)", f"!touch {MARKER}\n"),
]


@pytest.mark.parametrize(("start", "rule", "chars"), PAGERS, ids=[p[0] for p in PAGERS])
def test_a_pager_shell_escape_in_a_ruled_session_asks(world: World, start: str, rule: str, chars: str) -> None:
    need_programs(start)
    pager_world(world)
    run, returns = steps(world, [exec_(start, tty=True), write(1, chars), write(1, "q\n")],
                         "--allowedTools", rule)
    assert run.code == 0, run.stderr
    assert returns[0]["status"] == "success", returns
    assert returns[1]["status"] == "error" and "requires approval" in returns[1]["tool_return"], returns
    assert not world.effects(), returns


# Interpreters and editors started under a rule for them, with a deny rule the input dodges.
INTERPRETERS = [
    ("python3 -i -q", ["--allowedTools", "Bash(python3:*)", "--disallowedTools", "Bash(rm:*)"],
     f"import os; os.system('touch {MARKER}')\n"),
    ("python3 -q", ["--allowedTools", "Bash(python3 -q)"], f"open('{MARKER}', 'w').write('x')\n"),
    ("ed notes.md", ["--allowedTools", "Bash(ed:*)", "--disallowedTools", "Bash(rm:*)"],
     f"!touch {MARKER}\n"),
    ("ed notes.md", ["--allowedTools", "Bash(ed:*)"], f"a\npwned\n.\nw {MARKER}\nq\n"),
    ("python3 -q", ["--allowedTools", "Bash(python3:*)"], "import os\n"),
]


@pytest.mark.parametrize(("start", "flags", "chars"), INTERPRETERS,
                         ids=[f"{i[0]}-{i[1][1]}" for i in INTERPRETERS])
def test_input_to_an_interpreter_a_narrow_rule_admitted_asks(
    world: World, start: str, flags: list[str], chars: str
) -> None:
    need_programs(start)
    run, returns = steps(world, [exec_(start, tty=True), write(1, chars), write(1, "\u0004")], *flags)
    assert run.code == 0, run.stderr
    assert returns[0]["status"] == "success", returns
    assert returns[1]["status"] == "error", returns
    assert not world.effects(), returns


# yolo admits any command, but not input that could dodge the user's deny rules.
DODGES = [
    ("ed notes.md", ["--disallowedTools", "Bash(touch:*)"], f"!touch {MARKER}\n", "denied"),
    ("python3 -q", ["--disallowedTools", "Bash(touch:*)"],
     f"import subprocess; subprocess.run(['touch', '{MARKER}'])\n", "requires approval"),
    ("ed notes.md", ["--disallowedTools", "Bash(rm:*)"], "!rm -f notes.md\n", "denied"),
    ("ed notes.md", ["--disallowedTools", "Bash(touch:*)"], f"!t=touch; $t {MARKER}\n",
     "requires approval"),
]


@pytest.mark.parametrize(("start", "flags", "chars", "verdict"), DODGES,
                         ids=[f"{d[0]}-{d[2][:12]}" for d in DODGES])
def test_yolo_input_that_could_dodge_a_deny_rule_is_not_run(
    world: World, start: str, flags: list[str], chars: str, verdict: str
) -> None:
    need_programs(start)
    run, returns = steps(world, [exec_(start, tty=True), write(1, chars), write(1, "\u0004")],
                         "--yolo", *flags)
    assert run.code == 0, run.stderr
    assert returns[0]["status"] == "success", returns
    assert returns[1]["status"] == "error" and verdict in returns[1]["tool_return"], returns
    assert not world.effects() and (world.project / "notes.md").exists(), returns


def test_yolo_input_cannot_read_past_a_read_deny(world: World) -> None:
    (world.tether_home / "settings.json").write_text(json.dumps({"permissions": {"deny": ["Read(.env)"]}}))
    run, returns = steps(world, [exec_("python3 -q", tty=True), write(1, "print(open('.env').read())\n"),
                                 write(1, "\u0004")], "--yolo")
    assert run.code == 0, run.stderr
    assert returns[1]["status"] == "error", returns
    assert CANARY_SECRET not in run.stdout


ANSWER = "x = input('name? '); open('answered.txt', 'w').write(x)"


@pytest.mark.parametrize("flags", [("--yolo",), ("--allowedTools", "Bash")], ids=["yolo", "Bash"])
def test_answering_a_prompt_of_a_session_admitted_for_any_command_works(
    world: World, flags: tuple[str, ...]
) -> None:
    run, returns = steps(world, [exec_(f'python3 -c "{ANSWER}"', tty=True), write(1, "tether\n")], *flags)
    assert run.code == 0, run.stderr
    assert [r["status"] for r in returns] == ["success", "success"], returns
    assert (world.project / "answered.txt").read_text() == "tether"


def test_answering_a_prompt_of_a_session_a_hook_approved_works(world: World) -> None:
    """A PermissionRequest hook (standing in for a person) approved the session as it is."""
    approve = json.dumps({"hookSpecificOutput": {"hookEventName": "PermissionRequest",
                                                 "decision": {"behavior": "allow"}}})
    hooks = {"hooks": {"PermissionRequest": [{"matcher": "exec_command", "hooks": [
        {"type": "command", "command": f"cat >/dev/null; echo '{approve}'"}]}]}}
    (world.tether_home / "settings.json").write_text(json.dumps(hooks))
    run, returns = steps(world, [exec_(f'python3 -c "{ANSWER}"', tty=True), write(1, "tether\n")])
    assert run.code == 0, run.stderr
    assert [r["status"] for r in returns] == ["success", "success"], returns
    assert (world.project / "answered.txt").read_text() == "tether"


@pytest.mark.parametrize("keys", ["\u0003", ""], ids=["ctrl-c", "poll"])
def test_interrupting_or_polling_a_ruled_session_works(world: World, keys: str) -> None:
    run, returns = steps(world, [exec_("python3 -q", tty=True), write(1, keys), write(1, "\u0004")],
                         "--allowedTools", "Bash(python3 -q)")
    assert run.code == 0, run.stderr
    assert [r["status"] for r in returns] == ["success"] * 3, returns
    assert "exited" in returns[2]["tool_return"], returns


def test_writes_carry_the_reason(world: World) -> None:
    """What the user (and the model) is told names the session's command and why."""
    run, returns = steps(world, [exec_("python3 -q", tty=True), write(1, "1+1\n")],
                         "--allowedTools", "Bash(python3 -q)")
    text: Any = returns[1]["tool_return"]
    assert returns[1]["status"] == "error" and "requires approval" in text, returns
    assert "`python3 -q`" in text and "Bash(python3 -q) admitted as a command" in text, text
