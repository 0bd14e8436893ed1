"""tether's own files (background logs, overflow files) are out of a sandboxed command's reach,
and a symlink or FIFO planted where tether writes or reads them redirects nothing."""

from __future__ import annotations

import asyncio
import os
import subprocess
from pathlib import Path

import pytest

from tests.requirements import missing, need_bwrap
from tether.errors import ToolFailure
from tether.runtime.policy.sandboxing import shell_sandbox_from
from tether.sandbox.landlock import landlock_status
from tether.tools.background import BackgroundTasks
from tether.tools.output import write_private_file


def _start(tasks: BackgroundTasks, command: str, cwd: Path) -> str:
    async def go() -> str:
        task = await tasks.start(command, cwd=cwd)
        await tasks.wait(task.id, 10)
        return task.id

    return asyncio.run(go())


def test_a_planted_log_symlink_redirects_no_write(tmp_path: Path) -> None:
    scratch, outside = tmp_path / "scratch", tmp_path / "outside.txt"
    scratch.mkdir()
    outside.write_text("keep\n")
    (scratch / "bash_1.log").symlink_to(outside)
    tasks = BackgroundTasks(scratch)
    task_id = _start(tasks, "echo written", tmp_path)
    assert task_id == "bash_2"  # the planted name is skipped, never opened through
    assert outside.read_text() == "keep\n"
    assert (scratch / "bash_2.log").read_text() == "written\n"


def test_a_log_swapped_for_a_symlink_or_fifo_is_not_read(tmp_path: Path) -> None:
    scratch, secret = tmp_path / "scratch", tmp_path / "secret.txt"
    scratch.mkdir()
    secret.write_text("CANARY-own-files\n")
    tasks = BackgroundTasks(scratch)
    task_id = _start(tasks, "echo fine", tmp_path)
    log = scratch / f"{task_id}.log"
    log.unlink()
    log.symlink_to(secret)
    with pytest.raises(ToolFailure) as err:
        tasks.output(task_id)
    assert "CANARY" not in str(err.value)
    log.unlink()
    os.mkfifo(log)
    with pytest.raises(ToolFailure, match="not a regular file"):
        tasks.output(task_id)  # returns at once instead of blocking on the FIFO


def test_a_symlinked_scratch_dir_is_refused(tmp_path: Path) -> None:
    real, link = tmp_path / "real", tmp_path / "link"
    real.mkdir()
    link.symlink_to(real)
    with pytest.raises(ToolFailure, match="not a symlink"):
        _start(BackgroundTasks(link), "echo x", tmp_path)
    assert list(real.iterdir()) == []
    with pytest.raises(OSError, match="symlink"):
        write_private_file(link, "bash-output-", "text")
    assert list(real.iterdir()) == []


@pytest.mark.parametrize("backend", ["bwrap", "landlock"])
def test_sandboxed_commands_cannot_write_tethers_scratch(tmp_path: Path, backend: str) -> None:
    if backend == "bwrap":
        need_bwrap(seccomp=True)
    elif landlock_status().abi is None:
        missing("Landlock", landlock_status().reason)
    ws, th = tmp_path / "ws", tmp_path / "th"
    ws.mkdir()
    scratch = th / "tmp" / "conv"
    target = tmp_path / "target.txt"
    target.write_text("keep\n")
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "TETHER_HOME": str(th),
           "TETHER_FS_SANDBOX": "1", "TETHER_SANDBOX_BACKEND": backend}
    sandbox = shell_sandbox_from(env, None, ws, th, scratch)
    assert sandbox is not None
    assert sandbox.policy.tmp_dir == (scratch / "sandbox-tmp").resolve()
    script = (
        f"ln -s {target} {scratch}/bash_1.log; ln -s {target} {scratch}/shell-groups.jsonl; "
        f"echo x > {scratch}/bash-output-1.txt; mkdir {scratch}/d; "
        'echo ok > "$TMPDIR/mine" && cat "$TMPDIR/mine"'
    )
    with sandbox.wrap(["bash", "-c", script], ws, env) as wrapped:
        done = subprocess.run(wrapped.argv, env=wrapped.env, pass_fds=wrapped.pass_fds, cwd=ws,
                              capture_output=True, text=True, timeout=30)
    assert done.stdout == "ok\n", done.stderr
    assert sandbox.guard_state is not None
    guard = sandbox.guard_state.name  # the armed-names guard's own state, written by tether
    assert sorted(p.name for p in scratch.iterdir()) == sorted([guard, guard + ".lock", "sandbox-tmp"])
    tasks = BackgroundTasks(scratch)
    _start(tasks, "echo log", ws)
    assert target.read_text() == "keep\n"


