"""The real Bash tool (foreground and background) inside the real workspace sandbox.

Each escape must fail AND leave the world unchanged; a sandbox that cannot be built runs nothing.
Tests that need bubblewrap skip (naming it) without it, except under CI where they fail.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tests.requirements import need_bwrap
from tether.errors import UsageError
from tether.runtime.policy.sandboxing import ShellSandbox, sandbox_switch, shell_sandbox_from
from tether.sandbox import SandboxStatus, workspace_policy
from tether.tools.background import BackgroundTasks
from tether.tools.bash import BashTool

from .support import live_children, make_ctx, run_tool

CANARY = "canary-7f3c1e"
NO_BWRAP = SandboxStatus(
    None,
    None,
    False,
    None,
    False,
    ["bubblewrap (bwrap) is not installed: apt-get install bubblewrap"],
)


@pytest.fixture(scope="module")
def bwrap_available() -> None:
    need_bwrap(seccomp=True)


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    (tmp_path / "outside").mkdir()
    return root


@pytest.fixture
def sandbox(ws: Path, tmp_path: Path, tether_home: Path) -> ShellSandbox:
    env = {"TETHER_FS_SANDBOX": "1", "HOME": str(tmp_path / "home")}
    found = shell_sandbox_from(env, None, ws, tether_home, tmp_path / "scratch")
    assert found is not None
    return found


def bash(command: str, cwd: Path, sandbox: object, **extra: object) -> tuple[str, bool]:
    result = run_tool(
        BashTool(),
        {"command": command, "description": "test", **extra},
        cwd,
        scratch_dir=cwd.parent / "scratch",
        services={"sandbox": sandbox},
    )
    return result.output, result.is_error


# -- the real sandbox ---------------------------------------------------------------------------


@pytest.mark.usefixtures("bwrap_available")
def test_write_outside_the_workspace_fails_and_leaves_nothing(
    ws: Path, tmp_path: Path, sandbox: ShellSandbox
) -> None:
    outside = tmp_path / "outside" / "escaped.txt"
    output, is_error = bash(f"echo {CANARY} > {outside}", ws, sandbox)
    assert is_error and output.startswith("Exit code: ")
    assert "Read-only file system" in output
    assert not outside.exists()


@pytest.mark.usefixtures("bwrap_available")
def test_write_inside_the_workspace_succeeds(ws: Path, sandbox: ShellSandbox) -> None:
    output, is_error = bash(
        "mkdir -p sub && echo made > sub/inside.txt && cat sub/inside.txt", ws, sandbox
    )
    assert (output, is_error) == ("made", False)
    assert (ws / "sub" / "inside.txt").read_text() == "made\n"


@pytest.mark.usefixtures("bwrap_available")
def test_git_config_inside_the_workspace_stays_read_only(ws: Path, sandbox: ShellSandbox) -> None:
    git = ws / ".git"
    git.mkdir()
    config = git / "config"
    config.write_text("[core]\n\tbare = false\n")
    hooks = git / "hooks"
    hooks.mkdir()
    output, is_error = bash(
        "echo '[core] fsmonitor = evil' >> .git/config; touch .git/hooks/pre-commit; "
        "rm -f .git/config; mv .git .git-moved",
        ws,
        sandbox,
    )
    assert is_error
    assert config.read_text() == "[core]\n\tbare = false\n"
    assert not (hooks / "pre-commit").exists()
    assert git.is_dir() and not (ws / ".git-moved").exists()


@pytest.mark.usefixtures("bwrap_available")
def test_fresh_tether_dir_cannot_be_planted(ws: Path, sandbox: ShellSandbox) -> None:
    output, is_error = bash("mkdir -p .tether && echo '{}' > .tether/settings.json", ws, sandbox)
    assert is_error
    assert not (ws / ".tether" / "settings.json").exists()


@pytest.mark.usefixtures("bwrap_available")
def test_output_shows_nothing_from_hidden_credentials(
    ws: Path, tmp_path: Path, tether_home: Path, sandbox: ShellSandbox
) -> None:
    ssh = tmp_path / "home" / ".ssh"
    ssh.mkdir(parents=True)
    (ssh / "id_ed25519").write_text(f"{CANARY}-ssh\n")
    providers = tether_home / "providers"
    providers.mkdir(parents=True)
    (providers / "auth.json").write_text(f'{{"key": "{CANARY}-auth"}}\n')
    output, _ = bash(
        f"cat {ssh}/id_ed25519 {providers}/auth.json; grep -r {CANARY} {tmp_path}; "
        f"echo listed: $(ls -A {ssh} {providers} | grep -c -v -e : -e '^$')",
        ws,
        sandbox,
    )
    assert CANARY not in output
    assert output.endswith("listed: 0")


@pytest.mark.usefixtures("bwrap_available")
def test_private_tmp_is_inside_the_scratch_dir(ws: Path, tmp_path: Path, sandbox: ShellSandbox) -> None:
    # <scratch>/sandbox-tmp, not the scratch dir itself: tether keeps its own files beside it
    output, is_error = bash('echo "$TMPDIR $TETHER_SANDBOX"; mktemp', ws, sandbox)
    assert not is_error
    first, made = output.splitlines()
    assert first == f"{tmp_path / 'scratch' / 'sandbox-tmp'} bwrap"
    assert Path(made).parent == tmp_path / "scratch" / "sandbox-tmp" and Path(made).exists()


@pytest.mark.usefixtures("bwrap_available")
def test_timeout_kills_everything_inside_the_sandbox(ws: Path, sandbox: ShellSandbox) -> None:
    before = live_children()
    output, is_error = bash("sleep 30 & sleep 30; echo never", ws, sandbox, timeout=500)
    assert is_error and output.startswith("Command timed out after 500ms")
    assert "never" not in output
    assert live_children() <= before


@pytest.mark.usefixtures("bwrap_available")
def test_background_bash_runs_sandboxed(ws: Path, tmp_path: Path, sandbox: ShellSandbox) -> None:
    outside = tmp_path / "outside" / "bg-escaped.txt"

    async def scenario() -> None:
        tasks = BackgroundTasks(tmp_path / "logs")
        ctx = make_ctx(
            ws, scratch_dir=tmp_path / "logs", services={"background": tasks, "sandbox": sandbox}
        )
        result = await BashTool().run(
            {
                "command": f"touch {outside} || echo denied; echo in > bg-inside.txt",
                "description": "sandboxed background",
                "run_in_background": True,
            },
            ctx,
        )
        assert not result.is_error, result.output
        assert await tasks.wait("bash_1", timeout=20)
        task = tasks.get("bash_1")
        assert task is not None and task.exit_code == 0
        log = tasks.output("bash_1")
        assert "Read-only file system" in log and "denied" in log

    asyncio.run(scenario())
    assert not outside.exists()
    assert (ws / "bg-inside.txt").read_text() == "in\n"


# -- fail closed: no sandbox, no command ---------------------------------------------------------


def test_unbuildable_sandbox_runs_nothing(ws: Path, tmp_path: Path) -> None:
    broken = ShellSandbox(workspace_policy(ws, tmp_dir=tmp_path / "outside"), status=NO_BWRAP)
    marker = ws / "marker"
    output, is_error = bash(f"touch {marker}", ws, broken)
    assert is_error
    assert output.startswith("Sandbox error: cannot run the command in the workspace sandbox")
    assert "bubblewrap" in output and "did not run" in output
    assert not marker.exists()


def test_unbuildable_sandbox_runs_nothing_in_background(ws: Path, tmp_path: Path) -> None:
    broken = ShellSandbox(workspace_policy(ws, tmp_dir=tmp_path / "outside"), status=NO_BWRAP)
    marker = ws / "bg-marker"
    logs = tmp_path / "logs"

    async def scenario() -> None:
        tasks = BackgroundTasks(logs)
        ctx = make_ctx(ws, scratch_dir=logs, services={"background": tasks, "sandbox": broken})
        result = await BashTool().run(
            {"command": f"touch {marker}", "description": "x", "run_in_background": True}, ctx
        )
        assert result.is_error and result.output.startswith("Sandbox error: ")
        assert "bubblewrap" in result.output
        assert tasks.tasks() == [] and tasks.running_count == 0

    asyncio.run(scenario())
    assert not marker.exists()
    assert list(logs.glob("*.log")) == []


def test_a_sandbox_service_that_cannot_wrap_is_refused(ws: Path) -> None:
    marker = ws / "marker"
    output, is_error = bash(f"touch {marker}", ws, {"not": "a sandbox"})
    assert is_error and output.startswith("Sandbox error: ")
    assert not marker.exists()


def test_symlinked_git_dir_refuses_to_build(ws: Path, tmp_path: Path, tether_home: Path) -> None:
    (tmp_path / "elsewhere").mkdir()
    (ws / ".git").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(Exception, match="symlink"):
        shell_sandbox_from({"TETHER_FS_SANDBOX": "1"}, None, ws, tether_home, tmp_path / "s")


# -- the switches -------------------------------------------------------------------------------


@pytest.mark.parametrize("value", ["1", "true", "TRUE", " True "])
def test_env_on_wraps_with_the_workspace_policy(
    value: str, ws: Path, tmp_path: Path, tether_home: Path
) -> None:
    scratch = tmp_path / "new" / "scratch"
    found = shell_sandbox_from({"TETHER_FS_SANDBOX": value}, None, ws, tether_home, scratch)
    assert found is not None
    policy = found.policy
    assert policy.kind == "workspace" and policy.restrict_writes and not policy.network
    assert policy.writable_roots == (ws.resolve(), (scratch / "sandbox-tmp").resolve())
    assert policy.tmp_dir == (scratch / "sandbox-tmp").resolve() and scratch.is_dir()
    assert tether_home.absolute() / "providers" in policy.denied_roots


@pytest.mark.parametrize("value", ["0", "false", "FALSE"])
def test_env_off_beats_settings(value: str, ws: Path, tmp_path: Path, tether_home: Path) -> None:
    settings = {"sandbox": {"enabled": True}}
    env = {"TETHER_FS_SANDBOX": value}
    assert shell_sandbox_from(env, settings, ws, tether_home, tmp_path / "s") is None


def test_unset_follows_settings_default_off(ws: Path, tmp_path: Path, tether_home: Path) -> None:
    scratch = tmp_path / "s"
    assert shell_sandbox_from({}, None, ws, tether_home, scratch) is None
    assert shell_sandbox_from({"TETHER_FS_SANDBOX": ""}, {}, ws, tether_home, scratch) is None
    assert shell_sandbox_from({}, {"sandbox": {"enabled": False}}, ws, tether_home, scratch) is None
    on = shell_sandbox_from({}, {"sandbox": {"enabled": True}}, ws, tether_home, scratch)
    assert on is not None and not on.policy.network
    net = {"sandbox": {"enabled": True, "network": True}}
    with_net = shell_sandbox_from({}, net, ws, tether_home, scratch)
    assert with_net is not None and with_net.policy.network
    env_net = shell_sandbox_from({"TETHER_FS_SANDBOX": "1"}, net, ws, tether_home, scratch)
    assert env_net is not None and env_net.policy.network


def test_invalid_env_value_names_the_variable() -> None:
    with pytest.raises(UsageError, match=r"TETHER_FS_SANDBOX='maybe'.*1 or true.*0 or false"):
        sandbox_switch({"TETHER_FS_SANDBOX": "maybe"}, None)


@pytest.mark.parametrize(
    ("settings", "key"),
    [
        ({"sandbox": {"enabled": "yes"}}, "sandbox.enabled"),
        ({"sandbox": {"enabled": True, "network": 1}}, "sandbox.network"),
        ({"sandbox": True}, "sandbox"),
    ],
)
def test_invalid_setting_names_the_key(settings: dict[str, object], key: str) -> None:
    with pytest.raises(UsageError, match=rf"settings {key} must be"):
        sandbox_switch({}, settings)
