"""Policies, their order, the exact bwrap rendering, the seccomp program, and fail-closed wrapping."""

from __future__ import annotations

import logging
import os
import struct
from collections.abc import Callable
from pathlib import Path

import pytest

from tether.errors import TetherError
from tether.sandbox import (
    SandboxError,
    SandboxPolicy,
    SandboxStatus,
    cross_agent_policy,
    format_status,
    memory_subagent_policy,
    workspace_policy,
    wrap_command,
)
from tether.sandbox.bwrap import PathKind, render_bwrap
from tether.sandbox.policy import CREDENTIAL_DIRS, ordered_rules
from tether.sandbox.seccomp import DENIED_SYSCALLS, SYSCALL_NUMBERS, seccomp_fd, seccomp_program


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    (tmp_path / "ws").mkdir()
    (tmp_path / "tmp").mkdir()
    return tmp_path / "ws"


# -- policies ---------------------------------------------------------------------------------


def test_workspace_policy_shape(ws: Path, tmp_path: Path) -> None:
    policy = workspace_policy(ws, tmp_dir=tmp_path / "tmp", home=tmp_path / "home")
    root, tmp = ws.resolve(), (tmp_path / "tmp").resolve()
    assert policy.kind == "workspace"
    assert policy.writable_roots == (root, tmp)
    assert policy.readonly_roots == (root / ".git", root / ".tether", tmp / ".git", tmp / ".tether")
    home = (tmp_path / "home").resolve()
    assert policy.denied_roots == tuple(home / name for name in CREDENTIAL_DIRS)
    assert {home / ".netrc", home / ".docker/config.json", home / ".kube"} <= set(policy.denied_roots)
    assert policy.restrict_writes and not policy.network
    assert policy.tmp_dir == tmp
    assert policy.pids_limit is not None


def test_workspace_isolation_root_must_strictly_contain_root(ws: Path, tmp_path: Path) -> None:
    policy = workspace_policy(ws, isolation_root=tmp_path, tmp_dir=tmp_path / "tmp")
    assert policy.denied_roots[0] == tmp_path.resolve()
    for bad in (ws, ws / "inner", tmp_path / "tmp"):
        bad.mkdir(exist_ok=True)
        with pytest.raises(SandboxError, match="strictly inside"):
            workspace_policy(ws, isolation_root=bad, tmp_dir=tmp_path / "tmp")


def test_roots_must_be_absolute(tmp_path: Path) -> None:
    with pytest.raises(SandboxError, match="absolute"):
        workspace_policy("relative/ws", tmp_dir=tmp_path)
    with pytest.raises(SandboxError, match="absolute"):
        SandboxPolicy("workspace", (Path("rel"),), (), (), True, False, None)
    with pytest.raises(SandboxError, match="absolute"):
        memory_subagent_policy("home", "a")


def test_workspace_root_must_exist(tmp_path: Path) -> None:
    with pytest.raises(SandboxError, match="not an existing directory"):
        workspace_policy(tmp_path / "missing", tmp_dir=tmp_path)


@pytest.mark.parametrize("name", [".tether", ".git"])
def test_symlinked_metadata_refuses_with_clear_error(ws: Path, tmp_path: Path, name: str) -> None:
    decoy = tmp_path / "decoy"
    decoy.mkdir()
    (ws / name).symlink_to(decoy)
    with pytest.raises(SandboxError) as info:
        workspace_policy(ws, tmp_dir=tmp_path / "tmp")
    message = str(info.value)
    assert "symlink" in message and name in message and str(decoy) in message
    assert isinstance(info.value, TetherError)


def test_memory_subagent_policy_shape(tmp_path: Path) -> None:
    th = tmp_path / "th"
    policy = memory_subagent_policy(th, "a1", "p1", home=tmp_path / "home")
    agents = th.resolve() / "agents"
    assert policy.kind == "memory-subagent" and policy.restrict_writes
    assert policy.writable_roots == (agents / "a1" / "memory",)
    assert policy.readonly_roots == (agents.parent / "bin", agents / "a1", agents / "p1")
    assert policy.denied_roots[0] == agents
    home = (tmp_path / "home").resolve()
    assert {str(p.relative_to(home)) for p in policy.denied_roots[1:]} == set(CREDENTIAL_DIRS)


