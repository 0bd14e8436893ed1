"""The Landlock-only backend (no bubblewrap): the allow-list it computes, and the workspace policy
enforced by it for real (writes, protected names, hidden paths, network, choice and status)."""

from __future__ import annotations

import os
import shlex
import socket
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest

from tests.requirements import missing
from tests.sandbox.support import CountingServer
from tether.sandbox import (
    SandboxError,
    SandboxStatus,
    format_status,
    inside_tether_sandbox,
    workspace_policy,
    wrap_command,
)
from tether.sandbox.detect import choose_backend
from tether.sandbox.landlock import landlock_status
from tether.sandbox.landlock_backend import landlock_grants
from tether.sandbox.policy import CREDENTIAL_DIRS, SandboxPolicy

CANARY = "CANARY-landlock-9e2"


@pytest.fixture(scope="module")
def abi() -> int:
    found = landlock_status()
    if found.abi is None or found.abi < 4:
        missing("Landlock ABI >= 4", found.reason)
    return found.abi


# -- the allow-list, on a fake tree ---------------------------------------------------------------

TREE = {
    "/": ["/home", "/usr", "/tmp", "/dev"],
    "/home": ["/home/u"],
    "/home/u": ["/home/u/.ssh", "/home/u/code", "/home/u/notes.txt", "/home/u/link"],
    "/home/u/code": ["/home/u/code/.git", "/home/u/code/src", "/home/u/code/README"],
    "/tmp": ["/tmp/t"],
}
LINKS = {"/home/u/link"}


def _entries(p: str) -> Sequence[tuple[str, bool]]:
    return [(c, c not in LINKS) for c in TREE.get(p, [])]


def _exists(p: str) -> bool:
    return str(p) in TREE or any(str(p) in v for v in TREE.values())


def test_hidden_paths_are_left_out_by_granting_their_siblings() -> None:
    policy = SandboxPolicy(
        kind="confined",
        writable_roots=(Path("/tmp/t"),),
        readonly_roots=(),
        denied_roots=tuple(Path("/home/u") / name for name in CREDENTIAL_DIRS),
        restrict_writes=True,
        network=False,
        pids_limit=None,
        tmp_dir=Path("/tmp/t"),
    )
    grants = dict(landlock_grants(policy, _entries, _exists, resolve=None))
    assert grants[Path("/")] == "list" and grants[Path("/home/u")] == "list"
    assert grants[Path("/usr")] == "read" and grants[Path("/home/u/code")] == "read"
    assert grants[Path("/home/u/notes.txt")] == "read"
    assert grants[Path("/tmp/t")] == "write"
    assert Path("/home/u/.ssh") not in grants  # hidden: no grant at all
    assert Path("/home/u/link") not in grants  # a rule on a link would grant its target


def test_protected_names_split_the_writable_root() -> None:
    policy = workspace_policy_fake()
    grants = dict(landlock_grants(policy, _entries, _exists, resolve=None))
    assert grants[Path("/home/u/code")] == "list"  # no creating .git/.tether at the top
    assert grants[Path("/home/u/code/src")] == "write"
    assert grants[Path("/home/u/code/README")] == "write"
    assert grants[Path("/home/u/code/.git")] == "read"
    assert grants[Path("/tmp/t")] == "write"  # the tmp dir is writable whole


def workspace_policy_fake() -> SandboxPolicy:
    code, tmp = Path("/home/u/code"), Path("/tmp/t")
    return SandboxPolicy(
        kind="workspace",
        writable_roots=(code, tmp),
        readonly_roots=tuple(w / n for w in (code, tmp) for n in (".git", ".tether")),
        denied_roots=(Path("/home/u/.ssh"),),
        restrict_writes=True,
        network=False,
        pids_limit=None,
        tmp_dir=tmp,
    )


# -- for real ---------------------------------------------------------------------------------------


def _world(tmp_path: Path) -> tuple[Path, Path, Path, Path]:
    ws, home, outside = tmp_path / "ws", tmp_path / "home", tmp_path / "outside"
    for d in (ws / "src", ws / ".git" / "hooks", home / ".ssh", outside):
        d.mkdir(parents=True, exist_ok=True)
    (ws / ".git" / "config").write_text("[core]\n")
    (ws / "README.md").write_text("readme\n")
    (home / ".ssh" / "id_rsa").write_text(CANARY)
    (home / ".netrc").write_text(CANARY)
    tmp = tmp_path / "sbx-tmp"
    tmp.mkdir()
    return ws, home, outside, tmp


