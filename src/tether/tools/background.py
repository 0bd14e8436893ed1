"""Background shell tasks: ids `bash_<n>`, 0600 logs in the scratch dir, at most 32 running at once.

A `BackgroundTasks` is a service object the runtime passes to tools as
`ctx.services.background`; it owns every process group it started, reports each exit to the
`on_exit` callbacks (so the runtime can enqueue a `<task-notification>`), and `stop_all()` at
shutdown leaves nothing running. It is bound to the event loop that starts its first task.

Logs are tether's own state that it reads back later, so they are opened relative to a
directory fd taken with O_NOFOLLOW (the scratch dir itself must be a real directory) and with
O_NOFOLLOW on the file: a symlink planted where a log goes cannot redirect tether's write or read.
A sandboxed command cannot plant one anyway, since the sandboxes' private tmp dirs are separate
subdirectories (`runtime.sandboxing`), but the scratch dir may be one a user configured.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import inspect
import itertools
import logging
import os
import stat
import tempfile
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

if TYPE_CHECKING:
    from tether.tools.shell_groups import ShellGroups

from tether.errors import SandboxError, ToolFailure
from tether.tools.output import SHELL_OUTPUT_CAP, cap_text, clean_program_output, secret_values
from tether.tools.process_group import (
    Sandbox,
    ShellProcess,
    kill_group,
    sandbox_refusal,
    spawn_shell,
)

MAX_RUNNING = 32
SCRATCH_ENV = "TETHER_SCRATCHPAD"

ExitCallback = Callable[[str, int, Path], Awaitable[None] | None]
"""Called with (task id, exit code, log path) once a task's process has exited."""

_log = logging.getLogger(__name__)


@dataclass(slots=True, eq=False)
class BackgroundTask:
    id: str
    command: str
    description: str
    log_path: Path
    pid: int
    started_at: float
    exit_code: int | None = None  # shell convention: 128+N when killed by signal N
    stopped: bool = False  # ended by stop()/stop_all() rather than on its own
    ended_at: float | None = None
    _process: ShellProcess | None = field(default=None, repr=False)
    _secrets: list[str] = field(default_factory=list, repr=False)
    _watcher: asyncio.Task[None] | None = field(default=None, repr=False)
    _done: asyncio.Event = field(default_factory=asyncio.Event, repr=False)

    @property
    def running(self) -> bool:
        return self.exit_code is None

    def status(self) -> str:
        if self.running:
            return "running"
        return "stopped" if self.stopped else f"exited with code {self.exit_code}"


