"""The leash a stdio MCP server runs on: it dies with tether, with everything it started.

`python -m tether.mcp.leash -- COMMAND ARGS…` is what tether spawns for a stdio server (in a new
session, so a process group of its own). The leash asks the kernel to signal it when its parent
(tether) dies — also on `kill -9`, which no handler of tether's can see — forks the server into
the same group with the inherited stdin/stdout, and on that signal (or SIGTERM, SIGHUP, SIGINT)
kills the whole group, grandchildren such as `npx`'s node included. Standard library only: it
costs one small interpreter start per server.

Tether's side: `find_leash(token)` is the pid of the leash it started with `TETHER_MCP_LEASH=token`
in its environment (one of this process's children), and `kill_leash(pid, token)` kills that
leash's whole group at once — what closing does to a server that did not stop by itself, or whose
call was abandoned, instead of the SDK's seconds of grace.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys

PARENT_ENV = "TETHER_MCP_PARENT"
LEASH_ENV = "TETHER_MCP_LEASH"  # a token naming one leash among tether's children
_PR_SET_PDEATHSIG = 1


def _environ_has(pid: int, token: str) -> bool:
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            return f"{LEASH_ENV}={token}".encode() in f.read().split(b"\0")
    except OSError:
        return False


def _children() -> list[int]:
    """This process's children (Linux /proc; none elsewhere)."""
    pids: list[int] = []
    try:
        tasks = os.listdir("/proc/self/task")
    except OSError:
        return pids
    for tid in tasks:
        try:
            with open(f"/proc/self/task/{tid}/children") as f:
                pids.extend(int(p) for p in f.read().split())
        except (OSError, ValueError):
            continue
    return pids


def _children_by_parent() -> list[int]:
    """This process's children found the slow way: every process's parent in /proc."""
    me = os.getpid()
    pids: list[int] = []
    try:
        entries = os.listdir("/proc")
    except OSError:
        return pids
    for entry in entries:
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                if int(f.read().rsplit(")", 1)[1].split()[1]) == me:
                    pids.append(int(entry))
        except (OSError, IndexError, ValueError):
            continue
    return pids


def find_leash(token: str) -> int | None:
    """The pid of this process's leash child started with `LEASH_ENV=token`, if there is one
    (the per-thread children lists first; they can miss a child, so then every process)."""
    for children in (_children, _children_by_parent):
        found = next((pid for pid in children() if _environ_has(pid, token)), None)
        if found is not None:
            return found
    return None


def kill_leash(pid: int, token: str) -> bool:
    """SIGKILL the process group of leash `pid` (it leads its group), when `pid` is still that
    leash; False when it is gone already."""
    if not _environ_has(pid, token):
        return False
    try:
        if os.getpgid(pid) != pid:
            return False
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def _kill_group(*_: object) -> None:
    os.killpg(os.getpgrp(), signal.SIGKILL)  # the leash is in the group: it goes too


def main(argv: list[str]) -> int:
    if argv[:1] == ["--"]:
        argv = argv[1:]
    if not argv:
        print("usage: python -m tether.mcp.leash -- COMMAND [ARGS...]", file=sys.stderr)
        return 2
    for signum in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
        signal.signal(signum, _kill_group)
    if sys.platform.startswith("linux"):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    os.environ.pop(LEASH_ENV, None)  # the token names the leash, not the server
    parent = os.environ.pop(PARENT_ENV, "")
    if parent.isdigit() and os.getppid() != int(parent):
        _kill_group()  # tether died before the death signal was armed
    if os.getpgrp() != os.getpid():
        os.setpgid(0, 0)  # started without a session of its own: make the group
    pid = os.fork()
    if pid == 0:
        for signum in (signal.SIGTERM, signal.SIGHUP, signal.SIGINT):
            signal.signal(signum, signal.SIG_DFL)
        try:
            os.execvp(argv[0], argv)
        except OSError as exc:
            print(f"tether: cannot start MCP server {argv[0]!r}: {exc.strerror}", file=sys.stderr)
            os._exit(127)
    while True:
        try:
            _, status = os.waitpid(pid, 0)
        except InterruptedError:
            continue
        return os.waitstatus_to_exitcode(status) & 0xFF


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
