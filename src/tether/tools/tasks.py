"""TaskOutput and TaskStop: reading and stopping background tasks (reference §6.2).

A background task's log sits in the scratch dir, where a sandboxed command can write too; before
TaskOutput has it read, the log must still be a regular file (not a symlink to a secret, not a
FIFO that would block the read) and outside what the `ReadBoundary` hides.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tether.core.tools import Effect, ToolResult, ToolRunContext
from tether.errors import ToolFailure
from tether.tools.arguments import require_str
from tether.tools.background import BackgroundTasks
from tether.tools.boundary import boundary_for
from tether.tools.confined import describe_kind

MAX_BLOCK_MS = 600_000
MAX_TASK_ID_CHARS = 200


def _tasks(ctx: ToolRunContext, task_id: str = "") -> Any:
    """The pool a task id belongs to: subagent tasks (`task_<n>`) or background shells."""
    if task_id.startswith("task_"):
        return ctx.services.subagents
    service = ctx.services.background
    return service if isinstance(service, BackgroundTasks) else None


def _task_id(args: Mapping[str, Any]) -> str:
    value = args.get("task_id")
    if not isinstance(value, str) or not value:
        raise ToolFailure("task_id must be a non-empty string (e.g. 'bash_1')")
    return require_str(args, "task_id", max_chars=MAX_TASK_ID_CHARS)


def check_log(ctx: ToolRunContext, task_id: str, log: Path) -> None:
    """Refuse to read a background task's log that is no longer the file tether created."""
    try:
        info = os.lstat(log)
    except FileNotFoundError:
        return  # the pool says so in its own words
    except OSError as exc:
        raise ToolFailure(f"Could not read the log of {task_id}: {exc.strerror or exc}") from exc
    kind = describe_kind(info.st_mode)
    if kind is not None:
        raise ToolFailure(
            f"TaskOutput refused: the log of {task_id} ({log}) is now {kind}, not the file tether "
            "wrote, so it is not read. Something in the task (or another command) replaced it."
        )
    refusal = boundary_for(ctx).refusal("TaskOutput", log, os.path.realpath(log))
    if refusal is not None:
        raise ToolFailure(refusal)


class TaskOutputTool:
    name = "TaskOutput"
    description = (
        "Read the output of a background task (a Bash command started with run_in_background, "
        "bash_<n>, or a subagent, task_<n>), with its status. With block=true, wait up to "
        "`timeout` milliseconds for the task to finish first; with block=false, return what it "
        "has so far (a subagent's report only once it has finished)."
    )
    parameters: dict[str, Any] = {
        "type": "object",
        "properties": {
            "task_id": {"type": "string", "description": "The task ID, e.g. bash_1 or task_1"},
            "block": {"type": "boolean", "description": "Wait for the task to finish"},
            "timeout": {
                "type": "number",
                "description": "Longest wait in milliseconds (max 600000)",
            },
        },
        "required": ["task_id", "block", "timeout"],
        "additionalProperties": False,
    }
    effect = Effect.READ

    def paths(self, args: Mapping[str, Any], cwd: Path) -> list[Path]:
        return []

    async def run(self, args: Mapping[str, Any], ctx: ToolRunContext) -> ToolResult:
        try:
            task_id = _task_id(args)
            block, timeout = args.get("block"), args.get("timeout")
            if not isinstance(block, bool):
                raise ToolFailure("block must be true or false")
            if (
                isinstance(timeout, bool)
                or not isinstance(timeout, int | float)
                or not math.isfinite(timeout)
                or timeout < 0
            ):
                raise ToolFailure("timeout must be a non-negative number of milliseconds")
            tasks = _tasks(ctx, task_id)
            if tasks is None or tasks.get(task_id) is None:
                raise ToolFailure(f"No background task with ID: {task_id}")
            if block:
                await tasks.wait(task_id, min(float(timeout), MAX_BLOCK_MS) / 1000)
            task = tasks.get(task_id)
            assert task is not None
            if isinstance(tasks, BackgroundTasks):
                check_log(ctx, task_id, task.log_path)
            return ToolResult(f"Task {task_id} status: {task.status()}\n\n{tasks.output(task_id)}")
        except ToolFailure as exc:
            return ToolResult(str(exc), True)


class TaskStopTool:
    name = "TaskStop"
    description = (
        "Stop a running background task (bash_<n> or a subagent's task_<n>): its whole "
        "process group is killed. Use TaskOutput first if you still need its output."
    )
    parameters: dict[str, Any] = {
        "type": "object",
        "properties": {
            "task_id": {"type": "string", "description": "The task ID, e.g. bash_1 or task_1"}
        },
        "required": ["task_id"],
        "additionalProperties": False,
    }
    effect = Effect.EXEC

    def paths(self, args: Mapping[str, Any], cwd: Path) -> list[Path]:
        return []

    async def run(self, args: Mapping[str, Any], ctx: ToolRunContext) -> ToolResult:
        try:
            task_id = _task_id(args)
            tasks = _tasks(ctx, task_id)
            if tasks is None or tasks.get(task_id) is None:
                raise ToolFailure(f"No background task with ID: {task_id}")
            stopped = await tasks.stop(task_id)
        except ToolFailure as exc:
            return ToolResult(str(exc), True)
        return ToolResult(
            f"Stopped task {task_id}." if stopped else f"Task {task_id} had already ended."
        )
