"""Codex's `exec_command` and `write_stdin`: shell commands as sessions that outlive one call.

`exec_command` starts `bash -c cmd` in its own process group (on a pty with `tty: true`, so
interactive programs such as `python3` prompt and echo), waits up to `yield_time_ms` for it to
finish, and returns what it printed; a command still running stays open as a session whose id
`write_stdin` takes to send keystrokes and collect more output. Launches go through the same
sandbox as Bash (`bash.sandbox_service`: the workspace sandbox, or the read-only confinement for
calls admitted only as read-only) and are recorded in the shell-group ledger before the command
is let go, so a killed run's sessions are reaped by the next one. Sessions are killed when the
runtime closes them (`ExecSessions.close_all`) or the process exits.

A `write_stdin` call is judged by its session (`WriteStdinTool.session_admission` and
`session_start`, read into `Call.session` / `Call.session_start`; the rules are in
`core/permissions/sessions.py`). Text written to a session is input to
whatever program runs there, and tether cannot read a pager's, an editor's or an interpreter's
command language (`less`'s `!cmd`, `ed`'s `!cmd`, `python3 -i`): so admitting the command that
started the session says nothing about what is typed into it. Either the session runs confined,
as its first command did when only the read-only auto-allow admitted it (then its input is data
to a program that cannot write or reach the network), or each write is decided as a new command:
it asks unless what admitted the session admits any command (unrestricted mode, a rule for every
shell command, a person who approved the session), and it asks even then when deny rules exist
that the input could dodge; input that, read as a shell command line, a deny rule covers is
denied. Polling and Ctrl-C / Ctrl-D / Ctrl-\\ are always allowed; an unknown session is refused.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import errno
import itertools
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from tether.core.permissions.checker import SESSION_ALLOWED, SESSION_CONFINED, SESSION_UNKNOWN
from tether.core.tools import Effect, Tool, ToolResult, ToolRunContext
from tether.errors import SandboxError, ToolFailure
from tether.tools.arguments import (
    optional_bool,
    optional_int,
    optional_path_text,
    optional_str,
    require_str,
    resolve_path,
)
from tether.tools.bash import sandbox_service
from tether.tools.output import clean_program_output, error_result, secret_values
from tether.tools.process_group import kill_group, sandbox_refusal

DEFAULT_YIELD_MS = 10_000
MAX_YIELD_MS = 300_000
DEFAULT_WRITE_YIELD_MS = 250
DEFAULT_MAX_OUTPUT_TOKENS = 10_000
MAX_SESSIONS = 16
_BUFFER_CAP = 1024 * 1024  # unread output kept per session; older bytes are dropped
_POLL_S = 0.02
# Waits for the go-ahead line on the gate fd (written once the group is in the ledger), closes
# it, then runs the command: if tether dies before recording, the command never runs.
_GATE = 'IFS= read -r go <&{fd} || exit 125; [ "$go" = go ] || exit 125; exec {fd}<&-; exec "$@"'

EXEC_DESCRIPTION = """\
Runs a shell command (`bash -c`) and returns its output once it exits or after `yield_time_ms` \
(default 10000), whichever comes first. A command still running stays open as a session: its \
id is returned, and write_stdin sends it input and reads further output. Set `tty: true` for \
interactive programs (REPLs, prompts). Output is capped at `max_output_tokens` (about 4 \
characters each). `workdir` defaults to the working directory."""

EXEC_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "cmd": {"type": "string", "description": "The shell command to run"},
        "description": {"type": "string", "description": "What it does, in 5-10 words"},
        "workdir": {"type": "string"},
        "tty": {"type": "boolean", "description": "Run on a pseudo-terminal (default false)"},
        "yield_time_ms": {"type": "number"},
        "max_output_tokens": {"type": "number"},
    },
    "required": ["cmd", "description"],
    "additionalProperties": False,
}

WRITE_DESCRIPTION = """\
Writes `chars` to a running exec_command session's stdin (a tty session: include "\\n" to \
press Enter; "\\u0003" is Ctrl-C) and returns the output produced within `yield_time_ms` \
(default 250). Empty `chars` just polls for output."""

WRITE_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "session_id": {"type": "number"},
        "chars": {"type": "string"},
        "yield_time_ms": {"type": "number"},
        "max_output_tokens": {"type": "number"},
    },
    "required": ["session_id"],
    "additionalProperties": False,
}


