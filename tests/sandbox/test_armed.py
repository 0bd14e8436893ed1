"""Writes that arm later execution: a workspace-sandboxed command cannot leave behind a nested
`.git`, a bare repository layout, `.envrc`, `.vscode/tasks.json` or `.idea` that a later
unsandboxed step would run or load, nor change the ones already there (real sandbox, effects
checked on disk)."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.requirements import missing, need_bwrap
from tether.runtime.policy.sandboxing import ShellSandbox, shell_sandbox_from
from tether.sandbox import armed
from tether.sandbox.landlock import landlock_status

PLANTS = {
    "nested .git config": ("mkdir -p sub/.git && printf '[core]\\nfsmonitor = touch PWN\\n' > sub/.git/config",
                           "sub/.git"),
    "nested .git hooks": ("mkdir -p sub/.git/hooks && echo 'touch PWN' > sub/.git/hooks/pre-commit",
                          "sub/.git"),
    "gitfile": ("mkdir -p sub && echo 'gitdir: /tmp/evil' > sub/.git", "sub/.git"),
    "bare layout": ("mkdir -p src/objects src/refs && echo 'ref: refs/heads/main' > src/HEAD",
                    "src/HEAD"),
    "envrc": ("echo 'touch PWN' > src/.envrc", "src/.envrc"),
    "vscode tasks": ("mkdir -p src/.vscode && echo '{}' > src/.vscode/tasks.json", "src/.vscode"),
    "idea": ("mkdir -p src/.idea", "src/.idea"),
    "renamed in": ("mkdir -p src/x/hooks && mv src/x src/.git", "src/.git"),
    "tether dir": ("mkdir -p src/.tether && echo '{}' > src/.tether/settings.json", "src/.tether"),
}


@pytest.fixture(params=["bwrap", "landlock"])
def backend(request: pytest.FixtureRequest) -> str:
    if request.param == "bwrap":
        need_bwrap(seccomp=True)
    elif landlock_status().abi is None:
        missing("Landlock", landlock_status().reason)
    return str(request.param)


def _workspace(tmp_path: Path, backend: str) -> tuple[Path, ShellSandbox, dict[str, str]]:
    ws, th = tmp_path / "ws", tmp_path / "th"
    (ws / "src").mkdir(parents=True)
    (ws / "src" / "a.py").write_text("a\n")
    (ws / "vendor" / "lib" / ".git").mkdir(parents=True)
    (ws / "vendor" / "lib" / ".git" / "config").write_text("[core]\n")
    (ws / "tools").mkdir()
    (ws / "tools" / ".envrc").write_text("export A=1\n")
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "TETHER_HOME": str(th),
           "TETHER_FS_SANDBOX": "1", "TETHER_SANDBOX_BACKEND": backend}
    sandbox = shell_sandbox_from(env, None, ws, th, th / "tmp" / "conv")
    assert sandbox is not None and sandbox.guard_state is not None
    return ws, sandbox, env


def _run(sandbox: ShellSandbox, ws: Path, env: dict[str, str], script: str) -> subprocess.CompletedProcess[str]:
    with sandbox.wrap(["bash", "-c", script], ws, env) as wrapped:
        return subprocess.run(wrapped.argv, env=wrapped.env, pass_fds=wrapped.pass_fds, cwd=ws,
                              capture_output=True, text=True, timeout=60, start_new_session=True)


@pytest.mark.parametrize("name", sorted(PLANTS))
def test_a_planted_name_is_moved_aside_and_reported(tmp_path: Path, backend: str, name: str) -> None:
    ws, sandbox, env = _workspace(tmp_path, backend)
    script, planted = PLANTS[name]
    done = _run(sandbox, ws, env, f"{script}; echo work > src/b.py")
    assert not (ws / planted).exists(), done.stderr
    assert list(ws.rglob(f"{Path(planted).name}.tether-quarantine-*")), done.stderr
    assert f"{ws / planted} appeared during this command and was moved aside" in done.stderr
    assert (ws / "src" / "b.py").read_text() == "work\n"  # ordinary writes are untouched


def test_existing_armed_files_are_read_only(tmp_path: Path, backend: str) -> None:
    ws, sandbox, env = _workspace(tmp_path, backend)
    _run(sandbox, ws, env, "true")  # the guard learns the tree
    done = _run(sandbox, ws, env, (
        "echo '[core] fsmonitor = touch PWN' >> vendor/lib/.git/config; "
        "echo 'touch PWN' >> tools/.envrc; rm -rf vendor/lib/.git; mv tools/.envrc tools/e"
    ))
    assert (ws / "vendor" / "lib" / ".git" / "config").read_text() == "[core]\n", done.stderr
    assert (ws / "tools" / ".envrc").read_text() == "export A=1\n"


def test_the_exit_code_and_output_pass_through(tmp_path: Path, backend: str) -> None:
    ws, sandbox, env = _workspace(tmp_path, backend)
    done = _run(sandbox, ws, env, "echo out; echo err >&2; exit 7")
    assert (done.returncode, done.stdout, done.stderr) == (7, "out\n", "err\n")


def test_a_guard_killed_mid_command_is_swept_by_the_next(tmp_path: Path, backend: str) -> None:
    ws, sandbox, env = _workspace(tmp_path, backend)
    _run(sandbox, ws, env, "true")
    with sandbox.wrap(["bash", "-c", "mkdir -p deep/.git; sleep 30"], ws, env) as wrapped:
        proc = subprocess.Popen(wrapped.argv, env=wrapped.env, pass_fds=wrapped.pass_fds, cwd=ws,
                                start_new_session=True)
    deadline = time.monotonic() + 20
    while not (ws / "deep" / ".git").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    os.killpg(proc.pid, signal.SIGKILL)  # no chance to sweep
    proc.wait()
    assert (ws / "deep" / ".git").exists()
    done = _run(sandbox, ws, env, "true")
    assert not (ws / "deep" / ".git").exists(), done.stderr
    assert "deep/.git appeared during this command" in done.stderr


def test_sweep_only_lists_changed_directories(tmp_path: Path) -> None:
    root = tmp_path / "tree"
    for i in range(20):
        (root / f"d{i}" / "x").mkdir(parents=True)
    state = armed.baseline([str(root)])
    since = time.time_ns()
    time.sleep(0.01)
    (root / "d3" / "x" / ".git").mkdir()
    listed: list[str] = []
    real = armed._scan_dir

    def counting(path: str, dirs: dict[str, int], found: dict[str, int]) -> list[str]:
        listed.append(path)
        return real(path, dirs, found)

    armed._scan_dir = counting  # type: ignore[assignment]
    try:
        moved = armed.sweep(state, [str(root)], since)
    finally:
        armed._scan_dir = real  # type: ignore[assignment]
    assert [m[0] for m in moved] == [str(root / "d3" / "x" / ".git")]
    assert listed == [str(root / "d3" / "x")]


def test_a_guard_killed_while_another_finished_is_still_swept(tmp_path: Path, backend: str) -> None:
    """Two commands at once: the quick one finishing must not forget the other's window."""
    ws, sandbox, env = _workspace(tmp_path, backend)
    _run(sandbox, ws, env, "true")
    with sandbox.wrap(["bash", "-c", "mkdir -p bg/.git; sleep 30"], ws, env) as wrapped:
        proc = subprocess.Popen(wrapped.argv, env=wrapped.env, pass_fds=wrapped.pass_fds, cwd=ws,
                                start_new_session=True)
    deadline = time.monotonic() + 20
    while not (ws / "bg" / ".git").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    time.sleep(1.2)  # past the one-second margin: the quick command's window starts after this
    _run(sandbox, ws, env, "echo quick > src/q.py")
    os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    assert (ws / "bg" / ".git").exists()
    done = _run(sandbox, ws, env, "true")
    assert not (ws / "bg" / ".git").exists(), done.stderr


@pytest.mark.parametrize("guard", ["c", "python"])
def test_both_guards_share_one_state_and_behave_alike(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, guard: str
) -> None:
    """The compiled guard and armed.py (used where there is no C compiler) read and write the
    same state file: a plant is caught whichever ran before."""
    ws, sandbox, env = _workspace(tmp_path, "bwrap")
    _run(sandbox, ws, env, "true")  # the compiled guard writes the state first
    if guard == "python":
        import tether.sandbox.landlock as landlock

        monkeypatch.setattr(landlock, "guard_path", lambda home: (None, "no C compiler"))
    with sandbox.wrap(["true"], ws, env) as wrapped:
        assert ("armed.py" in " ".join(wrapped.argv)) == (guard == "python")
    done = _run(sandbox, ws, env, "mkdir -p lib/x/.git && echo x > src/.envrc")
    assert not (ws / "lib" / "x" / ".git").exists() and not (ws / "src" / ".envrc").exists()
    assert done.stderr.count("appeared during this command") == 2, done.stderr
    state = armed.load_state(str(sandbox.guard_state))
    assert state is not None and state["pending"] == {}
