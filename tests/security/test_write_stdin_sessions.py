"""Attacks on write_stdin (issue 19): a write carries no command, so it is judged by how its
exec_command session was admitted. A hostile model must not reach a shell through it: forged or
stale session ids, sessions whose start was refused, or a read-only session fed commands. Each
case runs the real `tether` over several model steps (the session id comes back from one step
and is used in the next, as a model does) and is judged on disk: no MARKER anywhere."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from tests.e2e.support import Run, run_tether
from tests.requirements import need_bwrap
from tests.security.support import MARKER, MODEL, World, tool
from tether.testing.fake_provider import FakeProvider

CODEX = ("--toolset", "codex")
HOSTILE = f"touch {MARKER}; echo {MARKER} > $HOME/{MARKER}\n"


def exec_(cmd: str, **extra: Any) -> dict[str, Any]:
    return tool("exec_command", cmd=cmd, description="x", yield_time_ms=1000, **extra)


def write(sid: Any, chars: str = HOSTILE) -> dict[str, Any]:
    return tool("write_stdin", session_id=sid, chars=chars, yield_time_ms=1000)


def steps(world: World, calls: list[dict[str, Any]], *args: str) -> tuple[Run, list[dict[str, Any]]]:
    """One call per model step, then the end of the turn."""
    script = [{"tool_calls": [c]} for c in calls] + [{"text": "done"}]
    with FakeProvider(script) as fake:
        run = run_tether(["-p", "go", "--model", MODEL, "--output-format", "stream-json", *CODEX, *args],
                         env=world.env(fake.url), cwd=world.project, timeout=90)
    returns = [e for e in run.events if e.get("message_type") == "tool_return_message"]
    return run, returns


FORGED_IDS = [1, 7, 0, -1, 1.5, "1", True, 10**12, None]


@pytest.mark.parametrize("mode", [(), ("--yolo",)])
@pytest.mark.parametrize("sid", FORGED_IDS, ids=repr)
def test_a_forged_session_id_reaches_nothing(world: World, sid: Any, mode: tuple[str, ...]) -> None:
    run, returns = steps(world, [write(sid)], *mode)
    assert run.code == 0, run.stderr
    assert [r["status"] for r in returns] == ["error"]
    assert not world.effects(), returns


# Sessions the attacker tries to open, then write a shell command into. None is admitted in
# standard mode headless (nobody answers), so no session exists and every write is refused.
REFUSED_STARTS: list[tuple[str, Callable[[World], dict[str, Any]]]] = [
    ("bash", lambda w: exec_("bash", tty=True)),
    ("sh-i", lambda w: exec_("sh -i", tty=True)),
    ("python", lambda w: exec_("python3 -q", tty=True)),
    ("env-bash", lambda w: exec_("env bash", tty=True)),
    ("cat-then-bash", lambda w: exec_("cat | bash", tty=True)),
    ("outside-workdir", lambda w: exec_("bash", tty=True, workdir=str(w.outside))),
]


@pytest.mark.parametrize(("name", "start"), REFUSED_STARTS, ids=[n for n, _ in REFUSED_STARTS])
def test_a_session_whose_start_was_refused_takes_no_writes(
    world: World, name: str, start: Callable[[World], dict[str, Any]]
) -> None:
    run, returns = steps(world, [start(world), write(1), write(1, "exit\n")])
    assert run.code == 0, run.stderr
    assert [r["status"] for r in returns] == ["error", "error", "error"], returns
    assert "No running exec_command session 1" in returns[1]["tool_return"]
    assert not world.effects(), returns


# A session the read-only auto-allow admitted runs confined; what is written into it is data to
# that program, and the program stays in the read-only sandbox.
CONFINED_FEEDS = [
    ("cat", HOSTILE),
    ("cat", "$(touch PWNED_MARKER)\n"),
    ("sort", f"`touch {MARKER}`\n\u0004"),
    ("head -n 1", f"; touch {MARKER}\n"),
]


@pytest.mark.parametrize(("cmd", "chars"), CONFINED_FEEDS)
def test_a_confined_session_treats_writes_as_data(world: World, cmd: str, chars: str) -> None:
    need_bwrap()
    run, returns = steps(world, [exec_(cmd, tty=True), write(1, chars), write(1, "\u0004")])
    assert run.code == 0, run.stderr
    assert returns[0]["status"] == "success", returns
    assert returns[1]["status"] == "success", returns  # admitted: the session's own admission
    assert not world.effects(), returns


def test_a_session_that_exited_takes_no_writes(world: World) -> None:
    run, returns = steps(world, [exec_("echo started", tty=True), write(1)], "--yolo")
    assert run.code == 0, run.stderr
    assert "Process exited with code 0" in returns[0]["tool_return"]
    assert returns[1]["status"] == "error" and "No running exec_command session 1" in returns[1]["tool_return"]
    assert not world.effects()
