"""The Monitor tool: watch a command (or a background task) until it signals a condition or
times out, without the model polling with `sleep`.

A `command` is a watcher the model writes (`until curl -sf localhost:8000; do sleep 1; done`):
it runs like Bash (same sandbox, own process group, killed at the timeout), and its exit is the
condition. `persistent: true` hands it to the background pool instead (notified on exit, read
with TaskOutput). A `task_id` waits for that background task to end. A `ws` URL watches a
WebSocket: the first message is the condition, or, `persistent`, every message is logged by a
background task until the server closes the socket. The connection is made by a watcher process
(`tools/ws_watch.py`) run exactly like a `command`, so the shell sandbox and its network rules
apply to it too.
"""

from __future__ import annotations

import asyncio
import os
import shlex
import sys
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from tether.core.tools import Effect, ToolResult, ToolRunContext
from tether.errors import SandboxError, ToolFailure
from tether.tools.arguments import optional_bool, optional_int, optional_str, require_str
from tether.tools.bash import BashTool, sandbox_service, shell_groups
from tether.tools.output import clean_program_output, error_result, secret_values
from tether.tools.process_group import sandbox_refusal, spawn_shell

DEFAULT_TIMEOUT_MS = 300_000
MAX_TIMEOUT_MS = 3_600_000
TAIL_CHARS = 4_000

DESCRIPTION = """\
Waits for a condition instead of polling: runs the watcher `command` (e.g. `until curl -sf \
localhost:3000; do sleep 1; done`) until it exits or `timeout_ms` passes (default 300000, max \
3600000) and returns its status and output tail. `persistent`: run it in the background, \
notified on exit. `task_id` instead of `command`: wait for that background task. `ws` instead \
of `command` (a ws:// or wss:// URL): wait for the first message on that WebSocket, or, with \
`persistent`, log every message in the background until the server closes it."""

PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "description": {"type": "string", "description": "What is being waited for"},
        "command": {"type": "string"},
        "task_id": {"type": "string"},
        "ws": {"type": "string", "description": "A ws:// or wss:// URL to watch"},
        "timeout_ms": {"type": "number"},
        "persistent": {"type": "boolean"},
    },
    "required": ["description"],
    "additionalProperties": False,
}


def ws_watcher(url: str, *, persistent: bool) -> str:
    """The watcher command for a `ws` source; ToolFailure naming what is wrong with the URL."""
    parts = urlsplit(url.strip())
    if parts.scheme not in ("ws", "wss") or not parts.hostname:
        raise ToolFailure(f"`ws` must be a ws:// or wss:// URL with a host, got {url!r}")
    if any(c.isspace() or ord(c) < 32 for c in url.strip()):
        raise ToolFailure("`ws` must not contain spaces or control characters")
    first = "" if persistent else " --first"
    return f"{shlex.quote(sys.executable)} -m tether.tools.ws_watch{first} {shlex.quote(url.strip())}"


def _tail(text: str) -> str:
    return f"[... earlier output omitted ...]\n{text[-TAIL_CHARS:]}" if len(text) > TAIL_CHARS else text


class MonitorTool:
    name = "Monitor"
    description = DESCRIPTION
    parameters = PARAMETERS
    effect = Effect.EXEC

    def __init__(self) -> None:
        self._bash = BashTool()  # its background pool, when the runtime passes none

    def paths(self, args: Mapping[str, Any], cwd: Path) -> list[Path]:
        return []

    async def run(self, args: Mapping[str, Any], ctx: ToolRunContext) -> ToolResult:
        try:
            description = require_str(args, "description")
            command = optional_str(args, "command")
            task_id = optional_str(args, "task_id", max_chars=200)
            ws = optional_str(args, "ws", max_chars=2_000)
            timeout_ms = min(optional_int(args, "timeout_ms", minimum=1) or DEFAULT_TIMEOUT_MS, MAX_TIMEOUT_MS)
            persistent = optional_bool(args, "persistent")
            if sum(x is not None for x in (command, task_id, ws)) != 1:
                raise ToolFailure("Give exactly one of `command` (a watcher), `ws` (a WebSocket "
                                  "URL) or `task_id`.")
            if ws is not None:
                command = ws_watcher(ws, persistent=bool(persistent))
        except ToolFailure as exc:
            return error_result(str(exc))
        if task_id is not None:
            return await self._watch_task(task_id, timeout_ms, ctx)
        assert command is not None
        if persistent:
            return await self._bash.run(
                {"command": command, "description": description, "run_in_background": True}, ctx
            )
        return await self._watch_command(command, timeout_ms, ctx)

    async def _watch_task(self, task_id: str, timeout_ms: int, ctx: ToolRunContext) -> ToolResult:
        pool = self._bash.background_tasks(ctx)
        if pool.get(task_id) is None:
            return error_result(f"No background task with ID: {task_id}")
        ended = await pool.wait(task_id, timeout_ms / 1000)
        task = pool.get(task_id)
        assert task is not None
        head = "ended" if ended else f"still running after {timeout_ms}ms"
        return ToolResult(f"Task {task_id} {head} (status: {task.status()})\n\n{_tail(pool.output(task_id))}")

    async def _watch_command(self, command: str, timeout_ms: int, ctx: ToolRunContext) -> ToolResult:
        env = {**os.environ, **(ctx.env or {})}
        started = time.monotonic()
        try:
            process = await spawn_shell(
                command, cwd=ctx.cwd, env=env, sandbox=sandbox_service(ctx),
                groups=shell_groups(ctx),
            )  # fmt: skip
        except SandboxError as exc:
            return error_result(sandbox_refusal(exc))
        except OSError as exc:
            return error_result(f"Could not start bash: {exc.strerror or exc}")
        abort: asyncio.Future[Any] = asyncio.ensure_future(ctx.abort.wait())
        try:
            waiters: set[asyncio.Future[Any]] = {process.exited, abort}
            await asyncio.wait(waiters, timeout=timeout_ms / 1000,
                               return_when=asyncio.FIRST_COMPLETED)  # fmt: skip
            exited = process.exited.done()
            await process.kill()
            await process.wait_output_closed(0.25)
        finally:
            abort.cancel()
            await process.close()
        output = _tail(clean_program_output(process.output_text(), secret_values(env)))
        waited = time.monotonic() - started
        if ctx.abort.is_set() and not exited:
            return error_result("Interrupted by user")
        if not exited:
            return ToolResult(f"Monitor timed out after {timeout_ms}ms: the condition was not met.\n{output}", True)
        code = process.exit_code()
        verdict = "Condition met" if code == 0 else f"Watcher exited with code {code}"
        return ToolResult(f"{verdict} after {waited:.1f}s.\n{output}".rstrip(), code != 0)