def test_agent_ids_cannot_traverse(tmp_path: Path) -> None:
    for bad in ("../x", "a/b", "..", ""):
        with pytest.raises(SandboxError, match="segment"):
            memory_subagent_policy(tmp_path, bad)


def test_cross_agent_policy_shape(tmp_path: Path) -> None:
    policy = cross_agent_policy(tmp_path, "me", "boss")
    agents = tmp_path.resolve() / "agents"
    assert not policy.restrict_writes
    assert policy.denied_roots == (agents,)
    assert policy.writable_roots == (agents / "me",)
    assert policy.readonly_roots == (agents / "boss",)
    assert cross_agent_policy(tmp_path, "me", None).readonly_roots == ()


def test_ordered_rules_parents_first_then_category(tmp_path: Path) -> None:
    a = tmp_path / "a"
    policy = SandboxPolicy(
        "workspace",
        writable_roots=(a / "b" / "c", a),
        readonly_roots=(a / "b", a),
        denied_roots=(a / "b",),
        restrict_writes=True,
        network=False,
        pids_limit=None,
    )
    # Same path: denied < writable < read-only (later wins); deeper paths always after.
    assert ordered_rules(policy) == [(a, "read"), (a / "b", "read"), (a / "b" / "c", "write")]


# -- bwrap rendering ----------------------------------------------------------------------------


def _fake_fs(kinds: dict[str, PathKind]) -> Callable[[Path], PathKind]:
    def path_kind(path: Path) -> PathKind:
        return kinds.get(str(path), "missing")

    return path_kind


def test_render_bwrap_exact_workspace_args() -> None:
    policy = SandboxPolicy(
        "workspace",
        writable_roots=(Path("/w"), Path("/t")),
        readonly_roots=(Path("/w/.git"), Path("/w/.tether"), Path("/t/.git"), Path("/t/.tether")),
        denied_roots=(Path("/iso"), Path("/h/.ssh"), Path("/h/.aws"), Path("/h/key")),
        restrict_writes=True,
        network=False,
        pids_limit=64,
        tmp_dir=Path("/t"),
    )
    kinds: dict[str, PathKind] = {
        "/w": "dir",
        "/t": "dir",
        "/w/.git": "dir",
        "/iso": "dir",
        "/h/.ssh": "dir",
        "/h/key": "file",
    }
    args = render_bwrap(
        policy,
        ["bash", "-c", "x"],
        cwd="/w",
        env={},
        seccomp_fd=7,
        path_kind=_fake_fs(kinds),
    )
    assert args == [
        "bwrap", "--unshare-user", "--disable-userns", "--unshare-pid", "--unshare-ipc",
        "--unshare-net", "--die-with-parent", "--cap-drop", "ALL",
        "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc",
        "--tmpfs", "/iso",
        "--bind", "/w", "/w",
        "--bind", "/t", "/t",
        "--tmpfs", "/h/.ssh",
        "--ro-bind", "/dev/null", "/h/key",
        "--ro-bind", "/w/.git", "/w/.git",
        "--tmpfs", "/w/.tether",
        "--tmpfs", "/t/.git",
        "--tmpfs", "/t/.tether",
        "--remount-ro", "/iso",
        "--remount-ro", "/h/.ssh",
        "--remount-ro", "/w/.tether",
        "--remount-ro", "/t/.git",
        "--remount-ro", "/t/.tether",
        "--setenv", "TETHER_SANDBOX", "bwrap",
        "--seccomp", "7",
        "--chdir", "/w",
        "--", "bash", "-c", "x",
    ]  # fmt: skip
    assert "--new-session" not in args


