"""The read-only confinement of auto-allowed commands, on both kernel backends, attacked for real.

Each attack runs through `confinement_sandbox(...).wrap` exactly as the Bash tool would spawn it;
the verdict is what is on disk afterwards (no marker anywhere), what a loopback server counted
(no connection), whether a process outside is still alive, and whether a canary reached the
command's output.
"""

from __future__ import annotations

import os
import signal
import socket
import stat
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.requirements import missing, need_bwrap
from tests.sandbox.support import CountingServer
from tether.runtime.policy.sandboxing import ShellSandbox, confinement_sandbox, describe_confinement
from tether.sandbox import SandboxStatus
from tether.sandbox.landlock import landlock_status

CANARY = "CANARY-confine-5b1d"
MARKER = "CONFINE_MARKER"
BACKENDS = ("bwrap", "landlock")
CREDENTIALS = (
    ".ssh/id_rsa",
    ".aws/credentials",
    ".netrc",
    ".git-credentials",
    ".docker/config.json",
    ".config/gh/hosts.yml",
    ".kube/config",
    ".npmrc",
    ".pypirc",
    ".config/gcloud/credentials.db",
    ".azure/accessTokens.json",
    ".cargo/credentials.toml",
)


@dataclass
class Box:
    root: Path
    project: Path
    home: Path
    tether_home: Path
    scratch: Path
    outside: Path
    env: dict[str, str]
    sandbox: ShellSandbox

    def run(self, script: str, timeout: float = 30) -> subprocess.CompletedProcess[str]:
        env = {**self.env, "OUTSIDE": str(self.outside), "SCRATCH": str(self.scratch)}
        with self.sandbox.wrap(["bash", "-c", script], self.project, env) as wrapped:
            return subprocess.run(
                wrapped.argv, env=wrapped.env, pass_fds=wrapped.pass_fds, cwd=self.project,
                capture_output=True, text=True, timeout=timeout, stdin=subprocess.DEVNULL,
                start_new_session=True,
            )

    def markers(self) -> list[Path]:
        found = sorted(self.root.rglob(f"{MARKER}*"))
        tmp = self.sandbox.policy.tmp_dir
        return [p for p in found if tmp is None or not p.is_relative_to(tmp)]


def _require(backend: str) -> None:
    if backend == "bwrap":
        need_bwrap(seccomp=True)
    else:
        found = landlock_status()
        if found.abi is None or found.abi < 6:
            missing("Landlock ABI >= 6", found.reason)


@pytest.fixture(params=BACKENDS)
def box(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Box]:
    backend = request.param
    _require(backend)
    project, home = tmp_path / "project", tmp_path / "home"
    tether_home, outside = tmp_path / "tether-home", tmp_path / "outside"
    for d in (project / "src", home, tether_home / "providers", outside):
        d.mkdir(parents=True, exist_ok=True)
    (project / "README.md").write_text("# readme\n")
    (project / "src" / "a.py").write_text("print('a')\n")
    for rel in CREDENTIALS:
        path = home / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"secret={CANARY}\n")
    (tether_home / "providers" / "anthropic.json").write_text(f'{{"api_key": "{CANARY}"}}')
    other = tether_home / "tmp" / "conv-other"
    other.mkdir(parents=True)
    (other / "bash_1.log").write_text(f"{CANARY}\n")
    scratch = tether_home / "tmp" / "conv-1"
    env = {
        "PATH": os.environ["PATH"],
        "HOME": str(home),
        "TETHER_HOME": str(tether_home),
        "TETHER_SANDBOX_BACKEND": backend,
        "LANG": "C.UTF-8",
        "GITHUB_TOKEN": CANARY,
        "DATABASE_URL": f"postgres://app:{CANARY}@db.internal/app",
        "INNOCENT_LOOKING": "ghp_" + "x" * 36,
        "MYSQL_PWD": CANARY,
    }
    sandbox = confinement_sandbox(env, {}, project, tether_home, scratch)
    assert sandbox is not None, describe_confinement(env, {}, tether_home)
    yield Box(tmp_path, project, home, tether_home, scratch, outside, env, sandbox)


WRITES = [
    f"touch {MARKER}",
    f"echo x > {MARKER}",
    f"echo x >> README.md; cp README.md {MARKER}",
    f"mkdir {MARKER}",
    f"touch src/{MARKER}",
    f"touch $OUTSIDE/{MARKER}",
    f"touch $HOME/{MARKER}",
    f"touch $TETHER_HOME/{MARKER}",
    f"touch $SCRATCH/{MARKER}",
    f"ln -s $OUTSIDE $SCRATCH/{MARKER}",
    f"mv README.md {MARKER}",
    f"python3 -c \"open('{MARKER}', 'w').write('x')\"",
    f"git init -q {MARKER}",
    f"touch /tmp/../$OUTSIDE/{MARKER}",
]


@pytest.mark.parametrize("script", WRITES)
def test_no_write_lands_anywhere(box: Box, script: str) -> None:
    before = (box.project / "README.md").read_text()
    done = box.run(script)
    assert box.markers() == [], done.stderr
    assert (box.project / "README.md").read_text() == before