class ExecSession:
    """One running command: its process group, its output fd (pty master or pipe), its buffer."""

    def __init__(self, sid: int, proc: subprocess.Popen[bytes], out_fd: int, in_fd: int | None,
                 secrets: list[str], command: str = "", cwd: Path | None = None) -> None:  # fmt: skip
        self.id = sid
        self.command = command  # what started it, re-judged when input is written to it
        self.cwd = cwd
        self.proc = proc
        self.out_fd = out_fd
        self.in_fd = in_fd  # the pty master again for tty sessions; None: stdin is closed
        self.secrets = secrets
        self.buffer = bytearray()
        self.dropped = 0
        self.eof = False
        self.started = time.monotonic()
        self.confined = False  # started by a call admitted only as read-only (see admission())
        os.set_blocking(out_fd, False)
        asyncio.get_running_loop().add_reader(out_fd, self._readable)
        self._killer = lambda: _kill_now(proc.pid)
        atexit.register(self._killer)

    def _readable(self) -> None:
        try:
            data = os.read(self.out_fd, 65536)
        except BlockingIOError:
            return
        except OSError as exc:  # EIO: the pty's last writer closed
            if exc.errno != errno.EIO:
                raise
            data = b""
        if not data:
            self.eof = True
            asyncio.get_running_loop().remove_reader(self.out_fd)
            return
        self.buffer += data
        if len(self.buffer) > _BUFFER_CAP:
            self.dropped += len(self.buffer) - _BUFFER_CAP
            del self.buffer[: len(self.buffer) - _BUFFER_CAP]

    @property
    def exit_code(self) -> int | None:
        code = self.proc.poll()
        return 128 - code if code is not None and code < 0 else code

    def take_output(self) -> str:
        data, self.buffer = bytes(self.buffer), bytearray()
        text = data.decode("utf-8", errors="replace").replace("\r\n", "\n")
        if self.dropped:
            text = f"[{self.dropped:,} earlier bytes of output were dropped]\n" + text
            self.dropped = 0
        return clean_program_output(text, self.secrets)

    async def wait(self, seconds: float, abort: asyncio.Event) -> None:
        """Until the command exits (and its output is drained), `seconds` pass, or an abort."""
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline and not abort.is_set():
            if self.exit_code is not None:
                drain = time.monotonic() + 0.25
                while not self.eof and time.monotonic() < drain:
                    await asyncio.sleep(_POLL_S)
                return
            await asyncio.sleep(_POLL_S)

    async def close(self) -> None:
        with contextlib.suppress(Exception):
            asyncio.get_running_loop().remove_reader(self.out_fd)
        await kill_group(self.proc.pid)
        for fd in {self.out_fd, self.in_fd}:
            if fd is not None:
                with contextlib.suppress(OSError):
                    os.close(fd)
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.proc.wait(timeout=1)
        atexit.unregister(self._killer)


def _kill_now(pgid: int) -> None:
    with contextlib.suppress(OSError):
        os.killpg(pgid, signal.SIGKILL)


class ExecSessions:
    """The open sessions of one run (`services.exec_sessions`, or shared by the two tools)."""

    def __init__(self) -> None:
        self.sessions: dict[int, ExecSession] = {}
        self._ids = itertools.count(1)

    def next_id(self) -> int:
        return next(self._ids)

    def admission(self, sid: int | None) -> str:
        """How session `sid` was admitted when it started, for permissions (`Call.session`):
        every session exists only because its exec_command call was admitted."""
        session = self.sessions.get(sid) if sid is not None else None
        if session is None:
            return SESSION_UNKNOWN
        return SESSION_CONFINED if session.confined else SESSION_ALLOWED

    def start(self, sid: int | None) -> tuple[str, Path | None] | None:
        """The command that started session `sid` and its folder, or None for no such session."""
        session = self.sessions.get(sid) if sid is not None else None
        return (session.command, session.cwd) if session is not None else None

    async def close_all(self) -> None:
        for session in list(self.sessions.values()):
            await session.close()
        self.sessions.clear()