def _run(
    policy: SandboxPolicy, script: str, cwd: Path, home: Path
) -> subprocess.CompletedProcess[str]:
    env = {"PATH": os.environ["PATH"], "HOME": str(home), "TETHER_HOME": str(home / ".tether")}
    with wrap_command(policy, ["bash", "-c", script], cwd=cwd, env=env, backend="landlock") as w:
        assert w.backend == "landlock" and w.env["TETHER_SANDBOX"] == "landlock"
        return subprocess.run(w.argv, env=w.env, pass_fds=w.pass_fds, cwd=cwd,
                              capture_output=True, text=True, timeout=30)


def test_workspace_policy_under_landlock_alone(abi: int, tmp_path: Path) -> None:
    ws, home, outside, tmp = _world(tmp_path)
    policy = workspace_policy(ws, tmp_dir=tmp, home=home)
    done = _run(policy, (
        "echo a > src/new.py && echo b >> README.md && mkdir src/pkg && mv src/new.py src/pkg/; "
        f"echo x > {outside}/MARK; echo x > $HOME/MARK; echo x > .git/hooks/pre-commit; "
        "echo '[core] fsmonitor=x' >> .git/config; mkdir -p .tether/x; mv .git g; touch top.txt; "
        "cat $HOME/.ssh/id_rsa $HOME/.netrc; f=$(mktemp) && echo tmp-ok > $f && cat $f"
    ), ws, home)
    assert (ws / "src" / "pkg" / "new.py").read_text() == "a\n"
    assert (ws / "README.md").read_text() == "readme\nb\n"
    assert not (outside / "MARK").exists() and not (home / "MARK").exists()
    assert not (ws / ".git" / "hooks" / "pre-commit").exists()
    assert (ws / ".git" / "config").read_text() == "[core]\n"
    # .tether did not exist: its name is occupied by an empty read-only directory, as bwrap does
    assert list((ws / ".tether").iterdir()) == [] and (ws / ".git").is_dir()
    assert (ws / "top.txt").exists()  # the workspace root stays writable (a user namespace here)
    assert CANARY not in done.stdout + done.stderr
    assert "tmp-ok" in done.stdout


def test_no_tcp_no_unix_sockets_under_landlock_alone(abi: int, tmp_path: Path) -> None:
    ws, home, _outside, tmp = _world(tmp_path)
    server = CountingServer(socket.create_server(("127.0.0.1", 0)))
    unix_path = tmp_path / "d.sock"
    unix = socket.socket(socket.AF_UNIX)
    unix.bind(str(unix_path))
    unix_server = CountingServer(unix)
    try:
        policy = workspace_policy(ws, tmp_dir=tmp, home=home)
        _run(policy, (
            f"exec 3<>/dev/tcp/127.0.0.1/{server.port}; "
            f"python3 -c \"import socket; s=socket.socket(socket.AF_UNIX); s.connect('{unix_path}')\""
        ), ws, home)
    finally:
        server.close()
        unix_server.close()
    assert server.accepted == 0 and unix_server.accepted == 0


def test_network_on_is_honoured(abi: int, tmp_path: Path) -> None:
    ws, home, _outside, tmp = _world(tmp_path)
    server = CountingServer(socket.create_server(("127.0.0.1", 0)))
    try:
        policy = workspace_policy(ws, tmp_dir=tmp, home=home, network=True)
        done = _run(policy, f"exec 3<>/dev/tcp/127.0.0.1/{server.port} && echo connected", ws, home)
    finally:
        server.close()
    assert "connected" in done.stdout and server.accepted == 1, done.stderr


def test_choosing_a_backend_that_is_missing_fails_closed(tmp_path: Path) -> None:
    no_landlock = SandboxStatus(None, None, False, None, False, ["bwrap missing"])
    assert choose_backend(no_landlock, "landlock")[0] is None
    assert "was chosen" in choose_backend(no_landlock, "landlock")[1]
    ws, home, _outside, tmp = _world(tmp_path)
    with pytest.raises(SandboxError, match="sandbox backend landlock was chosen"):
        wrap_command(workspace_policy(ws, tmp_dir=tmp, home=home), ["true"], cwd=ws, env={},
                     status=no_landlock, backend="landlock")
    with pytest.raises(SandboxError, match="unknown sandbox backend 'docker'"):
        choose_backend(no_landlock, "docker")