def test_the_private_tmp_works_and_is_not_scratch(box: Box) -> None:
    done = box.run('f=$(mktemp) && echo hello > "$f" && cat "$f" && echo "$TMPDIR"')
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert lines[0] == "hello"
    tmp = Path(lines[1])
    assert tmp == box.sandbox.policy.tmp_dir and tmp != box.scratch and tmp.parent == box.scratch


READS = [
    *(f"cat $HOME/{rel}" for rel in CREDENTIALS),
    "cat $TETHER_HOME/providers/*",
    "cat $TETHER_HOME/tmp/conv-other/*",
    "grep -r secret $HOME",
    "grep -r api_key $TETHER_HOME",
    "tar cf - $HOME 2>/dev/null | strings",
    "env",
    "cat /proc/self/environ | tr '\\0' '\\n'",
]


@pytest.mark.parametrize("script", READS)
def test_secrets_stay_unreadable(box: Box, script: str) -> None:
    done = box.run(script)
    assert CANARY not in done.stdout + done.stderr
    assert ("x" * 36) not in done.stdout


def test_reads_of_the_workspace_still_work(box: Box) -> None:
    done = box.run("cat README.md && ls src && grep -rn print . && wc -l src/a.py && pwd")
    assert done.returncode == 0, done.stderr
    assert "# readme" in done.stdout and "a.py" in done.stdout
    assert str(box.project) in done.stdout


@pytest.fixture
def tcp_server() -> Iterator[CountingServer]:
    server = CountingServer(socket.create_server(("127.0.0.1", 0)))
    yield server
    server.close()


NET = [
    "python3 -c \"import socket; socket.create_connection(('127.0.0.1', {port}), timeout=2)\"",
    "exec 3<>/dev/tcp/127.0.0.1/{port}",
    "curl -s -m 2 http://127.0.0.1:{port}/",
]


@pytest.mark.parametrize("script", NET)
def test_no_network(box: Box, tcp_server: CountingServer, script: str) -> None:
    done = box.run(script.format(port=tcp_server.port, marker=MARKER))
    assert tcp_server.accepted == 0
    assert MARKER not in done.stdout


def test_no_udp_reaches_the_host(box: Box) -> None:
    receiver = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    receiver.bind(("127.0.0.1", 0))
    port = receiver.getsockname()[1]
    try:
        box.run(
            "python3 -c \"import socket; s=socket.socket(socket.AF_INET, socket.SOCK_DGRAM); "
            f"[s.sendto(b'leak', ('127.0.0.1', {port})) for _ in range(3)]\"; "
            f"echo leak > /dev/udp/127.0.0.1/{port}"
        )
        receiver.settimeout(0.3)
        with pytest.raises(TimeoutError):
            receiver.recvfrom(64)
    finally:
        receiver.close()


def test_no_unix_sockets_path_or_abstract(box: Box, tmp_path: Path) -> None:
    path = tmp_path / "daemon.sock"
    path_server = socket.socket(socket.AF_UNIX)
    path_server.bind(str(path))
    abstract = socket.socket(socket.AF_UNIX)
    abstract.bind(f"\0tether-confine-{os.getpid()}")
    servers = [CountingServer(path_server), CountingServer(abstract)]
    try:
        code = (
            "import socket\n"
            f"for addr in ({str(path)!r}, '\\0tether-confine-{os.getpid()}'):\n"
            "    try:\n"
            "        s = socket.socket(socket.AF_UNIX); s.connect(addr)\n"
            "    except OSError as e:\n"
            "        print('refused', e.errno)\n"
        )
        done = box.run(f"python3 -c {_quote(code)}")
    finally:
        for server in servers:
            server.close()
    assert [s.accepted for s in servers] == [0, 0], done.stdout + done.stderr


