"""Shell children in their own process group: spawn `bash -c`, watch it exit, kill the whole group.

Every command runs with `start_new_session=True`, so its pid is also its process-group id and
everything it forks (pipelines, `cmd &` grandchildren) can be signalled at once. Killing is
SIGTERM to the group, up to a grace period for it to empty, then SIGKILL: nothing from a group
outlives the call that owns it.

A `Sandbox` (the runtime's `ShellSandbox`) may confine the launch: the `bash -c` argv is wrapped
(bwrap or sandbox-exec in front), still in its own group. A `SandboxError` from wrapping
propagates before anything is spawned: a command meant for the sandbox never runs outside it.

With a `ShellGroups` ledger the child is spawned held: a `/bin/sh` gate reads one line from a
pipe on its stdin before it execs the command, and tether writes that line only after the group
is fsynced in the ledger. If tether dies anywhere in between, the gate reads EOF and exits: no
command runs unless the next run can find its group.

Test failpoints (environment, read per spawn): `TETHER_FAILPOINT=spawn.before-record` or
`spawn.after-record` SIGKILLs tether at that point; `TETHER_FAILPOINT_SPAWN_KILL_MS=<ms>` SIGKILLs
it that long after the spawn begins, wherever it is by then.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import subprocess
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, runtime_checkable

if TYPE_CHECKING:
    from tether.sandbox.detect import WrappedCommand
    from tether.sandbox.policy import SandboxError
    from tether.tools.shell_groups import ShellGroups

KILL_GRACE_S = 1.0
# Reads the go-ahead line, then runs the command with stdin on /dev/null; EOF (tether died
# before recording the group) or anything but "go" exits without running it.
_GATE = 'IFS= read -r go || exit 125; [ "$go" = go ] || exit 125; exec "$@" </dev/null'
_GATE_SHELL = "/bin/sh"
_POLL_S = 0.02
# Output beyond this is dropped in memory (and counted); 16 MiB is far past any useful answer.
CAPTURE_LIMIT_BYTES = 16 * 1024 * 1024


@runtime_checkable
class Sandbox(Protocol):
    """Confines one launch: what to spawn instead of `argv`, or SandboxError (run nothing)."""

    def wrap(self, argv: Sequence[str], cwd: Path, env: Mapping[str, str]) -> WrappedCommand: ...


def sandbox_refusal(exc: SandboxError) -> str:
    """The tool-result text for a command the sandbox refused to start."""
    return f"Sandbox error: {exc}. The command did not run."


class _ShellProtocol(asyncio.SubprocessProtocol):
    def __init__(self, loop: asyncio.AbstractEventLoop, capture_limit: int) -> None:
        self.output = bytearray()
        self.dropped_bytes = 0
        self._capture_limit = capture_limit
        self.exited: asyncio.Future[None] = loop.create_future()
        self.finished: asyncio.Future[None] = loop.create_future()  # exited and pipes closed

    def pipe_data_received(self, fd: int, data: bytes | bytearray) -> None:
        room = max(self._capture_limit - len(self.output), 0)
        self.output += data[:room]
        self.dropped_bytes += len(data) - min(room, len(data))

    def process_exited(self) -> None:
        if not self.exited.done():
            self.exited.set_result(None)

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.finished.done():
            self.finished.set_result(None)


class ShellProcess:
    """One `bash -c` child leading its own process group."""

    def __init__(self, transport: asyncio.SubprocessTransport, protocol: _ShellProtocol) -> None:
        self._transport = transport
        self._protocol = protocol
        self.pid: int = transport.get_pid()

    @property
    def pgid(self) -> int:
        return self.pid

    @property
    def exited(self) -> asyncio.Future[None]:
        return self._protocol.exited

    @property
    def returncode(self) -> int | None:
        return self._transport.get_returncode()

    def exit_code(self) -> int | None:
        """The shell's convention: a death by signal N reads as 128+N."""
        code = self.returncode
        if code is not None and code < 0:
            return 128 - code
        return code

    def output_text(self) -> str:
        text = self._protocol.output.decode("utf-8", errors="replace")
        if self._protocol.dropped_bytes:
            text += (
                f"\n[{self._protocol.dropped_bytes:,} more bytes of output were discarded "
                "(capture limit reached)]"
            )
        return text

    async def wait_output_closed(self, timeout: float) -> bool:
        """Wait for EOF on the output pipe (every holder of it gone); False on timeout."""
        try:
            await asyncio.wait_for(asyncio.shield(self._protocol.finished), timeout)
        except TimeoutError:
            return False
        return True

    async def kill(self, grace: float = KILL_GRACE_S) -> None:
        await kill_group(self.pgid, grace)

    def kill_now(self) -> None:
        """Synchronous SIGKILL of the group, for paths that cannot await (cancellation)."""
        signal_group(self.pgid, signal.SIGKILL)

    async def close(self) -> None:
        """Reap the child and close the transport; call once the group is dead or dying.

        Awaiting the exit first keeps asyncio's child watcher from reporting to a closed loop,
        and closing the transport releases the pipe even if an escaped process still holds it.
        """
        if not self.exited.done():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(self.exited), KILL_GRACE_S * 2)
        self._transport.close()


