"""The Landlock layer beneath bubblewrap: built on first use, and really enforcing inside.

Where the kernel has no Landlock these tests skip naming it (CI's kernel has it: they run).
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tests.requirements import missing
from tests.sandbox.support import ws_policy
from tether.sandbox import SandboxStatus, wrap_command
from tether.sandbox.landlock import helper_path, landlock_status


@pytest.fixture(scope="module")
def helper(tmp_path_factory: pytest.TempPathFactory) -> Path:
    found = landlock_status()
    if found.abi is None:
        missing("Landlock", found.reason)
    path, why = helper_path(tmp_path_factory.mktemp("home"))
    assert path is not None, why
    return path


def test_the_helper_denies_writes_outside_its_roots(helper: Path, tmp_path: Path) -> None:
    inside, outside = tmp_path / "in", tmp_path / "out"
    inside.mkdir()
    outside.mkdir()
    done = subprocess.run(
        [str(helper), "--rw", str(inside), "--rw", "/dev", "--",
         "bash", "-c", f"echo a > {inside}/a; echo b > {outside}/b; echo c > /dev/null"],
        capture_output=True, text=True, timeout=30,
    )
    assert (inside / "a").read_text() == "a\n"
    assert not (outside / "b").exists() and "Permission denied" in done.stderr


def _connect_errno(status: SandboxStatus, ws: Path, env: dict[str, str]) -> str:  # noqa: F811
    port_owner = socket.socket()
    port_owner.bind(("127.0.0.1", 0))
    port = port_owner.getsockname()[1]
    probe = (
        "import socket, errno\n"
        "s = socket.socket()\n"
        "try:\n"
        f"    s.connect(('127.0.0.1', {port}))\n"
        "except OSError as e:\n"
        "    print(errno.errorcode[e.errno])\n"
    )
    with wrap_command(ws_policy(ws), [sys.executable, "-c", probe], cwd=ws, env=env,
                      status=status) as wrapped:
        done = subprocess.run(wrapped.argv, env=wrapped.env, pass_fds=wrapped.pass_fds,
                              capture_output=True, text=True, timeout=30)
    port_owner.close()
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_landlock_runs_inside_the_workspace_sandbox(
    helper: Path, status: SandboxStatus, ws: Path, tmp_path: Path  # noqa: F811
) -> None:
    home = tmp_path / "tether-home"
    env = {**os.environ, "TETHER_HOME": str(home)}
    if status.landlock_abi is None or status.landlock_abi < 4:
        missing("Landlock ABI >= 4 (network rules)", f"this kernel has ABI {status.landlock_abi}")
    # Inside bwrap's empty network namespace a connect is refused; under Landlock's TCP rule it
    # is denied outright (EACCES) before it reaches the network: the layer is really there.
    assert _connect_errno(status, ws, env) == "EACCES"
    assert _connect_errno(status, ws, {**env, "TETHER_LANDLOCK": "0"}) in ("ECONNREFUSED", "ENETUNREACH")
    with wrap_command(ws_policy(ws), ["true"], cwd=ws, env=env, status=status) as wrapped:
        assert any("landlock-exec" in a for a in wrapped.argv)
