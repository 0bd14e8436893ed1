"""Sandbox escapes tried through the real `tether`, on both kernel backends (bwrap; Landlock +
seccomp alone, chosen with TETHER_SANDBOX_BACKEND=landlock).

Two sandboxes are attacked. The read-only confinement of auto-allowed commands (default mode, no
rule): whatever the parser makes of a command, it must have no effect. The workspace sandbox
(TETHER_FS_SANDBOX=1, even under `--yolo`): writes only in the workspace, never in `.git` or
`.tether`, never in tether's own scratch, no network, no secrets — and an inherited
`TETHER_SANDBOX` variable switches none of that off. Effects are checked on disk, in the tool
output (canaries) and by a loopback server counting connections.
"""

from __future__ import annotations

import socket
from collections.abc import Iterator

import pytest

from tests.requirements import missing, need_bwrap
from tests.sandbox.support import CountingServer
from tests.security.support import CANARY_SECRET, MARKER, World, attempt, bash
from tether.sandbox.landlock import landlock_status

BACKENDS = ("bwrap", "landlock")
CREDENTIAL_ENV = {
    "GITHUB_TOKEN": CANARY_SECRET,
    "DATABASE_URL": f"postgres://app:{CANARY_SECRET}@db.internal/app",
    "MYSQL_PWD": CANARY_SECRET,
    "GITLAB_PAT": CANARY_SECRET,
    "HTTPS_PROXY": f"http://user:{CANARY_SECRET}@proxy.internal:3128",
}


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    if request.param == "bwrap":
        need_bwrap(seccomp=True)
    else:
        found = landlock_status()
        if found.abi is None or found.abi < 6:
            missing("Landlock ABI >= 6", found.reason)
    return str(request.param)


@pytest.fixture
def server() -> Iterator[CountingServer]:
    s = CountingServer(socket.create_server(("127.0.0.1", 0)))
    yield s
    s.close()


def _env(backend: str, **extra: str) -> dict[str, str]:
    return {"TETHER_SANDBOX_BACKEND": backend, **CREDENTIAL_ENV, **extra}


# -- the read-only confinement (default mode, no rules) -----------------------------------------

CONFINED = [
    f"[[ 'a[$(touch {MARKER})]' -eq 0 ]]",
    f"test -v 'a[$(touch {MARKER})]'",
    f"for x in 'a[$(touch {MARKER})]'; do echo $((x)); done",
    f"x='$(touch {MARKER})'; echo ${{x@P}}",
    f"sort --outp={MARKER} README.md",
    f"sort -o {MARKER} README.md",
    f"git -c core.fsmonitor='touch {MARKER}' status",
    f"find . -maxdepth 0 -fprint {MARKER}",
    f"tee {MARKER} < README.md",
    f"cp README.md {MARKER}",
    f"python3 -c \"open('{MARKER}','w')\"",
    f"echo x > ../outside/{MARKER}",
    f"ln -s README.md {MARKER}",
    f"mkdir {MARKER}",
]


@pytest.mark.parametrize("command", CONFINED)
def test_confined_commands_have_no_effect(world: World, backend: str, command: str) -> None:
    out = attempt(world, bash(command), env=_env(backend))
    assert out.effect_free(), out.explain()


SNOOPS = [
    "cat keys/id_rsa",
    "grep -r secret home-link/",
    "cat th-link/providers/*",
    "printenv",
    "env",
    "cat /proc/self/environ",
]


@pytest.mark.parametrize("command", SNOOPS)
def test_confined_commands_read_no_secret(world: World, backend: str, command: str) -> None:
    # A hostile repository ships links into the user's secrets; reading through a link in the
    # workspace looks like an ordinary read of the workspace.
    (world.project / "keys").symlink_to(world.home / ".ssh")
    (world.project / "home-link").symlink_to(world.home)
    (world.project / "th-link").symlink_to(world.tether_home)
    out = attempt(world, bash(command), env=_env(backend))
    assert not out.leaked, out.explain()