def test_render_bwrap_network_and_unrestricted_writes() -> None:
    policy = SandboxPolicy(
        "cross-agent",
        writable_roots=(Path("/th/agents/me"),),
        readonly_roots=(Path("/th/agents/boss"), Path("/th/agents/gone")),
        denied_roots=(Path("/th/agents"),),
        restrict_writes=False,
        network=True,
        pids_limit=None,
    )
    kinds: dict[str, PathKind] = {
        "/th/agents": "dir",
        "/th/agents/me": "dir",
        "/th/agents/boss": "dir",
    }
    args = render_bwrap(
        policy,
        ["true"],
        cwd="/",
        env={},
        disable_userns=False,
        path_kind=_fake_fs(kinds),
    )
    assert "--unshare-net" not in args and "--disable-userns" not in args
    assert args[args.index("--cap-drop") + 2 : args.index("--setenv")] == [
        "--bind", "/", "/", "--dev", "/dev", "--proc", "/proc",
        "--tmpfs", "/th/agents",
        "--bind", "/th/agents/me", "/th/agents/me",
        "--ro-bind", "/th/agents/boss", "/th/agents/boss",
        "--remount-ro", "/th/agents",
    ]  # fmt: skip


def test_render_bwrap_refuses_bad_input() -> None:
    policy = SandboxPolicy("workspace", (Path("/w"),), (), (), True, False, None)
    with pytest.raises(SandboxError, match="empty"):
        render_bwrap(policy, [], cwd="/w", env={})
    with pytest.raises(SandboxError, match="absolute"):
        render_bwrap(policy, ["true"], cwd="w", env={})
    with pytest.raises(SandboxError, match="nest"):
        render_bwrap(policy, ["true"], cwd="/w", env={"TETHER_SANDBOX": "bwrap"})


# -- seccomp: run the assembled program through a tiny classic-BPF interpreter ------------------

_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7, "i386": 0x40000003}
ALLOW, EPERM, KILL = 0x7FFF0000, 0x00050001, 0x80000000


def _run_bpf(program: bytes, nr: int, arch: int, args: tuple[int, ...] = ()) -> int:
    data = struct.pack("=IIQ6Q", nr, arch, 0, *(list(args) + [0] * (6 - len(args))))
    insns = [struct.unpack("=HBBI", program[i : i + 8]) for i in range(0, len(program), 8)]
    acc, pc = 0, 0
    while True:
        code, jt, jf, k = insns[pc]
        if code == 0x20:
            (acc,) = struct.unpack_from("=I", data, k)
            pc += 1
        elif code in (0x15, 0x35):
            hit = acc == k if code == 0x15 else acc >= k
            pc += 1 + (jt if hit else jf)
        elif code == 0x06:
            return k
        else:
            raise AssertionError(f"unexpected opcode {code:#x}")


@pytest.mark.parametrize("arch", ["x86_64", "aarch64"])
def test_seccomp_verdicts(arch: str) -> None:
    program = seccomp_program()
    assert len(program) % 8 == 0
    nr = SYSCALL_NUMBERS[arch]
    for name in DENIED_SYSCALLS:
        assert _run_bpf(program, nr[name], _ARCH[arch]) == EPERM, name
    assert _run_bpf(program, nr["socket"], _ARCH[arch], (40, 1)) == EPERM  # AF_VSOCK
    assert _run_bpf(program, nr["socket"], _ARCH[arch], (2, 1)) == ALLOW  # AF_INET
    assert _run_bpf(program, nr["ioctl"], _ARCH[arch], (0, 0x5412)) == EPERM  # TIOCSTI
    assert _run_bpf(program, nr["ioctl"], _ARCH[arch], (0, 0x5401)) == ALLOW  # TCGETS
    for harmless in (0, 1, 56, 59, 63, 221, 260):
        if harmless not in {nr[n] for n in (*DENIED_SYSCALLS, "socket", "ioctl")}:
            assert _run_bpf(program, harmless, _ARCH[arch]) == ALLOW


