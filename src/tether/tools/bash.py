"""The Bash tool: one `bash -c` per call in its own process group, output cleaned and capped.

Foreground calls wait for the command (default 2 minutes, at most 10), return its merged output,
and on timeout or interrupt kill the whole group; `run_in_background` hands the command to the
`BackgroundTasks` service instead and returns its id at once. When the runtime puts a sandbox in
`ctx.services.sandbox`, both kinds run confined by it, and a command it refuses does not run. A
call admitted only by the read-only auto-allow (`ctx.confined`) runs in the stricter read-only
sandbox of `ctx.services.confinement` instead, and never unconfined.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tether.core.tools import Effect, ToolResult, ToolRunContext
from tether.errors import SandboxError, ToolFailure
from tether.tools.arguments import optional_bool, optional_number, optional_str, require_str
from tether.tools.background import BackgroundTasks
from tether.tools.output import (
    cap_with_overflow,
    clean_program_output,
    error_result,
    secret_values,
)
from tether.tools.process_group import Sandbox, ShellProcess, sandbox_refusal, spawn_shell

if TYPE_CHECKING:
    from tether.tools.shell_groups import ShellGroups

DEFAULT_TIMEOUT_MS = 120_000
MAX_TIMEOUT_MS = 600_000
NO_OUTPUT = "(Command completed with no output)"
INTERRUPTED = "Interrupted by user"
# After the shell exits, a process it put in the background may still hold the output pipe; wait
# this long for stragglers' output before the group is killed.
_PIPE_DRAIN_S = 0.25

FOREGROUND_SLEEP_REFUSED = (
    "Foreground `sleep` is not allowed: it blocks the session while nothing happens. If you are "
    "waiting for something you started in the background, its completion notification will "
    "arrive on its own, so keep working or end your turn. To wait for a condition, run the "
    "command with `run_in_background: true` (a `sleep` inside a background command is fine)."
)

# The first simple command: optional `VAR=value` prefixes, the program word, its arguments up to
# the first control operator. `2>&1` / `&>` are redirections, not the `&` that backgrounds.
_FIRST_COMMAND = re.compile(
    r"\A\s*(?:[A-Za-z_][A-Za-z0-9_]*=\S*\s+)*(?P<word>[^\s;&|()<>]+)"
    r"(?P<rest>(?:[0-9]*>&[0-9-]+|&>>?|[^;&|\n])*)(?P<operator>&&|\|\||&|;|\||\n|\Z)"
)

DESCRIPTION = """\
Executes a bash command (`bash -c`) in the working directory and returns its combined stdout and \
stderr.

Each call starts a fresh shell: variables, `cd` and other shell state do not carry over between \
calls, so prefer absolute paths and chain dependent steps with `&&` in one command.

Prefer the dedicated tools where they fit: Read instead of cat/head/tail, Grep instead of \
grep/rg, Glob instead of find/ls for file search, Edit/MultiEdit instead of sed/awk, Write \
instead of echo/heredocs. They are faster to review and safer to approve.

