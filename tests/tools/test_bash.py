from __future__ import annotations

import asyncio
import stat
import time
from pathlib import Path

import pytest

from tether.core.tools import Effect
from tether.tools.bash import (
    FOREGROUND_SLEEP_REFUSED,
    NO_OUTPUT,
    BashTool,
    clamp_timeout_ms,
    is_foreground_sleep,
)

from .support import live_children, make_ctx, pid_dead, run_tool


def bash(command: str, cwd: Path, **extra: object) -> tuple[str, bool]:
    result = run_tool(BashTool(), {"command": command, "description": "test", **extra}, cwd)
    return result.output, result.is_error


def test_runs_in_cwd_and_merges_stdout_and_stderr_in_order(tmp_path: Path) -> None:
    output, is_error = bash("pwd; echo out; echo err >&2; echo out2", tmp_path)
    assert not is_error
    assert output == f"{tmp_path}\nout\nerr\nout2"


def test_empty_output_and_nonzero_exit(tmp_path: Path) -> None:
    assert bash("true", tmp_path) == (NO_OUTPUT, False)
    output, is_error = bash("echo broken; exit 3", tmp_path)
    assert is_error
    assert output == "Exit code: 3\nbroken"
    assert bash("exit 7", tmp_path) == ("Exit code: 7", True)


def test_env_from_context_and_stdin_closed(tmp_path: Path) -> None:
    result = run_tool(
        BashTool(),
        {"command": "echo $TETHER_TEST_VALUE; cat; echo done", "description": "x"},
        tmp_path,
        env={"TETHER_TEST_VALUE": "hello"},
    )
    assert result.output == "hello\ndone"


def test_ansi_is_stripped(tmp_path: Path) -> None:
    output, _ = bash(r"printf '\033[1;31mred\033[0m \033]0;title\007plain\n'", tmp_path)
    assert output == "red plain"


def test_secret_values_are_scrubbed(tmp_path: Path) -> None:
    result = run_tool(
        BashTool(),
        {"command": "echo key=$MY_API_KEY pw=$DB_PASSWORD short=$SHORT_TOKEN", "description": "x"},
        tmp_path,
        env={
            "MY_API_KEY": "sk-abcdef123456",
            "DB_PASSWORD": "hunter2hunter2",
            "SHORT_TOKEN": "abc",
        },
    )
    assert result.output == "key=[redacted] pw=[redacted] short=abc"


def test_output_cap_writes_overflow_file(tmp_path: Path) -> None:
    scratch = tmp_path / "scratch"
    result = run_tool(
        BashTool(),
        {"command": "seq 1 20000; echo THE-END", "description": "x"},
        tmp_path,
        scratch_dir=scratch,
    )
    assert not result.is_error
    assert len(result.output) <= 30_000
    assert result.output.startswith("1\n2\n3\n")
    assert result.output.endswith("THE-END")
    overflow = [p for p in scratch.iterdir() if p.name.startswith("bash-output-call-1-")]
    assert len(overflow) == 1
    assert str(overflow[0]) in result.output
    assert stat.S_IMODE(overflow[0].stat().st_mode) == 0o600
    full = overflow[0].read_text()
    assert full.splitlines()[:3] == ["1", "2", "3"]
    assert full.splitlines()[-1] == "THE-END"
    assert len(full.splitlines()) == 20001


def test_timeout_kills_the_whole_group_including_grandchildren(tmp_path: Path) -> None:
    pidfile = tmp_path / "grandchild.pid"
    started = time.monotonic()
    output, is_error = bash(
        f"echo started; sleep 100 & echo $! > {pidfile}; wait", tmp_path, timeout=500
    )
    assert is_error
    assert output.startswith("Command timed out after 500ms")
    assert "started" in output
    assert time.monotonic() - started < 30  # did not wait for the `sleep 100`
    assert pid_dead(int(pidfile.read_text()))


def test_grandchild_holding_the_pipe_does_not_outlive_a_finished_command(tmp_path: Path) -> None:
    pidfile = tmp_path / "grandchild.pid"
    started = time.monotonic()
    output, is_error = bash(f"sleep 100 > /dev/null & echo $! > {pidfile}; echo ok", tmp_path)
    assert (output, is_error) == ("ok", False)
    assert time.monotonic() - started < 30  # did not wait for the `sleep 100`
    assert pid_dead(int(pidfile.read_text()))


