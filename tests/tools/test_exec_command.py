"""exec_command and write_stdin: sessions on a pty, yields, caps, and no process left behind."""

from __future__ import annotations

import asyncio
import re
from pathlib import Path

from tether.tools.exec_command import ExecCommandTool, ExecSessions, WriteStdinTool

from .support import make_ctx, pid_dead


def _session_id(output: str) -> int:
    match = re.search(r"session ID (\d+)", output)
    assert match, output
    return int(match.group(1))


def test_interactive_python_over_write_stdin(tmp_path: Path) -> None:
    async def scenario() -> None:
        sessions = ExecSessions()
        ctx = make_ctx(tmp_path, services={"exec_sessions": sessions})
        exec_tool, stdin_tool = ExecCommandTool(), WriteStdinTool()
        started = await exec_tool.run(
            {"cmd": "python3 -q", "description": "python repl", "tty": True, "yield_time_ms": 1500},
            ctx,
        )
        assert not started.is_error, started.output
        sid = _session_id(started.output)
        assert ">>>" in started.output
        pid = sessions.sessions[sid].proc.pid
        answer = await stdin_tool.run(
            {"session_id": sid, "chars": "print(6 * 7)\n", "yield_time_ms": 1000}, ctx
        )
        assert "42" in answer.output and "running with session ID" in answer.output
        done = await stdin_tool.run(
            {"session_id": sid, "chars": "exit()\n", "yield_time_ms": 3000}, ctx
        )
        assert "Process exited with code 0" in done.output, done.output
        assert sid not in sessions.sessions and pid_dead(pid)
        gone = await stdin_tool.run({"session_id": sid, "chars": "x"}, ctx)
        assert gone.is_error and "No running session" in gone.output

    asyncio.run(scenario())


def test_short_command_returns_output_and_exit_code(tmp_path: Path) -> None:
    async def scenario() -> None:
        ctx = make_ctx(tmp_path, services={"exec_sessions": ExecSessions()})
        result = await ExecCommandTool().run(
            {"cmd": "echo hi; echo err >&2; exit 3", "description": "echo"}, ctx
        )
        assert "Process exited with code 3" in result.output
        assert "hi" in result.output and "err" in result.output

    asyncio.run(scenario())


def test_output_is_capped_by_max_output_tokens(tmp_path: Path) -> None:
    async def scenario() -> None:
        ctx = make_ctx(tmp_path, services={"exec_sessions": ExecSessions()})
        result = await ExecCommandTool().run(
            {"cmd": "seq 1 20000", "description": "count", "max_output_tokens": 100}, ctx
        )
        assert "characters truncated" in result.output
        assert len(result.output) < 1000

    asyncio.run(scenario())


def test_pipe_session_refuses_input_and_close_all_kills(tmp_path: Path) -> None:
    async def scenario() -> None:
        sessions = ExecSessions()
        ctx = make_ctx(tmp_path, services={"exec_sessions": sessions})
        started = await ExecCommandTool().run(
            {"cmd": "sleep 30", "description": "wait", "yield_time_ms": 100}, ctx
        )
        sid = _session_id(started.output)
        refused = await WriteStdinTool().run({"session_id": sid, "chars": "x"}, ctx)
        assert refused.is_error and "tty" in refused.output
        pid = sessions.sessions[sid].proc.pid
        await sessions.close_all()
        assert pid_dead(pid)

    asyncio.run(scenario())


def test_bad_arguments_name_the_argument(tmp_path: Path) -> None:
    result = asyncio.run(ExecCommandTool().run({"cmd": 5}, make_ctx(tmp_path)))
    assert result.is_error and "`cmd`" in result.output
    result = asyncio.run(WriteStdinTool().run({"session_id": "x"}, make_ctx(tmp_path)))
    assert result.is_error and "`session_id`" in result.output


def test_workdir_must_stay_below_the_working_directory(tmp_path: Path) -> None:
    work = tmp_path / "work"
    (work / "sub").mkdir(parents=True)
    (work / "out").symlink_to(tmp_path)

    async def scenario() -> None:
        ctx = make_ctx(work, services={"exec_sessions": ExecSessions()})
        inside = await ExecCommandTool().run({"cmd": "pwd", "description": "d", "workdir": "sub"}, ctx)
        assert f"{work}/sub" in inside.output
        for workdir in (str(tmp_path), "..", "out"):
            refused = await ExecCommandTool().run({"cmd": "pwd", "description": "d", "workdir": workdir}, ctx)
            assert refused.is_error and "outside the working directory" in refused.output, workdir

    asyncio.run(scenario())
