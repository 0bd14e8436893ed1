"""c6 and c8 in real bubblewrap: Unix sockets of the host stay out of reach, credentials stay out
of the environment, and what legitimately needs either still works."""

from __future__ import annotations

import os
import socket
import subprocess
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from tether.runtime.policy.sandboxing import ShellSandbox, sandbox_switch
from tether.sandbox import SandboxStatus

from .support import PYTHON, CountingServer, run, ws_policy


def unix_server(address: str | bytes) -> CountingServer:
    """A host daemon on a Unix socket (as docker.sock, ssh-agent or tmux would be)."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.bind(address)
    return CountingServer(sock)


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[tuple[CountingServer, Path]]:
    path = tmp_path / "run" / "docker.sock"  # outside the workspace, readable through `/`
    path.parent.mkdir()
    server = unix_server(str(path))
    yield server, path
    server.close()


def connect(address: str) -> str:
    return (
        "import socket, sys\n"
        "s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)\n"
        f"s.connect({address})\n"
        "print('connected')\n"
    )


def test_host_unix_socket_is_unreachable(
    ws: Path, status: SandboxStatus, daemon: tuple[CountingServer, Path]
) -> None:
    server, path = daemon
    for policy in (ws_policy(ws), ws_policy(ws, network=True)):
        result = run(policy, [PYTHON, "-c", connect(repr(str(path)))], ws, status)
        assert result.returncode != 0 and "connected" not in result.stdout
        assert "PermissionError" in result.stderr  # refused by the filter, not "not found"
    assert server.accepted == 0


def test_abstract_unix_socket_is_unreachable_even_with_network(
    ws: Path, status: SandboxStatus
) -> None:
    name = b"\0tether-test-" + os.urandom(6).hex().encode()
    server = unix_server(name)  # abstract sockets ignore the mount namespace entirely
    try:
        result = run(ws_policy(ws, network=True), [PYTHON, "-c", connect(repr(name))], ws, status)
        assert result.returncode != 0 and "connected" not in result.stdout
        assert server.accepted == 0
    finally:
        server.close()


def test_socketpair_and_asyncio_still_work(ws: Path, status: SandboxStatus) -> None:
    script = (
        "import asyncio, socket\n"
        "a, b = socket.socketpair(); a.send(b'ok'); print(b.recv(2).decode())\n"
        "asyncio.run(asyncio.sleep(0)); print('loop')\n"
    )
    result = run(ws_policy(ws), [PYTHON, "-c", script], ws, status)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["ok", "loop"]


def test_unix_sockets_when_allowed(
    ws: Path, status: SandboxStatus, daemon: tuple[CountingServer, Path]
) -> None:
    server, path = daemon
    policy = replace(ws_policy(ws), unix_sockets=True)
    result = run(policy, [PYTHON, "-c", connect(repr(str(path)))], ws, status)
    assert result.returncode == 0, result.stderr
    assert "connected" in result.stdout


# -- c8: the environment ------------------------------------------------------------------------

SECRETS = {
    "ANTHROPIC_API_KEY": "sk-ant-secret-value-1",
    "GITHUB_TOKEN": "ghp_secret_value_2",
    "DB_PASSWORD": "hunter2-secret-3",
    "AWS_SECRET_ACCESS_KEY": "aws-secret-value-4",
    "NPM_TOKEN": "npm-secret-value-5",
}


def test_sandboxed_commands_get_no_credentials(ws: Path, status: SandboxStatus) -> None:
    sandbox = ShellSandbox(ws_policy(ws), status, keep_env=frozenset({"NPM_TOKEN"}))
    env = {**os.environ, **SECRETS, "HARMLESS": "visible"}
    script = "env; tr '\\0' '\\n' < /proc/self/environ"
    with sandbox.wrap(["bash", "-c", script], ws, env) as wrapped:
        out = subprocess.run(
            wrapped.argv, env=wrapped.env, pass_fds=wrapped.pass_fds, capture_output=True,
            text=True, timeout=30, stdin=subprocess.DEVNULL,
        )
    assert out.returncode == 0, out.stderr
    for name, value in SECRETS.items():
        if name == "NPM_TOKEN":  # kept on purpose by sandbox.keepEnv
            assert f"{name}={value}" in out.stdout
        else:
            assert name not in out.stdout and value not in out.stdout
    assert "HARMLESS=visible" in out.stdout


def test_switch_reads_unix_socket_and_keep_env_settings() -> None:
    switch = sandbox_switch(
        {"TETHER_FS_SANDBOX": "1"}, {"sandbox": {"allowUnixSockets": True, "keepEnv": ["NPM_TOKEN"]}}
    )
    assert switch.unix_sockets and switch.keep_env == {"NPM_TOKEN"}
    assert not sandbox_switch({"TETHER_FS_SANDBOX": "1"}, None).unix_sockets


@pytest.mark.parametrize(
    "settings, match",
    [
        ({"allowUnixSockets": "yes"}, "allowUnixSockets must be true or false"),
        ({"keepEnv": "NPM_TOKEN"}, "keepEnv must be a list of variable names"),
        ({"keepEnv": ["A=B"]}, "keepEnv must be a list of variable names"),
    ],
)
def test_bad_settings_are_named(settings: dict[str, object], match: str) -> None:
    from tether.errors import UsageError

    with pytest.raises(UsageError, match=match):
        sandbox_switch({}, {"sandbox": settings})


@pytest.mark.parametrize("box", [{"allowUnixSockets": True}, {"keepEnv": ["GITHUB_TOKEN"]}])
def test_an_untrusted_project_cannot_loosen_the_sandbox(tmp_path: Path, box: dict[str, object]) -> None:
    import json

    from tether.runtime.session.settings import load_settings

    project = tmp_path / "project"
    (project / ".tether").mkdir(parents=True)
    (project / ".tether" / "settings.json").write_text(json.dumps({"sandbox": {"enabled": True, **box}}))
    settings = load_settings(tmp_path / "home", project, None)
    assert settings.sandbox == {} and any("ignoring sandbox" in m for m in settings.ignored)
    trusted = load_settings(tmp_path / "home", project, "trusted")
    assert trusted.sandbox == {"enabled": True, **box}