def test_abort_event_interrupts_and_kills_the_group(tmp_path: Path) -> None:
    pidfile = tmp_path / "grandchild.pid"

    async def scenario() -> tuple[str, bool, float]:
        ctx = make_ctx(tmp_path)
        task = asyncio.create_task(
            BashTool().run(
                {"command": f"echo go; sleep 100 & echo $! > {pidfile}; wait", "description": "x"},
                ctx,
            )
        )
        for _ in range(200):
            if pidfile.exists() and pidfile.read_text().strip():
                break
            await asyncio.sleep(0.01)
        started = time.monotonic()
        ctx.abort.set()
        result = await task
        return result.output, result.is_error, time.monotonic() - started

    output, is_error, took = asyncio.run(scenario())
    assert is_error
    assert output.startswith("Interrupted by user")
    assert took < 30  # did not wait for the `sleep 100`
    assert pid_dead(int(pidfile.read_text()))


def test_abort_already_set_runs_nothing(tmp_path: Path) -> None:
    marker = tmp_path / "ran"

    async def scenario() -> tuple[str, bool]:
        ctx = make_ctx(tmp_path)
        ctx.abort.set()
        result = await BashTool().run({"command": f"touch {marker}", "description": "x"}, ctx)
        return result.output, result.is_error

    assert asyncio.run(scenario()) == ("Interrupted by user", True)
    assert not marker.exists()


def test_cancelling_the_call_kills_the_group(tmp_path: Path) -> None:
    pidfile = tmp_path / "child.pid"

    async def scenario() -> None:
        task = asyncio.create_task(
            BashTool().run(
                {"command": f"echo $$ > {pidfile}; exec sleep 100", "description": "x"},
                make_ctx(tmp_path),
            )
        )
        for _ in range(200):
            if pidfile.exists() and pidfile.read_text().strip():
                break
            await asyncio.sleep(0.01)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(scenario())
    assert pid_dead(int(pidfile.read_text()))


@pytest.mark.parametrize(
    "command",
    [
        "sleep 5",
        "  sleep 1 && echo done",
        "sleep 2; ls",
        "/bin/sleep 3",
        "FOO=1 sleep 4",
        "sleep 3 >/dev/null 2>&1",
        "sleep 1 | cat",
    ],
)
def test_foreground_sleep_is_refused(tmp_path: Path, command: str) -> None:
    assert is_foreground_sleep(command)
    assert bash(command, tmp_path) == (FOREGROUND_SLEEP_REFUSED, True)
    assert "run_in_background" in FOREGROUND_SLEEP_REFUSED


@pytest.mark.parametrize(
    "command",
    [
        "echo sleep 5",
        "grep sleep file",
        "sleepy",
        "ls && sleep 1",
        "sleep 9 &",
        "sleep 9 2>&1 & ls",
    ],
)
def test_sleep_elsewhere_is_not_the_first_command(command: str) -> None:
    assert not is_foreground_sleep(command)


def test_timeout_argument_is_validated_and_clamped(tmp_path: Path) -> None:
    output, is_error = bash("echo hi", tmp_path, timeout="soon")
    assert is_error
    assert "`timeout`" in output and "number" in output
    output, is_error = bash("echo hi", tmp_path, run_in_background="maybe")
    assert is_error and "`run_in_background`" in output
    assert clamp_timeout_ms(None) == 120_000
    assert clamp_timeout_ms(0) == 1
    assert clamp_timeout_ms(10**9) == 600_000


def test_command_argument_errors(tmp_path: Path) -> None:
    output, is_error = bash("   ", tmp_path)
    assert is_error and "`command`" in output
    result = run_tool(BashTool(), {"command": ["ls"], "description": "x"}, tmp_path)
    assert result.is_error and "`command` must be a string" in result.output
    result = run_tool(BashTool(), {"command": "ls", "description": "x"}, tmp_path / "missing")
    assert result.is_error and "Working directory does not exist" in result.output


def test_contract_surface() -> None:
    tool = BashTool()
    assert tool.name == "Bash"
    assert tool.effect is Effect.EXEC
    assert tool.paths({"command": "cat /etc/passwd"}, Path("/")) == []
    assert tool.parameters["required"] == ["command", "description"]
    assert set(tool.parameters["properties"]) == {
        "command",
        "description",
        "timeout",
        "run_in_background",
    }


def test_no_leftover_processes_after_many_runs(tmp_path: Path) -> None:
    before = live_children()
    for n in range(3):
        pidfile = tmp_path / f"orphan{n}.pid"
        assert bash(f"(sleep 50 > /dev/null & echo $! > {pidfile}); true", tmp_path) == (
            NO_OUTPUT,
            False,
        )
        assert pid_dead(int(pidfile.read_text()))
    assert live_children() == before