Usage notes:
- `description` is a short, active-voice summary of what the command does (5-10 words), shown \
to the user, e.g. "Run the unit tests" or "List files in the repository root".
- Quote paths that contain spaces with double quotes.
- `timeout` is in milliseconds (default 120000 = 2 minutes, maximum 600000 = 10 minutes). On \
timeout the command and every process it started are killed.
- Output longer than 30000 characters is truncated: you see the beginning and the end, and the \
full output is saved to a file whose path is given (read it with Read or Grep).
- A non-zero exit status is reported as an error starting with `Exit code: N`.
- Set `run_in_background: true` for long-running work (dev servers, watchers, long builds). You \
get a task id (`bash_<n>`) and a log file at once and are notified when it exits; read its output \
with TaskOutput and stop it with TaskStop. Do not append `&` yourself.
- Do not use `sleep` to wait in the foreground; it is refused. Use `run_in_background` instead.
- Never run interactive commands (editors, pagers, prompts): stdin is closed. Pass flags such as \
`--yes`, `--no-pager` or `-y` instead.
- When running git commands, do not change git config, force-push or skip hooks unless the user \
asked you to."""

PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "command": {"type": "string", "description": "The command to execute"},
        "description": {
            "type": "string",
            "description": (
                "Clear, concise description of what this command does in 5-10 words, in active "
                "voice (e.g. 'Install package dependencies', 'Show working tree status')."
            ),
        },
        "timeout": {
            "type": "number",
            "description": "Optional timeout in milliseconds (default 120000, max 600000)",
        },
        "run_in_background": {
            "type": "boolean",
            "description": (
                "Set to true to run this command in the background. Use TaskOutput to read the "
                "output later and TaskStop to stop it."
            ),
        },
    },
    "required": ["command", "description"],
    "additionalProperties": False,
}


def is_foreground_sleep(command: str) -> bool:
    """True when the first simple command is a blocking `sleep` (also `/bin/sleep`, `X=1 sleep`)."""
    match = _FIRST_COMMAND.match(command)
    if match is None or match.group("word").rsplit("/", 1)[-1] != "sleep":
        return False
    return match.group("operator") != "&"  # `sleep 5 &` does not block


def clamp_timeout_ms(value: float | None) -> int:
    if value is None:
        return DEFAULT_TIMEOUT_MS
    return int(min(max(value, 1), MAX_TIMEOUT_MS))


class BashTool:
    name = "Bash"
    description = DESCRIPTION
    parameters = PARAMETERS
    effect = Effect.EXEC

    def __init__(self) -> None:
        # Used only when the runtime passes no `background` service: one pool per tool instance.
        self._own_background: BackgroundTasks | None = None

    def paths(self, args: Mapping[str, Any], cwd: Path) -> list[Path]:
        return []

    def background_tasks(self, ctx: ToolRunContext) -> BackgroundTasks:
        service = ctx.services.background
        if isinstance(service, BackgroundTasks):
            return service
        if self._own_background is None:
            self._own_background = BackgroundTasks(ctx.scratch_dir)
        return self._own_background

    async def run(self, args: Mapping[str, Any], ctx: ToolRunContext) -> ToolResult:
        try:
            command = require_str(args, "command")
            description = optional_str(args, "description") or ""
            timeout_ms = clamp_timeout_ms(optional_number(args, "timeout"))
            in_background = optional_bool(args, "run_in_background")
        except ToolFailure as exc:
            return error_result(str(exc))
        if not command.strip():
            return error_result("Argument `command` is empty: give the shell command to run.")
        if not ctx.cwd.is_dir():
            return error_result(
                f"Working directory does not exist: {ctx.cwd}. Change to an existing directory."
            )
        if ctx.abort.is_set():
            return error_result(INTERRUPTED)
        try:
            sandbox = sandbox_service(ctx)
        except SandboxError as exc:
            return error_result(sandbox_refusal(exc))
        if in_background:
            return await self._start_background(command, description, ctx, sandbox)
        if is_foreground_sleep(command):
            return error_result(FOREGROUND_SLEEP_REFUSED)
        return await self._run_foreground(command, timeout_ms, ctx, sandbox)

    async def _start_background(
        self, command: str, description: str, ctx: ToolRunContext, sandbox: Sandbox | None
    ) -> ToolResult:
        try:
            task = await self.background_tasks(ctx).start(
                command,
                cwd=ctx.cwd,
                env=ctx.env,
                description=description,
                scratch_dir=ctx.scratch_dir,
                sandbox=sandbox,
                groups=shell_groups(ctx),
            )
        except ToolFailure as exc:
            return error_result(str(exc))
        return ToolResult(
            f"Command running in background with ID: {task.id}\n"
            f"Output is being written to: {task.log_path}\n"
            f"Read its output with TaskOutput (task_id {task.id!r}) and stop it with TaskStop; "
            "you will be notified when it exits."
        )

    async def _run_foreground(
        self, command: str, timeout_ms: int, ctx: ToolRunContext, sandbox: Sandbox | None
    ) -> ToolResult:
        env = {**os.environ, **(ctx.env or {})}
        try:
            process = await spawn_shell(
                command, cwd=ctx.cwd, env=env, sandbox=sandbox, groups=shell_groups(ctx)
            )
        except SandboxError as exc:
            return error_result(sandbox_refusal(exc))
        except OSError as exc:
            return error_result(f"Could not start bash: {exc.strerror or exc}")
        try:
            outcome = await _wait_for_exit(process, timeout_ms / 1000, ctx.abort)
            if outcome == "exited":
                await process.wait_output_closed(_PIPE_DRAIN_S)
            # Exited or not, nothing of the group may outlive this call.
            await process.kill()
            await process.wait_output_closed(_PIPE_DRAIN_S)
        except BaseException:
            process.kill_now()
            raise
        finally:
            await process.close()

        text = clean_program_output(process.output_text(), secret_values(env))
        if outcome == "timeout":
            header, is_error = f"Command timed out after {timeout_ms}ms", True
        elif outcome == "aborted":
            header, is_error = INTERRUPTED, True
        else:
            code = process.exit_code()
            header, is_error = (f"Exit code: {code}", True) if code else ("", False)
        if not text.strip() and not header:
            return ToolResult(NO_OUTPUT)
        body = "\n".join(part for part in (header, text.rstrip("\n")) if part)
        capped = cap_with_overflow(
            body, overflow_dir=ctx.scratch_dir, prefix=f"bash-output-{_safe(ctx.tool_call_id)}-"
        )
        return ToolResult(capped, is_error=is_error)


def shell_groups(ctx: ToolRunContext) -> ShellGroups | None:
    """The run's ledger of shell process groups (reaped after a crash), if it keeps one."""
    from tether.tools.shell_groups import ShellGroups

    groups = ctx.services.shell_groups
    return groups if isinstance(groups, ShellGroups) else None


def sandbox_service(ctx: ToolRunContext) -> Sandbox | None:
    """The sandbox this call runs in: the read-only confinement when only the read-only
    auto-allow admitted it (none there: refused, it never runs unconfined), else the runtime's
    workspace sandbox, if any. Something else under either name is refused, not ignored."""
    name = "confinement" if ctx.confined else "sandbox"
    service: object = ctx.services.confinement if ctx.confined else ctx.services.sandbox
    if service is None and ctx.confined:
        raise SandboxError(
            "this command was admitted only as read-only, which runs inside the read-only "
            "sandbox, and this run has none"
        )
    if service is None or isinstance(service, Sandbox):
        return service
    raise SandboxError(
        f"the runtime's {name} service is a {type(service).__name__}, which cannot wrap "
        "commands (it needs a wrap(argv, cwd, env) method)"
    )


async def _wait_for_exit(process: ShellProcess, timeout_s: float, abort: asyncio.Event) -> str:
    """'exited', 'timeout' or 'aborted', whichever happens first."""
    abort_waiter: asyncio.Future[Any] = asyncio.ensure_future(abort.wait())
    waiters: set[asyncio.Future[Any]] = {process.exited, abort_waiter}
    try:
        done, _ = await asyncio.wait(
            waiters, timeout=timeout_s, return_when=asyncio.FIRST_COMPLETED
        )
    finally:
        abort_waiter.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await abort_waiter
    if process.exited in done:
        return "exited"
    return "aborted" if abort_waiter in done else "timeout"


def _safe(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "_", text)[:64] or "call"