def test_without_bwrap_auto_picks_landlock_and_says_so(abi: int, tmp_path: Path) -> None:
    status = SandboxStatus("landlock", None, False, abi, True,
                           ["bubblewrap (bwrap) is not installed: apt-get install bubblewrap"])
    chosen, why = choose_backend(status, "auto", tmp_path)
    assert chosen == "landlock" and "bubblewrap unusable" in why
    assert format_status(status).startswith("sandbox backend: landlock + seccomp")


def test_a_command_inside_the_landlock_sandbox_is_proven_nested(abi: int, tmp_path: Path) -> None:
    """Inside, the kernel confirms tether's filter, so tether run there does not wrap again;
    outside, the same variable is not believed."""
    ws, home, _outside, tmp = _world(tmp_path)
    code = (
        "import os; from tether.sandbox import inside_tether_sandbox, wrap_command, "
        "workspace_policy; "
        f"p = workspace_policy({str(ws)!r}, tmp_dir={str(tmp)!r}); "
        f"w = wrap_command(p, ['true'], cwd={str(ws)!r}, env=os.environ, backend='landlock'); "
        "print(inside_tether_sandbox(), w.argv)"
    )
    policy = workspace_policy(ws, tmp_dir=tmp, home=home)
    src = str(Path(__file__).resolve().parents[2] / "src")
    done = _run(policy, f"PYTHONPATH={src} {sys.executable} -c {shlex.quote(code)}", ws, home)
    assert done.stdout.strip() == "True ['true']", done.stderr
    assert not inside_tether_sandbox()


def test_a_workspace_that_holds_the_credentials_still_hides_them(abi: int, tmp_path: Path) -> None:
    """cwd = $HOME: ~/.ssh and ~/.netrc lie inside the writable root; hidden by mounts there,
    while the rest of the home stays writable (new files at the top too)."""
    _ws, home, _outside, tmp = _world(tmp_path)
    policy = workspace_policy(home, tmp_dir=tmp, home=home)
    done = _run(policy, (
        "cat .ssh/id_rsa .netrc; touch .ssh/planted; echo x > .netrc; rm -rf .ssh; "
        "echo new > top.txt && cat top.txt"
    ), home, home)
    assert CANARY not in done.stdout + done.stderr
    assert (home / ".ssh" / "id_rsa").read_text() == CANARY and (home / ".netrc").read_text() == CANARY
    assert not (home / ".ssh" / "planted").exists()
    assert (home / "top.txt").read_text() == "new\n", done.stderr


def test_no_new_privileges_no_capabilities(abi: int, tmp_path: Path) -> None:
    """c10 on the Landlock backend: NoNewPrivs 1, every capability set empty, even as root."""
    ws, home, _outside, tmp = _world(tmp_path)
    done = _run(workspace_policy(ws, tmp_dir=tmp, home=home),
                "grep -E '^(NoNewPrivs|Cap(Inh|Prm|Eff|Bnd|Amb)|Seccomp):' /proc/self/status", ws, home)
    fields = dict(line.split(":\t") for line in done.stdout.splitlines())
    assert fields["NoNewPrivs"] == "1" and fields["Seccomp"] == "2", done.stdout
    assert all(int(fields[k], 16) == 0 for k in ("CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb"))


def test_a_process_count_bound_without_bwrap(abi: int, tmp_path: Path) -> None:
    """c16 on the Landlock backend: the helper itself joins the pids cgroup (or sets
    RLIMIT_NPROC): of 40 background sleeps, the ones over the limit are refused."""
    from dataclasses import replace

    ws, home, _outside, tmp = _world(tmp_path)
    policy = replace(workspace_policy(ws, tmp_dir=tmp, home=home), pids_limit=16)
    code = (
        "import os, time\n"
        "kids = []\n"
        "for _ in range(40):\n"
        "    try:\n"
        "        pid = os.fork()\n"
        "    except OSError:\n"
        "        continue\n"
        "    if pid == 0:\n"
        "        time.sleep(3); os._exit(0)\n"
        "    kids.append(pid)\n"
        "print(len(kids))\n"
        "for pid in kids:\n"
        "    os.kill(pid, 9); os.waitpid(pid, 0)\n"
    )
    done = _run(policy, f"{sys.executable} -c {shlex.quote(code)}", ws, home)
    assert int(done.stdout.split()[0]) < 16, done.stdout + done.stderr
