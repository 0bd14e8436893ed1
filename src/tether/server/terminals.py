"""Terminals for App Server clients (reference §12.3: `terminal_spawn`, `terminal_input`,
`terminal_resize`, `terminal_kill`; `terminal_spawned`, `terminal_output`, `terminal_exited`):
the user's shell on a pseudo-terminal in one of the connection's workspaces.

A terminal is an unconfined shell, outside the permission system and any sandbox, so only an
unscoped connection (the server's operator: no token, a capability token or an unscoped JWT)
may open one; a scoped token is refused whatever it asks. Each shell leads its own process
group, which is killed when the terminal is killed or its connection goes away.
"""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import fcntl
import os
import signal
import struct
import termios
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tether.errors import UsageError
from tether.server import v2_frames
from tether.server.request_kit import Call, Request, Scope, request

if TYPE_CHECKING:
    from tether.server.app_server import Connection

READ_CHUNK = 65536
MAX_TERMINALS = 16  # per connection


class Terminal:
    """One shell on a pty; its output goes to the connection that opened it."""

    def __init__(self, conn: Connection, terminal_id: str, master: int,
                 proc: asyncio.subprocess.Process) -> None:
        self.conn, self.id, self.master, self.proc = conn, terminal_id, master, proc
        self._decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        self.closed = False
        loop = asyncio.get_running_loop()
        loop.add_reader(master, self._readable)
        self.waiter = asyncio.ensure_future(self._wait())

    def _readable(self) -> None:
        try:
            data = os.read(self.master, READ_CHUNK)
        except BlockingIOError:
            return
        except OSError:  # EIO: the shell and everything on the pty are gone
            data = b""
        if not data:
            asyncio.get_running_loop().remove_reader(self.master)
            return
        text = self._decoder.decode(data)
        if text:
            self.conn.send_frame(v2_frames.terminal_output(self.id, text))

    async def _wait(self) -> None:
        code = await self.proc.wait()
        self._readable()  # what the shell wrote last
        self._close_pty()
        self.conn.terminals.pop(self.id, None)
        self.conn.send_frame(v2_frames.terminal_exited(self.id, code))

    def _close_pty(self) -> None:
        if not self.closed:
            self.closed = True
            with contextlib.suppress(ValueError, OSError):
                asyncio.get_running_loop().remove_reader(self.master)
            with contextlib.suppress(OSError):
                os.close(self.master)

    async def write(self, data: str) -> None:
        raw = data.encode("utf-8")
        while raw and not self.closed:
            try:
                raw = raw[os.write(self.master, raw):]
            except BlockingIOError:
                await asyncio.sleep(0.01)  # the shell is not reading yet

    def resize(self, cols: int, rows: int) -> None:
        if not self.closed:
            fcntl.ioctl(self.master, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))

    def kill(self, sig: int = signal.SIGKILL) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, sig)


def close_all(conn: Connection) -> None:
    """The connection went away: kill every shell it opened."""
    for terminal in list(conn.terminals.values()):
        terminal.kill()


def _size(call: Call) -> tuple[int, int]:
    return call.count("cols", 80, most=1000), call.count("rows", 24, most=1000)


def _terminal(call: Call) -> Terminal:
    terminal_id = call.text("terminal_id")
    found = call.conn.terminals.get(terminal_id)
    if found is None:
        raise UsageError(f"no terminal {terminal_id!r} on this connection")
    return found


async def terminal_spawn(call: Call) -> dict[str, Any]:
    from tether.runtime.manage.files_ops import Workspace
    from tether.server.requests_files import workspace

    terminal_id = call.text("terminal_id")
    conn = call.conn
    try:
        call.require_unscoped()  # an unconfined shell: the operator's connections only
        if terminal_id in conn.terminals:
            raise UsageError(f"terminal {terminal_id!r} is already open on this connection")
        if len(conn.terminals) >= MAX_TERMINALS:
            raise UsageError(f"this connection has {MAX_TERMINALS} terminals open; kill one first")
        cols, rows = _size(call)
        ws: Workspace = workspace(call)
        cwd = call.opt_text("cwd") or (ws.roots[0] if ws.roots else None)
        _, real = ws.check(cwd, "cwd")
        if not Path(real).is_dir():
            raise UsageError(f"cwd {cwd} is not a directory")
        conn.terminals[terminal_id] = await _start(call, terminal_id, real, cols, rows)
    except Exception as exc:
        conn.send_frame(v2_frames.terminal_exited(terminal_id, -1, str(exc)))
        return {}
    conn.send_frame(v2_frames.terminal_spawned(terminal_id, conn.terminals[terminal_id].proc.pid))
    return {}


async def _start(call: Call, terminal_id: str, cwd: str, cols: int, rows: int) -> Terminal:
    env = dict(call.env)
    env.setdefault("TERM", "xterm-256color")
    shell = env.get("SHELL") or "/bin/sh"
    master, slave = os.openpty()
    try:
        fcntl.ioctl(master, termios.TIOCSWINSZ, struct.pack("HHHH", rows, cols, 0, 0))
        os.set_blocking(master, False)
        proc = await asyncio.create_subprocess_exec(
            shell, stdin=slave, stdout=slave, stderr=slave, cwd=cwd, env=env,
            start_new_session=True, preexec_fn=_take_terminal,
        )
    except BaseException:
        os.close(master)
        raise
    finally:
        os.close(slave)
    return Terminal(call.conn, terminal_id, master, proc)


def _take_terminal() -> None:
    """In the child, a new session's leader: make the pty its controlling terminal (job
    control, Ctrl-C to the foreground group)."""
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)


async def terminal_input(call: Call) -> dict[str, Any]:
    data = call.frame.msg.get("data")
    if not isinstance(data, str):
        raise call.read.fail("data", "is required (a string)")
    await _terminal(call).write(data)
    return {}


def terminal_resize(call: Call) -> dict[str, Any]:
    terminal = _terminal(call)
    terminal.resize(*_size(call))
    return {}


def terminal_kill(call: Call) -> dict[str, Any]:
    _terminal(call).kill()  # terminal_exited follows when the shell is gone
    return {}


FAMILY: dict[str, Request] = {
    "terminal_spawn": request("terminal_id cols rows cwd", terminal_spawn, Scope.OWN,
                              answered=False),
    "terminal_input": request("terminal_id data", terminal_input, Scope.UNSCOPED,
                              answered=False),
    "terminal_resize": request("terminal_id cols rows", terminal_resize, Scope.UNSCOPED,
                               answered=False),
    "terminal_kill": request("terminal_id", terminal_kill, Scope.UNSCOPED, answered=False),
}
