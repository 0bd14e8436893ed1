"""What the real-bubblewrap tests share: running a command under a policy, the workspace policy."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import threading
from collections.abc import Sequence
from pathlib import Path

from tether.sandbox import SandboxPolicy, SandboxStatus, workspace_policy, wrap_command

PYTHON = sys.executable


def run(
    policy: SandboxPolicy,
    argv: Sequence[str],
    cwd: Path,
    status: SandboxStatus,
    timeout: float = 30,
) -> subprocess.CompletedProcess[str]:
    with wrap_command(policy, argv, cwd=cwd, env=dict(os.environ), status=status) as wrapped:
        assert wrapped.backend == "bwrap"
        return subprocess.run(
            wrapped.argv,
            env=wrapped.env,
            pass_fds=wrapped.pass_fds,
            capture_output=True,
            text=True,
            timeout=timeout,
            start_new_session=True,
            stdin=subprocess.DEVNULL,
        )


def sh(
    policy: SandboxPolicy, script: str, cwd: Path, status: SandboxStatus
) -> subprocess.CompletedProcess[str]:
    return run(policy, ["bash", "-c", script], cwd, status)


def ws_policy(ws: Path, **kw: object) -> SandboxPolicy:
    return workspace_policy(ws, tmp_dir=ws.parent / "sbx-tmp", **kw)  # type: ignore[arg-type]


class CountingServer:
    """A host daemon on a listening socket (TCP port, Unix path or abstract name): it counts the
    connections it accepts, so a test can show that none got through."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.sock.listen(16)
        self.sock.settimeout(0.2)
        self.accepted = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    @property
    def port(self) -> int:  # of a TCP server
        return int(self.sock.getsockname()[1])

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except (TimeoutError, OSError):
                continue
            self.accepted += 1
            conn.close()

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        self.sock.close()