async def spawn_shell(
    command: str,
    *,
    cwd: Path,
    env: Mapping[str, str],
    log_fd: int | None = None,
    capture_limit: int = CAPTURE_LIMIT_BYTES,
    sandbox: Sandbox | None = None,
    groups: ShellGroups | None = None,
) -> ShellProcess:
    """Start `bash -c command`; output is captured in memory, or written to `log_fd` if given.

    With `sandbox`, the command runs confined by it; SandboxError means nothing was started.
    """
    bash = shutil.which("bash", path=env.get("PATH")) or shutil.which("bash")
    if bash is None:
        raise FileNotFoundError("bash was not found on PATH")
    argv: Sequence[str] = (bash, "-c", command)
    child_env = dict(env)
    wrapped = sandbox.wrap(argv, cwd, child_env) if sandbox is not None else None
    if wrapped is not None:
        argv, child_env = wrapped.argv, wrapped.env
    gate_r = gate_w = -1
    if groups is not None:
        gate_r, gate_w = os.pipe()  # both close-on-exec; only the child's stdin copy is inherited
        argv = (_GATE_SHELL, "-c", _GATE, "tether-gate", *argv)
    _arm_kill_timer()
    loop = asyncio.get_running_loop()
    try:
        transport, protocol = await loop.subprocess_exec(
            lambda: _ShellProtocol(loop, capture_limit),
            *argv,
            stdin=gate_r if groups is not None else subprocess.DEVNULL,
            stdout=log_fd if log_fd is not None else subprocess.PIPE,
            stderr=subprocess.STDOUT,
            cwd=os.fspath(cwd),
            env=child_env,
            start_new_session=True,
            pass_fds=wrapped.pass_fds if wrapped is not None else (),
        )
    except BaseException:
        if groups is not None:
            os.close(gate_w)
        raise
    finally:
        # The child holds its own copies (bwrap reads the seccomp program from one).
        if wrapped is not None:
            wrapped.close()
        if groups is not None:
            os.close(gate_r)
    process = ShellProcess(transport, protocol)
    if groups is not None:
        await _release_after_recording(process, groups, gate_w)
    return process


async def _release_after_recording(process: ShellProcess, groups: ShellGroups, gate_w: int) -> None:
    """Record the held child's group durably, then let it run; if recording fails it never runs."""
    try:
        _failpoint("spawn.before-record")
        groups.started(process.pgid)
        _failpoint("spawn.after-record")
        os.write(gate_w, b"go\n")
    except BaseException:
        os.close(gate_w)  # EOF at the gate: the command is not run
        gate_w = -1
        process.kill_now()
        await process.close()
        raise
    finally:
        if gate_w >= 0:
            os.close(gate_w)


def _failpoint(name: str) -> None:
    if os.environ.get("TETHER_FAILPOINT") == name:
        os.kill(os.getpid(), signal.SIGKILL)


def _arm_kill_timer() -> None:
    delay = os.environ.get("TETHER_FAILPOINT_SPAWN_KILL_MS")
    if delay:
        timer = threading.Timer(float(delay) / 1000, os.kill, (os.getpid(), signal.SIGKILL))
        timer.daemon = True
        timer.start()


def live_group_members(pgid: int) -> set[int] | None:
    """Pids in process group `pgid` that are not zombies; None where /proc is unavailable.

    Zombies are excluded on purpose: an orphan reparented to an init that never reaps stays a
    zombie forever, and it can no longer do anything.
    """
    try:
        names = os.listdir("/proc")
    except OSError:
        return None
    members: set[int] = set()
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as handle:
                stat = handle.read()
        except OSError:
            continue
        # "pid (comm) state ppid pgrp ...": comm may contain spaces and parentheses.
        fields = stat[stat.rfind(b")") + 2 :].split()
        if len(fields) >= 3 and fields[0] != b"Z" and int(fields[2]) == pgid:
            members.add(int(name))
    return members


def group_alive(pgid: int) -> bool:
    members = live_group_members(pgid)
    if members is not None:
        return bool(members)
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def signal_group(pgid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


async def kill_group(pgid: int, grace: float = KILL_GRACE_S) -> None:
    """SIGTERM the group, wait up to `grace` seconds for it to empty, then SIGKILL what is left."""
    if not group_alive(pgid):
        return
    signal_group(pgid, signal.SIGTERM)
    # A stopped process holds SIGTERM until continued.
    signal_group(pgid, signal.SIGCONT)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + grace
    while loop.time() < deadline:
        await asyncio.sleep(_POLL_S)
        if not group_alive(pgid):
            return
    signal_group(pgid, signal.SIGKILL)
    deadline = loop.time() + grace
    while group_alive(pgid) and loop.time() < deadline:
        await asyncio.sleep(_POLL_S)