def test_processes_outside_cannot_be_signalled_or_inspected(box: Box) -> None:
    victim = subprocess.Popen(
        ["sleep", "60"], env={**os.environ, "VICTIM_SECRET": CANARY}, start_new_session=True
    )
    try:
        id_rsa = box.home / ".ssh" / "id_rsa"
        done = box.run(
            f"kill -9 {victim.pid}; kill -STOP {victim.pid}; "
            f"cat /proc/{victim.pid}/environ; cat /proc/{victim.pid}/root{id_rsa}; "
            f"cat /proc/$PPID/root{id_rsa}; cat /proc/1/root{id_rsa}; "
            f"python3 -c 'import ctypes; print(ctypes.CDLL(None).ptrace(16, {victim.pid}, 0, 0))'"
        )
        assert victim.poll() is None, "the sandbox killed a process outside it"
        state = Path(f"/proc/{victim.pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        assert state != "T"
        assert CANARY not in done.stdout + done.stderr
    finally:
        victim.send_signal(signal.SIGKILL)
        victim.wait()


def test_credential_variables_are_removed_by_name_and_shape(box: Box) -> None:
    done = box.run("env")
    names = {line.split("=", 1)[0] for line in done.stdout.splitlines()}
    assert not names & {"GITHUB_TOKEN", "DATABASE_URL", "INNOCENT_LOOKING", "MYSQL_PWD"}
    assert "PATH" in names and "HOME" in names


def test_keep_env_still_passes_a_named_variable(box: Box) -> None:
    settings = {"sandbox": {"keepEnv": ["GITHUB_TOKEN"]}}
    kept = confinement_sandbox(box.env, settings, box.project, box.tether_home, box.scratch)
    assert kept is not None
    assert kept.command_env(box.env)["GITHUB_TOKEN"] == CANARY
    assert "MYSQL_PWD" not in kept.command_env(box.env)


def test_status_names_the_layers(box: Box) -> None:
    lines = describe_confinement(box.env, {}, box.tether_home)
    expected = {
        "bwrap": "confined read-only by bwrap+seccomp+landlock",
        "landlock": "confined read-only by landlock+seccomp",
    }[box.env["TETHER_SANDBOX_BACKEND"]]
    assert len(lines) == 1 and lines[0].startswith(f"auto-allowed shell commands: {expected}")


def test_namespaces_and_mounts_are_refused(box: Box) -> None:
    done = box.run(
        f"unshare -Ur touch {MARKER}; unshare -m true && echo {MARKER}; "
        f"python3 -c \"import os; os.unshare(0x10000000); print('{MARKER}')\""
    )
    assert MARKER not in done.stdout and box.markers() == []


def _quote(text: str) -> str:
    return "'" + text.replace("'", "'\\''") + "'"


def test_cwd_inside_tether_home_is_not_confinable(tmp_path: Path) -> None:
    need_bwrap()
    th = tmp_path / "th"
    (th / "agents").mkdir(parents=True)
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path)}
    assert confinement_sandbox(env, {}, th / "agents", th, th / "tmp" / "c") is None


def test_bad_backend_is_a_clear_error(tmp_path: Path) -> None:
    from tether.errors import UsageError

    env = {"PATH": os.environ["PATH"], "TETHER_SANDBOX_BACKEND": "docker"}
    with pytest.raises(UsageError, match="TETHER_SANDBOX_BACKEND='docker' is not valid"):
        confinement_sandbox(env, {}, tmp_path, tmp_path / "th", tmp_path / "th" / "s")
    with pytest.raises(UsageError, match='sandbox.backend must be "auto", "bwrap" or "landlock"'):
        confinement_sandbox({}, {"sandbox": {"backend": 3}}, tmp_path, tmp_path / "th", tmp_path / "s")



def test_landlock_without_scopes_is_not_enough_to_confine(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """ABI < 6 cannot keep signals inside: auto-allowed commands must ask instead."""
    import tether.sandbox

    old = SandboxStatus("landlock", None, False, 5, True, ["bwrap missing"])
    monkeypatch.setattr(tether.sandbox, "probe", lambda: old)
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path)}
    assert confinement_sandbox(env, {}, tmp_path, tmp_path / "th", tmp_path / "th" / "s") is None
    [line] = describe_confinement(env, {}, tmp_path / "th")
    assert line.startswith("auto-allowed shell commands: NOT confinable here: they will ask")
    assert "ABI 5 < 6" in line



def test_system_secrets_and_raw_devices_stay_unreadable(box: Box) -> None:
    """Run as root, tether's commands own /etc/shadow and the disks: neither is readable."""
    with os.scandir("/dev") as it:
        disks = [e.path for e in it if stat.S_ISBLK(e.stat(follow_symlinks=False).st_mode)]
    targets = ["/etc/shadow", *disks[:4]]
    script = "; ".join(f"head -c 64 {p} >/dev/null 2>&1 && echo READ:{p}" for p in targets)
    done = box.run(script)
    assert "READ:" not in done.stdout, done.stdout


def test_credentials_behind_symlinks_stay_hidden(box: Box) -> None:
    """~/.netrc and ~/.config/gh as links into a dotfiles folder: hidden where they live too."""
    dotfiles = box.root / "dotfiles"
    (dotfiles / "gh").mkdir(parents=True)
    (dotfiles / "netrc").write_text(f"password {CANARY}\n")
    (dotfiles / "gh" / "hosts.yml").write_text(f"token: {CANARY}\n")
    (box.home / ".netrc").unlink()
    (box.home / ".netrc").symlink_to(dotfiles / "netrc")
    import shutil

    shutil.rmtree(box.home / ".config" / "gh")
    (box.home / ".config" / "gh").symlink_to(dotfiles / "gh")
    sandbox = confinement_sandbox(box.env, {}, box.project, box.tether_home, box.scratch)
    assert sandbox is not None
    box.sandbox = sandbox
    done = box.run(
        f"cat ~/.netrc ~/.config/gh/hosts.yml {dotfiles}/netrc {dotfiles}/gh/hosts.yml"
    )
    assert CANARY not in done.stdout + done.stderr