def _spawn(command: str, cwd: Path, env: dict[str, str], tty: bool, ctx: ToolRunContext
           ) -> tuple[subprocess.Popen[bytes], int, int | None]:  # fmt: skip
    """Start the command held at the gate, record its group, then release it."""
    bash = shutil.which("bash", path=env.get("PATH")) or shutil.which("bash") or "/bin/bash"
    argv: list[str] = [bash, "-c", command]
    sandbox = sandbox_service(ctx)  # SandboxError: refused, nothing runs
    wrapped = sandbox.wrap(argv, cwd, env) if sandbox is not None else None
    if wrapped is not None:
        argv, env = list(wrapped.argv), wrapped.env
    gate_r, gate_w = os.pipe()
    # bash, not sh: dash takes only fds 0-9 in redirections, and the gate's fd may be higher.
    argv = [bash, "-c", _GATE.format(fd=gate_r), "tether-gate", *argv]
    if tty:
        out_fd, slave = os.openpty()
        stdin: int = slave
        stdout: int = slave
    else:
        out_fd, stdout = os.pipe()
        stdin, slave = subprocess.DEVNULL, -1
    try:
        proc = subprocess.Popen(
            argv, stdin=stdin, stdout=stdout, stderr=subprocess.STDOUT, cwd=os.fspath(cwd),
            env={**env, "TERM": "dumb"} if tty else env, start_new_session=True,
            pass_fds=(gate_r, *(wrapped.pass_fds if wrapped is not None else ())),
        )  # fmt: skip
    except BaseException:
        for fd in (gate_w, out_fd):
            os.close(fd)
        raise
    finally:
        os.close(gate_r)
        os.close(stdout)
        if wrapped is not None:
            wrapped.close()
    try:
        groups = ctx.services.shell_groups
        if groups is not None:
            groups.started(proc.pid)
        os.write(gate_w, b"go\n")
    except BaseException:
        _kill_now(proc.pid)
        os.close(out_fd)
        raise
    finally:
        os.close(gate_w)
    return proc, out_fd, out_fd if tty else None


def inner_workdir(path: Path, cwd: Path) -> Path:
    """`workdir` only below the working directory (links resolved): permission checks read the
    command's relative paths from the working directory, and from below it they can only be
    judged more strictly than they run. Elsewhere: SetWorkingDirectory first."""
    real, top = os.path.realpath(path), os.path.realpath(cwd)
    if real != top and not real.startswith(top.rstrip("/") + "/"):
        raise ToolFailure(
            f"Argument `workdir` ({path}) is outside the working directory {cwd}; give a folder "
            "inside it, or move there with SetWorkingDirectory first."
        )
    return Path(real)


def _cap(text: str, max_tokens: int) -> str:
    limit = max(max_tokens, 1) * 4
    if len(text) <= limit:
        return text
    half = limit // 2
    cut = len(text) - 2 * half
    return f"{text[:half]}\n[... {cut} characters truncated ...]\n{text[-half:]}"


async def _report(sessions: ExecSessions, session: ExecSession, max_tokens: int) -> ToolResult:
    output = _cap(session.take_output(), max_tokens)
    wall = time.monotonic() - session.started
    code = session.exit_code
    if code is None:
        head = f"Process running with session ID {session.id}"
    else:
        head = f"Process exited with code {code}"
        sessions.sessions.pop(session.id, None)
        await session.close()
    return ToolResult(f"Wall time: {wall:.1f} seconds\n{head}\nOutput:\n{output}")


def _yield_ms(args: Mapping[str, Any], default: int) -> float:
    value = optional_int(args, "yield_time_ms")
    return min(value if value is not None else default, MAX_YIELD_MS) / 1000


