"""What the real-bubblewrap tests share: running a command under a policy, the workspace policy."""

from __future__ import annotations

import os
import subprocess
import sys
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
