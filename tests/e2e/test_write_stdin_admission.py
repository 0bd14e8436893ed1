"""write_stdin through the real `tether` (issue 19, 30.1): a write to an exec_command session is
judged by how that session was admitted. A session admitted for any command (`Bash`, yolo) is
written to without asking (the effect lands on disk); one a narrow rule admitted asks; strict mode still asks (nobody answers headless: nothing is written); a
session started read-only by the auto-allow runs on, confined, and takes input without asking;
writing to a session that does not exist is an error. Checked on disk and in the tool returns."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.e2e.support import Run, run_tether, tether_env
from tests.requirements import need_bwrap
from tether.testing.fake_provider import FakeProvider

MODEL = "openai/gpt-test"  # codex toolset: exec_command + write_stdin
PYTHON = {"name": "exec_command", "arguments": {
    "cmd": "python3 -q", "description": "python", "tty": True, "yield_time_ms": 1500}}


def _write(sid: int, chars: str, wait_ms: int = 1500) -> dict[str, Any]:
    return {"name": "write_stdin", "arguments": {"session_id": sid, "chars": chars,
                                                  "yield_time_ms": wait_ms}}


def _run(workdir: Path, calls: list[dict[str, Any]], *flags: str) -> Run:
    script = [{"tool_calls": [c]} for c in calls] + [{"text": "done"}]
    with FakeProvider(script) as fake:
        run = run_tether(["-p", "go", "--model", MODEL, "--output-format", "stream-json", *flags],
                         env=tether_env(fake.url, MODEL), cwd=workdir, timeout=90)
        assert fake.violations == []
    assert run.code == 0, run.stderr
    return run


def _returns(run: Run) -> list[dict[str, Any]]:
    return run.of_type("message", "tool_return_message")


MAKE_FILE = "open('made-by-session.txt', 'w').write('from the session')\n"


@pytest.mark.parametrize("flags", [("--allowedTools", "Bash"), ("--yolo",)])
def test_a_session_admitted_for_any_command_is_written_to_without_asking(
    workdir: Path, flags: tuple[str, ...]
) -> None:
    run = _run(workdir, [PYTHON, _write(1, "print(6 * 7)\n"), _write(1, MAKE_FILE), _write(1, "exit()\n")],
               *flags)
    returns = _returns(run)
    assert [r["status"] for r in returns] == ["success"] * 4, returns
    assert "42" in returns[1]["tool_return"]
    assert (workdir / "made-by-session.txt").read_text() == "from the session"


def test_a_session_a_narrow_rule_admitted_asks_for_its_input(workdir: Path) -> None:
    """`Bash(python3 -q)` admits starting the interpreter, not the code typed into it (issue
    30.1): each write asks, and headless nobody answers."""
    run = _run(workdir, [PYTHON, _write(1, MAKE_FILE), _write(1, "\u0003")],
               "--allowedTools", "Bash(python3 -q)")
    returns = _returns(run)
    assert [r["status"] for r in returns] == ["success", "error", "success"], returns
    assert not (workdir / "made-by-session.txt").exists()


def test_strict_mode_still_asks_for_each_write(workdir: Path) -> None:
    run = _run(workdir, [PYTHON, _write(1, MAKE_FILE)],
               "--permission-mode", "strict", "--allowedTools", "Bash(python3 -q)")
    returns = _returns(run)
    assert returns[0]["status"] == "success" and returns[1]["status"] == "error"
    assert not (workdir / "made-by-session.txt").exists()


@pytest.mark.parametrize("flags", [(), ("--yolo",)])
def test_writing_to_an_unknown_session_is_an_error(workdir: Path, flags: tuple[str, ...]) -> None:
    run = _run(workdir, [_write(7, MAKE_FILE)], *flags)
    (ret,) = _returns(run)
    assert ret["status"] == "error"
    assert "No running exec_command session 7" in ret["tool_return"]
    assert not (workdir / "made-by-session.txt").exists()


def test_a_session_admitted_by_nobody_gets_no_writes(workdir: Path) -> None:
    """Its exec_command asked and nobody answered (headless): no session, so the write is the
    unknown-session error, not a second question."""
    run = _run(workdir, [PYTHON, _write(1, MAKE_FILE)])
    returns = _returns(run)
    assert [r["status"] for r in returns] == ["error", "error"]
    assert "No running exec_command session 1" in returns[1]["tool_return"]
    assert not (workdir / "made-by-session.txt").exists()


def test_a_confined_session_takes_input_without_asking(workdir: Path) -> None:
    need_bwrap()
    cat = {"name": "exec_command", "arguments": {"cmd": "cat", "description": "echo input",
                                                 "tty": True, "yield_time_ms": 1000}}
    run = _run(workdir, [cat, _write(1, "hello-from-stdin\n"), _write(1, "\u0004")])
    returns = _returns(run)
    assert [r["status"] for r in returns] == ["success"] * 3, returns
    assert "Process running with session ID 1" in returns[0]["tool_return"]
    assert "hello-from-stdin" in returns[1]["tool_return"]