class ExecCommandTool:
    name = "exec_command"
    description = EXEC_DESCRIPTION
    parameters = EXEC_PARAMETERS
    effect = Effect.EXEC

    def __init__(self, sessions: ExecSessions | None = None) -> None:
        self._sessions = sessions or ExecSessions()

    def paths(self, args: Mapping[str, Any], cwd: Path) -> list[Path]:
        return []

    def sessions(self, ctx: ToolRunContext) -> ExecSessions:
        given = ctx.services.exec_sessions
        if isinstance(given, ExecSessions):
            # the run's sessions from now on, also where write_stdin's permission check looks
            self._sessions = given
        return self._sessions

    async def run(self, args: Mapping[str, Any], ctx: ToolRunContext) -> ToolResult:
        try:
            command = require_str(args, "cmd", allow_empty=False)
            optional_str(args, "description")
            workdir = optional_path_text(args, "workdir")
            cwd = inner_workdir(resolve_path(workdir, ctx.cwd), ctx.cwd) if workdir else ctx.cwd
            tty = optional_bool(args, "tty")
            wait_s = _yield_ms(args, DEFAULT_YIELD_MS)
            max_tokens = optional_int(args, "max_output_tokens", minimum=1) or DEFAULT_MAX_OUTPUT_TOKENS
        except ToolFailure as exc:
            return error_result(str(exc))
        if not cwd.is_dir():
            return error_result(f"Working directory does not exist: {cwd}.")
        sessions = self.sessions(ctx)
        if len(sessions.sessions) >= MAX_SESSIONS:
            return error_result(
                f"{MAX_SESSIONS} exec sessions are already open; finish one (write_stdin with "
                "\\u0003 or exit) before starting another."
            )
        env = {**os.environ, **(ctx.env or {})}
        try:
            proc, out_fd, in_fd = _spawn(command, cwd, env, tty, ctx)
        except SandboxError as exc:
            return error_result(sandbox_refusal(exc))
        except OSError as exc:
            return error_result(f"Could not start bash: {exc.strerror or exc}")
        session = ExecSession(sessions.next_id(), proc, out_fd, in_fd, secret_values(env),
                              command, cwd)
        session.confined = ctx.confined
        sessions.sessions[session.id] = session
        await session.wait(wait_s, ctx.abort)
        if ctx.abort.is_set():
            sessions.sessions.pop(session.id, None)
            await session.close()
            return error_result("Interrupted by user")
        return await _report(sessions, session, max_tokens)


class WriteStdinTool:
    name = "write_stdin"
    description = WRITE_DESCRIPTION
    parameters = WRITE_PARAMETERS
    effect = Effect.EXEC

    def __init__(self, exec_tool: ExecCommandTool | None = None) -> None:
        self._exec = exec_tool or ExecCommandTool()

    def paths(self, args: Mapping[str, Any], cwd: Path) -> list[Path]:
        return []

    def session_admission(self, args: Mapping[str, Any]) -> str:
        """What the permission check judges this call by (it carries no command): how its
        session was admitted when exec_command started it (`ExecSessions.admission`)."""
        return self._exec._sessions.admission(_session_id(args))

    def session_start(self, args: Mapping[str, Any]) -> tuple[str, Path | None] | None:
        """The command (and folder) that started the session this call writes to: its input
        is decided against what admitted that command (`Call.session_start`)."""
        return self._exec._sessions.start(_session_id(args))

    async def run(self, args: Mapping[str, Any], ctx: ToolRunContext) -> ToolResult:
        try:
            sid = optional_int(args, "session_id", minimum=1)
            if sid is None:
                raise ToolFailure("Missing required argument `session_id` (a number).")
            chars = optional_str(args, "chars") or ""
            wait_s = _yield_ms(args, DEFAULT_WRITE_YIELD_MS)
            max_tokens = optional_int(args, "max_output_tokens", minimum=1) or DEFAULT_MAX_OUTPUT_TOKENS
        except ToolFailure as exc:
            return error_result(str(exc))
        sessions = self._exec.sessions(ctx)
        session = sessions.sessions.get(sid)
        if session is None:
            open_ids = ", ".join(str(i) for i in sessions.sessions) or "none"
            return error_result(f"No running session {sid} (open sessions: {open_ids}).")
        if chars:
            if session.in_fd is None:
                return error_result(
                    f"Session {sid} has no stdin (it was started without tty); start it with "
                    "`tty: true` to send input."
                )
            try:
                os.write(session.in_fd, chars.encode("utf-8"))
            except OSError as exc:
                return error_result(f"Could not write to session {sid}: {exc.strerror or exc}")
        await session.wait(wait_s, ctx.abort)
        return await _report(sessions, session, max_tokens)


def _session_id(args: Mapping[str, Any]) -> int | None:
    try:
        return optional_int(args, "session_id", minimum=1)
    except ToolFailure:
        return None


def exec_tools() -> dict[str, Callable[[], Tool]]:
    """Factories: the exec_command and write_stdin built for one registry share their sessions."""
    shared: dict[str, ExecCommandTool] = {}

    def exec_tool() -> ExecCommandTool:
        return shared.setdefault("exec", ExecCommandTool())

    return {"exec_command": exec_tool, "write_stdin": lambda: WriteStdinTool(exec_tool())}
