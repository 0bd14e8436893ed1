"""Real commands inside real bubblewrap: each escape fails AND leaves the world unchanged.

Without bwrap these tests skip (naming bubblewrap), except under CI where they fail.
"""

from __future__ import annotations

import os
import socket
import subprocess
import time
import uuid
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from tests.requirements import missing
from tether.sandbox import (
    SandboxError,
    SandboxStatus,
    cross_agent_policy,
    memory_subagent_policy,
    workspace_policy,
    wrap_command,
)
from tether.sandbox.bwrap import render_bwrap

from .support import PYTHON, CountingServer, run, sh, ws_policy

# -- positive controls -------------------------------------------------------------------------


def test_writes_inside_root_and_reads_elsewhere_work(ws: Path, status: SandboxStatus) -> None:
    outside = ws.parent / "outside.txt"
    outside.write_text("readable\n")
    script = (
        f"echo made > new.txt && mkdir -p sub/dir && cat {outside} && cat /etc/passwd >/dev/null"
    )
    result = sh(ws_policy(ws), script, ws, status)
    assert result.returncode == 0, result.stderr
    assert result.stdout == "readable\n"
    assert (ws / "new.txt").read_text() == "made\n"
    assert (ws / "sub" / "dir").is_dir()


def test_private_tmp_dir_is_writable_and_is_tmpdir(ws: Path, status: SandboxStatus) -> None:
    result = sh(
        ws_policy(ws), 'echo t > "$TMPDIR/t" && echo "$TMPDIR" "$TETHER_SANDBOX"', ws, status
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == [str((ws.parent / "sbx-tmp").resolve()), "bwrap"]
    assert (ws.parent / "sbx-tmp" / "t").read_text() == "t\n"


# -- c1: writes outside the roots ----------------------------------------------------------------


def test_writes_outside_root_fail(ws: Path, status: SandboxStatus) -> None:
    other = ws.parent / "other"
    other.mkdir()
    tmp_name = Path("/tmp") / f"tether-sbx-{uuid.uuid4().hex}"
    home = Path(os.environ["HOME"])
    for script in (f"touch {other}/x", f"echo x > {tmp_name}", "touch ~/o", f"mkdir {other}/d"):
        result = sh(ws_policy(ws), script, ws, status)
        assert result.returncode != 0, script
    assert list(other.iterdir()) == []
    assert not tmp_name.exists()
    assert not (home / "o").exists()


# -- c2, c13, b14: protected metadata inside the writable root -----------------------------------


def test_metadata_writes_inside_root_fail(ws: Path, status: SandboxStatus) -> None:
    (ws / ".git" / "hooks").mkdir(parents=True)
    (ws / ".git" / "config").write_text("[core]\n")
    (ws / ".tether").mkdir()
    (ws / ".tether" / "settings.json").write_text("{}\n")
    policy = ws_policy(ws)
    scripts = (
        "echo evil >> .git/config",
        "echo evil > .git/hooks/pre-commit",
        "echo '{\"hooks\":1}' > .tether/settings.json",
        "rm -rf .git",
        "mv .tether .tether-old",
        "echo x > tmp/../.tether/new",
    )
    for script in scripts:
        result = sh(policy, script, ws, status)
        assert result.returncode != 0, script
    assert (ws / ".git" / "config").read_text() == "[core]\n"
    assert not (ws / ".git" / "hooks" / "pre-commit").exists()
    assert (ws / ".tether" / "settings.json").read_text() == "{}\n"
    assert sorted(p.name for p in (ws / ".tether").iterdir()) == ["settings.json"]


def test_protected_names_cannot_be_created(ws: Path, status: SandboxStatus) -> None:
    policy = ws_policy(ws)
    for script in (
        "mkdir .tether",
        "mkdir -p .tether/x",
        "touch .tether/settings.json",
        "git init -q .",
        "mkdir .git/hooks",
    ):
        result = sh(policy, script, ws, status)
        assert result.returncode != 0, script
    # bwrap leaves empty mount points behind; nothing may be in them.
    for name in (".git", ".tether"):
        assert not (ws / name).exists() or list((ws / name).iterdir()) == []


def test_symlinked_tether_swapped_in_after_policy_refuses_to_start(
    ws: Path, status: SandboxStatus
) -> None:
    policy = ws_policy(ws)
    decoy = ws.parent / "decoy"
    decoy.mkdir()
    (ws / ".tether").symlink_to(decoy)
    with pytest.raises(SandboxError, match="symlink"):
        wrap_command(policy, ["true"], cwd=ws, env={}, status=status)


def test_isolation_root_hides_sibling_workspaces(tmp_path: Path, status: SandboxStatus) -> None:
    iso = tmp_path / "worktrees"
    (iso / "mine").mkdir(parents=True)
    (iso / "theirs").mkdir()
    (iso / "theirs" / "secret.txt").write_text("sibling secret\n")
    (tmp_path / "sbx-tmp").mkdir()
    policy = workspace_policy(iso / "mine", isolation_root=iso, tmp_dir=tmp_path / "sbx-tmp")
    result = sh(
        policy, f"cat {iso}/theirs/secret.txt; touch {iso}/theirs/x; ls {iso}", iso / "mine", status
    )
    assert "sibling secret" not in result.stdout
    assert not (iso / "theirs" / "x").exists()
    assert sh(policy, "echo ok > f", iso / "mine", status).returncode == 0


# -- c4, c5: network ------------------------------------------------------------------------------


@pytest.fixture
def server() -> Iterator[CountingServer]:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    srv = CountingServer(sock)
    yield srv
    srv.close()


def _connect_script(port: int) -> str:
    return f"import socket; socket.create_connection(('127.0.0.1', {port}), timeout=3); print('up')"


def test_network_is_blocked(ws: Path, status: SandboxStatus, server: CountingServer) -> None:
    policy = ws_policy(ws)
    bash = sh(policy, f"echo hi > /dev/tcp/127.0.0.1/{server.port}", ws, status)
    py = run(policy, [PYTHON, "-c", _connect_script(server.port)], ws, status)
    time.sleep(0.3)
    assert bash.returncode != 0
    assert py.returncode != 0 and "up" not in py.stdout
    assert server.accepted == 0


def test_network_works_when_allowed(
    ws: Path, status: SandboxStatus, server: CountingServer
) -> None:
    result = run(
        ws_policy(ws, network=True), [PYTHON, "-c", _connect_script(server.port)], ws, status
    )
    assert result.returncode == 0, result.stderr
    deadline = time.monotonic() + 5
    while server.accepted == 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert server.accepted == 1


# -- c8: credentials; memory and cross-agent policies --------------------------------------------


@pytest.fixture
def fake_home() -> Path:
    home = Path(os.environ["HOME"])
    (home / ".ssh").mkdir()
    (home / ".ssh" / "id_rsa").write_text("-----BEGIN FAKE KEY-----\n")
    return home


def _agents(tether_home: Path, *ids: str) -> Path:
    for agent in ids:
        (tether_home / "agents" / agent / "memory").mkdir(parents=True)
        (tether_home / "agents" / agent / "memory" / "notes.md").write_text(f"{agent} notes\n")
    return tether_home / "agents"


def test_memory_subagent_confinement(
    tether_home: Path, fake_home: Path, status: SandboxStatus
) -> None:
    agents = _agents(tether_home, "agent-self", "agent-parent", "agent-other")
    policy = memory_subagent_policy(tether_home, "agent-self", "agent-parent")
    own = agents / "agent-self" / "memory"
    key = run(policy, ["cat", str(fake_home / ".ssh" / "id_rsa")], own, status)
    assert key.returncode != 0 and "FAKE KEY" not in key.stdout
    other = run(policy, ["cat", str(agents / "agent-other" / "memory" / "notes.md")], own, status)
    assert other.returncode != 0 and "notes" not in other.stdout
    parent = run(policy, ["cat", str(agents / "agent-parent" / "memory" / "notes.md")], own, status)
    assert parent.stdout == "agent-parent notes\n"
    for target in (agents / "agent-parent" / "memory" / "x", agents / "agent-self" / "x"):
        assert sh(policy, f"touch {target}", own, status).returncode != 0
        assert not target.exists()
    assert sh(policy, "echo new > mine.md && git init -q .", own, status).returncode == 0
    assert (own / "mine.md").read_text() == "new\n"
    assert (own / ".git").is_dir()


def test_workspace_hides_credentials(ws: Path, fake_home: Path, status: SandboxStatus) -> None:
    result = run(ws_policy(ws), ["cat", str(fake_home / ".ssh" / "id_rsa")], ws, status)
    assert result.returncode != 0 and "FAKE KEY" not in result.stdout


def test_cross_agent_hides_other_agents_but_allows_writes(
    tmp_path: Path, tether_home: Path, status: SandboxStatus
) -> None:
    agents = _agents(tether_home, "me", "boss", "stranger")
    policy = cross_agent_policy(tether_home, "me", "boss")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    script = (
        f"cat {agents}/stranger/memory/notes.md; cat {agents}/boss/memory/notes.md; "
        f"echo w > {elsewhere}/w; echo m > {agents}/me/memory/m; touch {agents}/boss/b"
    )
    result = sh(policy, script, elsewhere, status)
    assert "stranger notes" not in result.stdout
    assert "boss notes" in result.stdout
    assert (elsewhere / "w").read_text() == "w\n"
    assert (agents / "me" / "memory" / "m").read_text() == "m\n"
    assert not (agents / "boss" / "b").exists()


# -- c9, c10, c11, c12: process isolation ---------------------------------------------------------

_SYSCALL_PROBE = """
import ctypes, errno, os, socket
libc = ctypes.CDLL(None, use_errno=True)
def err(result):
    return ctypes.get_errno() if result == -1 else 0
out = {}
out["ptrace"] = err(libc.ptrace(0, 0, 0, 0))
nr = {"x86_64": (425, 310), "aarch64": (425, 270)}[os.uname().machine]
out["io_uring_setup"] = err(libc.syscall(nr[0], 1, 0))
out["process_vm_readv"] = err(libc.syscall(nr[1], os.getppid(), 0, 0, 0, 0, 0))
try:
    socket.socket(40, socket.SOCK_STREAM).close()
    out["vsock"] = 0
except OSError as exc:
    out["vsock"] = exc.errno
print(out)
"""


def test_seccomp_denies_dangerous_syscalls(ws: Path, status: SandboxStatus) -> None:
    assert status.seccomp
    result = run(ws_policy(ws), [PYTHON, "-c", _SYSCALL_PROBE], ws, status)
    assert result.returncode == 0, result.stderr
    eperm = 1
    expected = {"ptrace": eperm, "io_uring_setup": eperm, "process_vm_readv": eperm, "vsock": eperm}
    assert result.stdout.strip() == repr(expected)


def test_no_new_privs_and_no_capabilities(ws: Path, status: SandboxStatus) -> None:
    result = sh(ws_policy(ws), "grep -E '^(NoNewPrivs|CapEff)' /proc/self/status", ws, status)
    assert result.returncode == 0, result.stderr
    fields = dict(line.split(":\t") for line in result.stdout.splitlines())
    assert fields["NoNewPrivs"] == "1"
    assert int(fields["CapEff"], 16) == 0


def test_runtime_processes_are_not_visible(ws: Path, status: SandboxStatus) -> None:
    me = os.getpid()
    result = sh(ws_policy(ws), f"ls /proc | grep -c '^[0-9]'; cat /proc/{me}/environ", ws, status)
    count = int(result.stdout.split()[0])
    assert count < 10
    assert "HOME=" not in result.stdout


# -- c16: fork bombs and timeouts -----------------------------------------------------------------

_FORK_LOOP = """
import os, time
n = 0
try:
    while n < 5000:
        if os.fork() == 0:
            time.sleep(120)
            os._exit(0)
        n += 1
except OSError as exc:
    print(n, exc.errno)
"""


def _require_pids_bound(status: SandboxStatus) -> None:
    if status.pids is None:
        missing("a pids limit (a writable pids cgroup or prlimit)", "; ".join(status.reasons))


def test_fork_loop_hits_pids_limit(ws: Path, status: SandboxStatus) -> None:
    _require_pids_bound(status)
    policy = replace(ws_policy(ws), pids_limit=40)
    started = time.monotonic()
    result = run(policy, [PYTHON, "-c", _FORK_LOOP], ws, status, timeout=60)
    forked, err = result.stdout.split()
    assert int(forked) < 40
    assert int(err) == 11  # EAGAIN
    # The sleepers die with the PID namespace instead of outliving the command.
    assert time.monotonic() - started < 60


def test_fork_bomb_ends_bounded(ws: Path, status: SandboxStatus) -> None:
    _require_pids_bound(status)
    policy = replace(ws_policy(ws), pids_limit=64)
    refused_before = _refused_forks(status, 64)
    started = time.monotonic()
    bomb = ":(){ :|:& };: ; sleep 30"
    run(policy, ["timeout", "-s", "KILL", "2", "bash", "-c", bomb], ws, status, timeout=60)
    assert time.monotonic() - started < 20
    if status.pids == "cgroup":
        assert _refused_forks(status, 64) > refused_before  # the bomb really hit the limit
        assert _cgroup_tasks(status, 64) == 0


def _refused_forks(status: SandboxStatus, limit: int) -> int:
    """The cgroup's count of forks refused at pids.max (0 before the group exists)."""
    if status.pids != "cgroup" or status.pids_cgroup_root is None:
        return 0
    events = Path(status.pids_cgroup_root) / f"tether-sandbox-pids-{limit}" / "pids.events"
    if not events.exists():
        return 0
    fields = dict(line.split() for line in events.read_text().splitlines())
    return int(fields.get("max", "0"))


def _cgroup_tasks(status: SandboxStatus, limit: int) -> int:
    assert status.pids_cgroup_root is not None
    procs = Path(status.pids_cgroup_root) / f"tether-sandbox-pids-{limit}" / "cgroup.procs"
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        if not procs.read_text().split():
            return 0
        time.sleep(0.1)
    return len(procs.read_text().split())


def test_killing_the_group_on_timeout_leaves_no_orphans(ws: Path, status: SandboxStatus) -> None:
    marker = f"{1000 + uuid.uuid4().int % 1000}.{uuid.uuid4().int % 10**6}"
    script = f"sleep {marker} & setsid sleep {marker} & nohup sleep {marker} & wait"
    with wrap_command(
        ws_policy(ws), ["bash", "-c", script], cwd=ws, env=dict(os.environ), status=status
    ) as w:
        proc = subprocess.Popen(w.argv, env=w.env, pass_fds=w.pass_fds, start_new_session=True)
    try:
        deadline = time.monotonic() + 10
        while len(_processes_with(marker)) < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(_processes_with(marker)) == 3
        os.killpg(proc.pid, 9)
        proc.wait(timeout=10)
        deadline = time.monotonic() + 10
        while _processes_with(marker) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _processes_with(marker) == []
    finally:
        for pid in _processes_with(marker):
            os.kill(pid, 9)


def _processes_with(marker: str) -> list[int]:
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            cmdline = Path("/proc", name, "cmdline").read_bytes().split(b"\0")
            state = Path("/proc", name, "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if marker.encode() in cmdline and state != "Z":
            found.append(int(name))
    return found


# -- nesting ---------------------------------------------------------------------------------------


@pytest.mark.parametrize("claim", ["bwrap", "landlock", "1", ""])
def test_an_inherited_sandbox_variable_does_not_switch_the_sandbox_off(
    ws: Path, status: SandboxStatus, claim: str
) -> None:
    """Outside any sandbox, `TETHER_SANDBOX=…` is a claim the kernel does not back: the command
    is wrapped anyway, and really confined (its write outside the workspace fails)."""
    env = {"PATH": os.environ["PATH"], "TETHER_SANDBOX": claim}
    outside = ws.parent / "outside-marker"
    with wrap_command(ws_policy(ws), ["bash", "-c", f"touch {outside}"], cwd=ws, env=env,
                      status=status) as wrapped:
        assert wrapped.backend == "bwrap"
        done = subprocess.run(wrapped.argv, env=wrapped.env, pass_fds=wrapped.pass_fds,
                              capture_output=True, text=True, timeout=30)
    assert done.returncode != 0 and not outside.exists()
    with pytest.raises(SandboxError, match="nest"):
        render_bwrap(ws_policy(ws), ["true"], cwd=ws, env=env)


def test_sandboxed_runtime_sees_it_is_sandboxed(ws: Path, status: SandboxStatus) -> None:
    """A command re-invoking tether inside the sandbox gets an unwrapped, still-confined child."""
    code = (
        "import os; from tether.sandbox import wrap_command, workspace_policy; "
        f"p = workspace_policy({str(ws)!r}, tmp_dir={str(ws.parent / 'sbx-tmp')!r}); "
        f"w = wrap_command(p, ['true'], cwd={str(ws)!r}, env=os.environ); print(w.argv)"
    )
    result = run(ws_policy(ws), [PYTHON, "-c", code], ws, status)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "['true']"
