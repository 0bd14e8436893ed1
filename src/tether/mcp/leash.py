"""The leash a stdio MCP server runs on: it dies with tether, with everything it started.

`python -m tether.mcp.leash -- COMMAND ARGS…` is what tether spawns for a stdio server (in a new
session, so a process group of its own). The leash asks the kernel to signal it when its parent
(tether) dies — also on `kill -9`, which no handler of tether's can see — forks the server into
the same group with the inherited stdin/stdout, and on that signal (or SIGTERM, SIGHUP, SIGINT)
kills the whole group, grandchildren such as `npx`'s node included. Standard library only: it
costs one small interpreter start per server.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys

PARENT_ENV = "TETHER_MCP_PARENT"
_PR_SET_PDEATHSIG = 1


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
