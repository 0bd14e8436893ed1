from __future__ import annotations

import asyncio
import re
import stat
import time
from collections.abc import Callable
from pathlib import Path

import pytest

from tether.errors import ToolFailure
from tether.tools.background import BackgroundTasks
from tether.tools.bash import BashTool

from .support import live_children, make_ctx, pid_dead


async def _until(predicate: Callable[[], bool], timeout: float = 5.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError("condition not reached in time")
        await asyncio.sleep(0.01)


def test_bash_run_in_background_returns_at_once_and_logs(tmp_path: Path) -> None:
    scratch = tmp_path / "scratch"

    async def scenario() -> None:
        tasks = BackgroundTasks()
        ctx = make_ctx(tmp_path, scratch_dir=scratch, services={"background": tasks})
        result = await BashTool().run(
            {
                "command": "echo first; sleep 0.2; echo second; exit 4",
                "description": "two lines",
                "run_in_background": True,
            },
            ctx,
        )
        assert not result.is_error
        assert result.output.startswith("Command running in background with ID: bash_1\n")
        log = scratch / "bash_1.log"
        assert str(log) in result.output
        assert stat.S_IMODE(log.stat().st_mode) == 0o600
        assert await tasks.wait("bash_1", timeout=5)
        task = tasks.get("bash_1")
        assert task is not None and task.exit_code == 4 and not task.running
        assert task.status() == "exited with code 4"
        assert tasks.output("bash_1") == "first\nsecond\n"

    asyncio.run(scenario())


def test_foreground_sleep_rule_does_not_apply_in_background(tmp_path: Path) -> None:
    async def scenario() -> None:
        tasks = BackgroundTasks(tmp_path)
        result = await BashTool().run(
            {"command": "sleep 30", "description": "x", "run_in_background": True},
            make_ctx(tmp_path, services={"background": tasks}),
        )
        assert not result.is_error, result.output
        assert tasks.running_count == 1
        await tasks.stop_all()
        assert tasks.running_count == 0

    asyncio.run(scenario())


def test_on_exit_callbacks_get_id_code_and_log(tmp_path: Path) -> None:
    async def scenario() -> None:
        tasks = BackgroundTasks(tmp_path)
        seen: list[tuple[str, int, Path]] = []
        async_seen: list[str] = []

        async def async_callback(task_id: str, code: int, log: Path) -> None:
            async_seen.append(task_id)

        def failing(task_id: str, code: int, log: Path) -> None:
            raise RuntimeError("callbacks must not break the watcher")

        tasks.on_exit(lambda *event: seen.append(event))
        tasks.on_exit(async_callback)
        dispose = tasks.on_exit(failing)
        dispose()
        task = await tasks.start("echo hi; exit 2", cwd=tmp_path)
        await tasks.wait(task.id, timeout=5)
        await _until(lambda: len(async_seen) == 1)
        assert seen == [(task.id, 2, tmp_path / f"{task.id}.log")]
        assert async_seen == [task.id]

    asyncio.run(scenario())


def test_callback_errors_are_logged_not_raised(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    async def scenario() -> None:
        tasks = BackgroundTasks(tmp_path)
        seen: list[str] = []

        def failing(task_id: str, code: int, log: Path) -> None:
            raise RuntimeError("boom")

        tasks.on_exit(failing)
        tasks.on_exit(lambda task_id, code, log: seen.append(task_id))
        task = await tasks.start("true", cwd=tmp_path)
        await _until(lambda: seen == [task.id])

    asyncio.run(scenario())
    assert "on_exit callback failed" in caplog.text


def test_stop_kills_the_group_and_grandchildren(tmp_path: Path) -> None:
    pidfile = tmp_path / "grandchild.pid"

    async def scenario() -> None:
        tasks = BackgroundTasks(tmp_path)
        codes: list[int] = []
        tasks.on_exit(lambda task_id, code, log: codes.append(code))
        task = await tasks.start(f"sleep 100 & echo $! > {pidfile}; wait", cwd=tmp_path)
        await _until(lambda: pidfile.exists() and pidfile.read_text().strip() != "")
        assert await tasks.stop(task.id) is True
        assert not task.running and task.stopped
        assert task.status() == "stopped"
        assert codes == [128 + 15]
        assert await tasks.stop(task.id) is False
        assert pid_dead(task.pid)
        assert pid_dead(int(pidfile.read_text()))

    asyncio.run(scenario())


def test_output_of_a_running_task_and_unknown_ids(tmp_path: Path) -> None:
    async def scenario() -> None:
        tasks = BackgroundTasks(tmp_path)
        task = await tasks.start(
            "printf '\\033[32mgreen\\033[0m token=%s\\n' \"$MY_TOKEN\"; sleep 30",
            cwd=tmp_path,
            env={"MY_TOKEN": "supersecretvalue"},
        )
        await _until(lambda: task.log_path.stat().st_size > 0)
        assert tasks.output(task.id) == "green token=[redacted]\n"
        assert tasks.get(task.id) is task and task.running
        with pytest.raises(ToolFailure, match="No background task with ID: bash_99"):
            tasks.output("bash_99")
        with pytest.raises(ToolFailure, match="No background task"):
            await tasks.stop("bash_99")
        await tasks.stop_all()

    asyncio.run(scenario())


def test_long_log_output_shows_the_tail(tmp_path: Path) -> None:
    async def scenario() -> None:
        tasks = BackgroundTasks(tmp_path)
        task = await tasks.start("seq 1 20000", cwd=tmp_path)
        await tasks.wait(task.id, timeout=5)
        text = tasks.output(task.id, limit=1000)
        assert text.startswith(f"[showing the end of the log; the full log is {task.log_path}]")
        assert text.endswith("19999\n20000\n")
        assert len(text) < 1200

    asyncio.run(scenario())


def test_limit_of_32_running_and_stop_all_leaves_nothing(tmp_path: Path) -> None:
    before = live_children()

    async def scenario() -> None:
        tasks = BackgroundTasks(tmp_path)
        started = await asyncio.gather(*(tasks.start("sleep 30", cwd=tmp_path) for _ in range(32)))
        assert tasks.running_count == 32
        assert sorted(int(t.id.split("_")[1]) for t in started) == list(range(1, 33))
        result = await BashTool().run(
            {"command": "sleep 30", "description": "x", "run_in_background": True},
            make_ctx(tmp_path, services={"background": tasks}),
        )
        assert result.is_error
        assert "Too many background tasks: 32 are already running" in result.output
        assert "TaskStop" in result.output
        await tasks.stop_all()
        assert tasks.running_count == 0
        assert all(pid_dead(t.pid) for t in started)
        # A slot is free again once tasks have ended.
        again = await tasks.start("true", cwd=tmp_path)
        assert again.id == "bash_33"
        await tasks.wait(again.id, timeout=5)

    asyncio.run(scenario())
    assert live_children() == before


def test_log_ids_skip_files_already_in_the_scratch_dir(tmp_path: Path) -> None:
    (tmp_path / "bash_1.log").write_text("someone else's log")

    async def scenario() -> str:
        tasks = BackgroundTasks(tmp_path)
        task = await tasks.start("true", cwd=tmp_path)
        await tasks.wait(task.id, timeout=5)
        return task.id

    assert asyncio.run(scenario()) == "bash_2"
    assert (tmp_path / "bash_1.log").read_text() == "someone else's log"


def test_scratch_dir_falls_back_to_env_then_temp(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TETHER_SCRATCHPAD", str(tmp_path / "pad"))

    async def scenario() -> tuple[Path, Path]:
        from_env = BackgroundTasks()
        first = await from_env.start("true", cwd=tmp_path)
        await from_env.wait(first.id, timeout=5)
        monkeypatch.delenv("TETHER_SCRATCHPAD")
        from_temp = BackgroundTasks()
        second = await from_temp.start("true", cwd=tmp_path)
        await from_temp.wait(second.id, timeout=5)
        return first.log_path, second.log_path

    env_log, temp_log = asyncio.run(scenario())
    assert env_log == tmp_path / "pad" / "bash_1.log"
    assert re.fullmatch(r"tether-background-.*", temp_log.parent.name)
    temp_log.unlink()
    temp_log.parent.rmdir()


def test_bash_tool_keeps_its_own_pool_without_a_service(tmp_path: Path) -> None:
    async def scenario() -> None:
        tool = BashTool()
        ctx = make_ctx(tmp_path, scratch_dir=tmp_path)
        result = await tool.run(
            {"command": "sleep 30", "description": "x", "run_in_background": True}, ctx
        )
        assert "bash_1" in result.output
        pool = tool.background_tasks(ctx)
        assert pool.running_count == 1
        await pool.stop_all()

    asyncio.run(scenario())