def test_confined_commands_reach_no_server(world: World, backend: str, server: CountingServer) -> None:
    for command in (
        f"curl -s -m 2 http://127.0.0.1:{server.port}/",
        f"cat < /dev/tcp/127.0.0.1/{server.port}",
        f"python3 -c \"import socket; socket.create_connection(('127.0.0.1', {server.port}))\"",
    ):
        out = attempt(world, bash(command), env=_env(backend))
        assert out.effect_free(), out.explain()
    assert server.accepted == 0


def test_benign_confined_reads_still_run(world: World, backend: str) -> None:
    out = attempt(world, bash('basename "$PWD"; wc -l README.md notes.md'), env=_env(backend))
    assert out.statuses == ["success"], out.explain()
    assert "project" in out.outputs[0] and "README.md" in out.outputs[0]


# -- the workspace sandbox, under --yolo ---------------------------------------------------------

WORKSPACE = [
    f"touch ../outside/{MARKER}",
    f"touch $HOME/{MARKER}",
    f"touch $TETHER_HOME/{MARKER}",
    f"for d in $TETHER_HOME/tmp/*/; do ln -s ../../../outside/{MARKER} \"$d/bash_1.log\"; "
    f"touch \"$d/{MARKER}\"; done",
    f"mkdir -p .git/hooks; echo 'touch {MARKER}' > .git/hooks/pre-commit",
    f"echo '[core] fsmonitor = touch {MARKER}' >> .git/config",
    f"mkdir -p .tether && echo '{{}}' > .tether/{MARKER}",
    f"echo x > /tmp/../$HOME/../outside/{MARKER}",
    f"TETHER_SANDBOX=1 bash -c 'touch ../outside/{MARKER}'",
]


@pytest.mark.parametrize("command", WORKSPACE)
def test_workspace_sandbox_writes_only_the_workspace(
    tmp_path_factory: pytest.TempPathFactory, backend: str, command: str
) -> None:
    world = World.build(tmp_path_factory.mktemp("w"), git=True)
    git = world.project / ".git"
    before = {p: p.read_bytes() for p in git.rglob("*") if p.is_file()}
    out = attempt(world, bash(command), args=["--yolo"],
                  env=_env(backend, TETHER_FS_SANDBOX="1"))
    assert out.effect_free(), out.explain()
    after = {p: p.read_bytes() for p in git.rglob("*") if p.is_file()}
    assert after == before, out.explain()


def test_workspace_sandbox_hides_secrets(world: World, backend: str) -> None:
    command = (
        "cat ~/.ssh/id_rsa ~/.aws/credentials ~/.netrc ~/.git-credentials ~/.docker/config.json "
        "~/.config/gh/hosts.yml ~/.kube/config ~/.npmrc ~/.pypirc $TETHER_HOME/providers/*; "
        "printenv"
    )
    out = attempt(world, bash(command), args=["--yolo"], env=_env(backend, TETHER_FS_SANDBOX="1"))
    assert out.statuses, out.explain()
    assert not out.leaked, out.explain()


def test_inherited_sandbox_variable_does_not_switch_the_sandbox_off(
    world: World, backend: str
) -> None:
    out = attempt(world, bash(f"touch ../outside/{MARKER}; echo inside >> notes.md"),
                  args=["--yolo"], env=_env(backend, TETHER_FS_SANDBOX="1", TETHER_SANDBOX="bwrap"))
    assert out.effect_free(), out.explain()
    assert (world.project / "notes.md").read_text() == "notes\ninside\n", out.explain()


def test_workspace_sandbox_reaches_no_server(
    world: World, backend: str, server: CountingServer
) -> None:
    out = attempt(world, bash(f"curl -s -m 2 http://127.0.0.1:{server.port}/; "
                              f"cat < /dev/tcp/127.0.0.1/{server.port}"),
                  args=["--yolo"], env=_env(backend, TETHER_FS_SANDBOX="1"))
    assert out.statuses, out.explain()
    assert server.accepted == 0