class BackgroundTasks:
    """Every background shell task of one runtime (or one process, when none was configured)."""

    def __init__(self, scratch_dir: Path | None = None, *, max_running: int = MAX_RUNNING) -> None:
        self._scratch_dir = scratch_dir
        self._max_running = max_running
        self._tasks: dict[str, BackgroundTask] = {}
        self._callbacks: list[ExitCallback] = []
        self._counter = itertools.count(1)
        self._starting = 0  # reservations, so concurrent starts cannot overshoot the limit

    # -- starting ---------------------------------------------------------------------------

    async def start(
        self,
        command: str,
        *,
        cwd: Path,
        env: Mapping[str, str] | None = None,
        description: str = "",
        scratch_dir: Path | None = None,
        sandbox: Sandbox | None = None,
        groups: ShellGroups | None = None,
    ) -> BackgroundTask:
        """Launch `bash -c command` in its own process group with output going to its log.

        With `sandbox` the command runs confined by it. Raises `ToolFailure` when `max_running`
        tasks are already running or the launch fails (a sandbox refusal: "Sandbox error: …",
        and nothing ran).
        """
        if self.running_count + self._starting >= self._max_running:
            raise ToolFailure(
                f"Too many background tasks: {self._max_running} are already running. Stop one "
                "with TaskStop (or wait for one to finish) before starting another."
            )
        self._starting += 1
        try:
            full_env = {**os.environ, **(env or {})}
            directory = self._resolve_scratch(scratch_dir)
            task_id, log_path, fd = self._open_log(directory)
            try:
                process = await spawn_shell(
                    command, cwd=cwd, env=full_env, log_fd=fd, sandbox=sandbox, groups=groups
                )
            except SandboxError as exc:
                log_path.unlink(missing_ok=True)
                raise ToolFailure(sandbox_refusal(exc)) from exc
            except OSError as exc:
                raise ToolFailure(
                    f"Could not start background command: {exc.strerror or exc}"
                ) from exc
            finally:
                os.close(fd)
            task = BackgroundTask(
                id=task_id,
                command=command,
                description=description,
                log_path=log_path,
                pid=process.pid,
                started_at=time.time(),
                _process=process,
                _secrets=secret_values(full_env),
            )
            self._tasks[task_id] = task
            task._watcher = asyncio.create_task(self._watch(task), name=f"tether-{task_id}")
            return task
        finally:
            self._starting -= 1

    def _resolve_scratch(self, override: Path | None) -> Path:
        directory = override or self._scratch_dir
        if directory is None:
            configured = os.environ.get(SCRATCH_ENV)
            directory = (
                Path(configured)
                if configured
                else Path(tempfile.mkdtemp(prefix="tether-background-"))
            )
            self._scratch_dir = directory
        directory.mkdir(parents=True, exist_ok=True, mode=0o700)
        return directory

    def _open_log(self, directory: Path) -> tuple[str, Path, int]:
        # O_EXCL: a scratch dir shared with another process must not have its logs clobbered;
        # on a clash the next number is taken. O_EXCL with O_CREAT also refuses a symlink.
        dir_fd = _open_dir_nofollow(directory)
        try:
            while True:
                task_id = f"bash_{next(self._counter)}"
                name = f"{task_id}.log"
                try:
                    fd = os.open(
                        name,
                        os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                        0o600,
                        dir_fd=dir_fd,
                    )
                except FileExistsError:
                    continue
                return task_id, directory / name, fd
        finally:
            os.close(dir_fd)

    async def _watch(self, task: BackgroundTask) -> None:
        process = task._process
        assert process is not None
        try:
            await asyncio.shield(process.exited)
            # The shell is gone; anything it left behind in its group goes with it.
            await process.kill()
        except asyncio.CancelledError:
            process.kill_now()
            raise
        finally:
            await process.close()
            task.exit_code = process.exit_code()
            task.ended_at = time.time()
            task._done.set()
        await self._notify(task)

    async def _notify(self, task: BackgroundTask) -> None:
        assert task.exit_code is not None
        for callback in list(self._callbacks):
            try:
                result = callback(task.id, task.exit_code, task.log_path)
                if inspect.isawaitable(result):
                    await result
            except Exception:
                _log.exception("on_exit callback failed for background task %s", task.id)

    # -- observing --------------------------------------------------------------------------

    def on_exit(self, callback: ExitCallback) -> Callable[[], None]:
        """Call `callback(task_id, exit_code, log_path)` after each task exits; returns a disposer."""
        self._callbacks.append(callback)

        def dispose() -> None:
            with contextlib.suppress(ValueError):
                self._callbacks.remove(callback)

        return dispose

    def get(self, task_id: str) -> BackgroundTask | None:
        return self._tasks.get(task_id)

    def tasks(self) -> list[BackgroundTask]:
        return list(self._tasks.values())

    @property
    def running_count(self) -> int:
        return sum(1 for task in self._tasks.values() if task.running)

    def _require(self, task_id: str) -> BackgroundTask:
        task = self._tasks.get(task_id)
        if task is None:
            known = ", ".join(self._tasks) or "none"
            raise ToolFailure(f"No background task with ID: {task_id} (known: {known}).")
        return task

    def output(self, task_id: str, *, limit: int = SHELL_OUTPUT_CAP) -> str:
        """The task's log so far, cleaned like foreground output; the tail if it is long."""
        task = self._require(task_id)
        try:
            with _open_log_for_reading(task.log_path) as handle:
                handle.seek(0, os.SEEK_END)
                size = handle.tell()
                # Read a little more than the cap so scrubbing and ANSI removal have room.
                handle.seek(max(size - limit * 4, 0))
                raw = handle.read()
        except OSError as exc:
            raise ToolFailure(
                f"Could not read the log of {task_id} ({task.log_path}): {exc.strerror or exc}"
            ) from exc
        text = clean_program_output(raw.decode("utf-8", errors="replace"), task._secrets)
        if len(text) > limit or size > len(raw):
            text = text[-limit:]
            newline = text.find("\n")
            if 0 <= newline < 200:
                text = text[newline + 1 :]
            return f"[showing the end of the log; the full log is {task.log_path}]\n{text}"
        return cap_text(text, limit, f"The full log is {task.log_path}.")

    async def wait(self, task_id: str, timeout: float | None = None) -> bool:
        """Wait for the task to end; True if it has, False if `timeout` seconds passed first."""
        task = self._require(task_id)
        try:
            await asyncio.wait_for(task._done.wait(), timeout)
        except TimeoutError:
            return False
        return True

    # -- stopping ---------------------------------------------------------------------------

    async def stop(self, task_id: str) -> bool:
        """Kill the task's whole process group; False if it had already ended."""
        task = self._require(task_id)
        if not task.running:
            return False
        await self._stop(task)
        return True

    async def stop_all(self) -> None:
        """Kill every running task's group (shutdown); returns once all of them are reaped."""
        running = [task for task in self._tasks.values() if task.running]
        await asyncio.gather(*(self._stop(task) for task in running))

    async def _stop(self, task: BackgroundTask) -> None:
        task.stopped = True
        process = task._process
        assert process is not None
        await kill_group(process.pgid)
        if task._watcher is not None:
            await asyncio.shield(task._watcher)


def _open_dir_nofollow(directory: Path) -> int:
    """A fd on `directory`, refusing a symlink in its place (OSError ELOOP/ENOTDIR)."""
    try:
        return os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        raise ToolFailure(
            f"Could not use {directory} for background logs: {exc.strerror or exc} (it must be "
            "a real directory, not a symlink)"
        ) from exc


def _open_log_for_reading(path: Path) -> BinaryIO:
    """The log, opened without following a symlink at the directory or the file, and only if
    it is a regular file (a FIFO put in its place would block tether's read forever)."""
    dir_fd = _open_dir_nofollow(path.parent)
    try:
        fd = os.open(
            path.name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=dir_fd
        )
    finally:
        os.close(dir_fd)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise OSError(errno.EINVAL, "not a regular file")
    return os.fdopen(fd, "rb")
