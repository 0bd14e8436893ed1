"""End to end: the real `tether` script with TETHER_FS_SANDBOX, and `tether sandbox status`.

Without bubblewrap these tests skip (naming it), except under CI where they fail.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tests.e2e.support import run_tether, tether_env
from tests.requirements import need_bwrap
from tether.testing.fake_provider import FakeProvider

MODEL = "anthropic/claude-test"


@pytest.fixture(scope="module")
def bwrap_available() -> None:
    need_bwrap(seccomp=True)




def bash_call(command: str) -> dict:
    return {"name": "Bash", "arguments": {"command": command, "description": "test command"}}


@pytest.mark.usefixtures("bwrap_available")
def test_fs_sandbox_confines_bash_even_in_unrestricted_mode(workdir: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside.txt"
    script = [
        {"tool_calls": [bash_call(f"touch {outside}"), bash_call("touch inside")]},
        {"text": "done"},
    ]
    with FakeProvider(script) as fake:
        run = run_tether(
            [
                "-p",
                "touch",
                "--model",
                MODEL,
                "--permission-mode",
                "unrestricted",
                "--output-format",
                "stream-json",
            ],
            env=tether_env(fake.url, MODEL, {"TETHER_FS_SANDBOX": "1"}),
            cwd=workdir,
        )
        assert fake.violations == []
    assert run.code == 0, run.stderr
    assert not outside.exists()
    assert (workdir / "inside").is_file()
    calls = [c["tool_call"]["tool_call_id"] for c in run.of_type("message", "tool_call_message")]
    returns = {r["tool_call_id"]: r for r in run.of_type("message", "tool_return_message")}
    outside_ret, inside_ret = returns[calls[0]], returns[calls[1]]
    assert outside_ret["status"] == "error"
    assert "Read-only file system" in outside_ret["tool_return"]
    assert inside_ret["status"] == "success"


@pytest.mark.usefixtures("bwrap_available")
def test_fs_sandbox_off_leaves_bash_unconfined(workdir: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside.txt"
    script = [{"tool_calls": [bash_call(f"touch {outside}")]}, {"text": "done"}]
    with FakeProvider(script) as fake:
        run = run_tether(
            ["-p", "touch", "--model", MODEL, "--yolo", "--output-format", "stream-json"],
            env=tether_env(fake.url, MODEL, {"TETHER_FS_SANDBOX": "0"}),
            cwd=workdir,
        )
    assert run.code == 0, run.stderr
    assert outside.exists()


@pytest.mark.usefixtures("bwrap_available")
def test_sandboxed_bash_sees_no_provider_key_and_no_host_unix_socket(
    workdir: Path, tmp_path: Path
) -> None:
    import socket

    sock_path = tmp_path / "agent.sock"  # stands for ssh-agent / docker.sock
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(str(sock_path))
    listener.listen()
    probe = (
        "env | cut -d= -f1 | sort | tr '\\n' ' '; echo; "
        f"python3 -c \"import socket; socket.socket(socket.AF_UNIX).connect('{sock_path}')\" "
        "2>&1 | tail -1"
    )
    script = [{"tool_calls": [bash_call(probe)]}, {"text": "done"}]
    try:
        with FakeProvider(script) as fake:
            run = run_tether(
                ["-p", "look", "--model", MODEL, "--yolo", "--output-format", "stream-json"],
                env=tether_env(fake.url, MODEL, {"TETHER_FS_SANDBOX": "1", "MY_SECRET": "s3cr3t-value"}),
                cwd=workdir,
            )
    finally:
        listener.close()
    assert run.code == 0, run.stderr
    (ret,) = run.of_type("message", "tool_return_message")
    names = ret["tool_return"].splitlines()[0].split()
    assert "PATH" in names and "HOME" in names
    assert "ANTHROPIC_API_KEY" not in names and "MY_SECRET" not in names  # c8
    assert "PermissionError" in ret["tool_return"]  # c6


def test_invalid_fs_sandbox_value_fails_before_anything_runs(workdir: Path) -> None:
    with FakeProvider([{"tool_calls": [bash_call("touch ran")]}, {"text": "x"}]) as fake:
        run = run_tether(
            ["-p", "touch", "--model", MODEL, "--yolo"],
            env=tether_env(fake.url, MODEL, {"TETHER_FS_SANDBOX": "maybe"}),
            cwd=workdir,
        )
        assert fake.requests == []
    assert run.code == 1
    assert "TETHER_FS_SANDBOX='maybe'" in run.stderr and "1 or true" in run.stderr
    assert not (workdir / "ran").exists()


@pytest.mark.usefixtures("bwrap_available")
def test_sandbox_status_prints_the_backend(workdir: Path, tether_home: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "TETHER_FS_SANDBOX"}
    run = run_tether(["sandbox", "status"], env=env, cwd=workdir)
    assert run.code == 0, run.stderr
    assert "sandbox backend: bwrap " in run.stdout
    assert "seccomp filter:  on" in run.stdout
    assert "shell commands: not sandboxed" in run.stdout

    run = run_tether(["sandbox", "status"], env={**env, "TETHER_FS_SANDBOX": "1"}, cwd=workdir)
    assert run.code == 0, run.stderr
    assert "shell commands: workspace sandbox (TETHER_FS_SANDBOX=1)" in run.stdout

    tether_home.mkdir(parents=True, exist_ok=True)
    (tether_home / "settings.json").write_text(json.dumps({"sandbox": {"enabled": True}}))
    run = run_tether(["sandbox", "status"], env=env, cwd=workdir)
    assert run.code == 0, run.stderr
    assert "shell commands: workspace sandbox (settings sandbox.enabled=true)" in run.stdout


def test_sandbox_status_rejects_a_bad_setting(workdir: Path, tether_home: Path) -> None:
    tether_home.mkdir(parents=True, exist_ok=True)
    (tether_home / "settings.json").write_text(json.dumps({"sandbox": {"enabled": "yes"}}))
    run = run_tether(["sandbox", "status"], env=dict(os.environ), cwd=workdir)
    assert run.code == 1
    assert "sandbox.enabled must be true or false" in run.stderr