@pytest.mark.parametrize("backend", ["bwrap", "landlock"])
def test_tether_home_inside_the_workspace_stays_read_only(tmp_path: Path, backend: str) -> None:
    """cwd = $HOME with TETHER_HOME under it: the workspace is writable, tether's state is not."""
    if backend == "bwrap":
        need_bwrap(seccomp=True)
    elif landlock_status().abi is None:
        missing("Landlock", landlock_status().reason)
    home = tmp_path / "home"
    th = home / ".local" / "share" / "tether"
    (th / "agents").mkdir(parents=True)
    (th / "settings.json").write_text("{}")
    scratch = th / "tmp" / "conv"
    env = {"PATH": os.environ["PATH"], "HOME": str(home), "TETHER_HOME": str(th),
           "TETHER_FS_SANDBOX": "1", "TETHER_SANDBOX_BACKEND": backend}
    sandbox = shell_sandbox_from(env, None, home, th, scratch)
    assert sandbox is not None
    script = (
        f"echo '{{\"hooks\": 1}}' > {th}/settings.json; touch {th}/agents/planted; "
        f"touch {scratch}/bash_9.log; echo ws > notes.txt; echo tmp > $TMPDIR/t && cat $TMPDIR/t"
    )
    with sandbox.wrap(["bash", "-c", script], home, env) as wrapped:
        done = subprocess.run(wrapped.argv, env=wrapped.env, pass_fds=wrapped.pass_fds, cwd=home,
                              capture_output=True, text=True, timeout=30)
    assert (th / "settings.json").read_text() == "{}", done.stderr
    assert not (th / "agents" / "planted").exists() and not (scratch / "bash_9.log").exists()
    assert (home / "notes.txt").read_text() == "ws\n" and done.stdout == "tmp\n", done.stderr


@pytest.mark.parametrize("backend", ["bwrap", "landlock"])
def test_a_subagent_that_writes_tethers_home_cannot_replace_its_helpers(
    tmp_path: Path, backend: str
) -> None:
    """landlock-exec and armed-guard run outside any sandbox; they live in $TETHER_HOME/bin,
    read-only even for the memory subagent, whose sandbox may write the rest of tether's home."""
    from tether.sandbox import memory_subagent_policy, wrap_command
    from tether.sandbox.landlock import guard_path, helper_path

    if backend == "bwrap":
        need_bwrap(seccomp=True)
    elif landlock_status().abi is None:
        missing("Landlock", landlock_status().reason)
    th = tmp_path / "th"
    (th / "agents" / "p1" / "memory").mkdir(parents=True)
    helper, why = helper_path(th)
    guard, why_guard = guard_path(th)
    assert helper is not None and guard is not None, (why, why_guard)
    before = {p: p.read_bytes() for p in (helper, guard)}
    policy = memory_subagent_policy(th, None, "p1", home=tmp_path, tmp_dir=tmp_path / "t",
                                    base_writable=[th], writable_memories=["p1"])
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "TETHER_HOME": str(th),
           "TETHER_SANDBOX_BACKEND": backend}
    script = (f"for f in {th}/bin/*; do echo evil > $f; rm -f $f; done; mv {th}/bin {th}/old; "
              f"echo ok > {th}/records.txt")
    with wrap_command(policy, ["bash", "-c", script], cwd=tmp_path, env=env) as wrapped:
        done = subprocess.run(wrapped.argv, env=wrapped.env, pass_fds=wrapped.pass_fds,
                              cwd=tmp_path, capture_output=True, text=True, timeout=30)
    assert {p: p.read_bytes() for p in (helper, guard)} == before, done.stderr
    assert (th / "records.txt").read_text() == "ok\n", done.stderr