def test_seccomp_x32_and_foreign_arches() -> None:
    program = seccomp_program()
    assert _run_bpf(program, 0x40000000 | 101, _ARCH["x86_64"]) == EPERM  # x32 ptrace
    assert _run_bpf(program, 26, _ARCH["i386"]) == KILL


def test_seccomp_fd_holds_the_program() -> None:
    fd = seccomp_fd()
    try:
        assert os.read(fd, 1 << 16) == seccomp_program()
    finally:
        os.close(fd)


# -- status and fail-closed wrapping -----------------------------------------------------------

_NO_BWRAP = SandboxStatus(
    None,
    None,
    False,
    None,
    False,
    ["bubblewrap (bwrap) is not installed: apt-get install bubblewrap"],
)


def test_workspace_fails_closed_without_backend(ws: Path, tmp_path: Path) -> None:
    policy = workspace_policy(ws, tmp_dir=tmp_path / "tmp")
    with pytest.raises(SandboxError, match="bubblewrap.*apt-get install bubblewrap"):
        wrap_command(policy, ["true"], cwd=ws, env={}, status=_NO_BWRAP)


def test_workspace_fails_closed_without_seccomp(ws: Path, tmp_path: Path) -> None:
    status = SandboxStatus(
        "bwrap", "0.8.0", True, None, False, ["bwrap cannot load the seccomp filter: x"]
    )
    policy = workspace_policy(ws, tmp_dir=tmp_path / "tmp")
    with pytest.raises(SandboxError, match="seccomp"):
        wrap_command(policy, ["true"], cwd=ws, env={}, status=status)


def test_other_policies_run_unwrapped_with_a_warning(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    policy = cross_agent_policy(tmp_path, "me", None)
    with caplog.at_level(logging.WARNING, logger="tether.sandbox"):
        wrapped = wrap_command(policy, ["true"], cwd=tmp_path, env={"A": "1"}, status=_NO_BWRAP)
    assert wrapped.argv == ["true"] and wrapped.env == {"A": "1"} and wrapped.backend is None


def test_an_unproven_sandbox_claim_still_fails_closed(ws: Path, tmp_path: Path) -> None:
    """`TETHER_SANDBOX` set outside a sandbox does not make a command run unwrapped."""
    policy = workspace_policy(ws, tmp_dir=tmp_path / "tmp")
    env = {"TETHER_SANDBOX": "bwrap"}
    with pytest.raises(SandboxError, match="cannot run the command in the workspace sandbox"):
        wrap_command(policy, ["ls"], cwd=ws, env=env, status=_NO_BWRAP)


def test_seatbelt_backend_sets_env(ws: Path, tmp_path: Path) -> None:
    status = SandboxStatus("seatbelt", None, False, None, False, [])
    policy = workspace_policy(ws, tmp_dir=tmp_path / "tmp")
    wrapped = wrap_command(policy, ["ls"], cwd=ws, env={}, status=status)
    assert wrapped.argv[:2] == ["/usr/bin/sandbox-exec", "-p"] and wrapped.argv[-2:] == ["--", "ls"]
    assert wrapped.env == {
        "TETHER_SANDBOX": "seatbelt",
        "TMPDIR": str((tmp_path / "tmp").resolve()),
    }


def test_format_status_lines() -> None:
    ok = SandboxStatus(
        "bwrap", "0.8.0", True, 6, True, [], "/usr/bin/bwrap", "cgroup", "/sys/fs/cgroup/pids"
    )
    text = format_status(ok)
    assert "bwrap 0.8.0 (/usr/bin/bwrap)" in text
    assert "seccomp filter:  on" in text and "ABI 6" in text
    assert "/sys/fs/cgroup/pids/tether-sandbox-pids-<N>" in text
    missing = format_status(_NO_BWRAP)
    assert "none: workspace sandboxes will refuse to run" in missing
    assert "note: bubblewrap (bwrap) is not installed" in missing
    assert "pids limit:      not enforced" in missing
