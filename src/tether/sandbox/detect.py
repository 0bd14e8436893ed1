"""Which sandbox backend works on this machine, and `wrap_command`, which applies it (fail-closed).

`probe()` runs once per process (cached): bwrap on PATH, `bwrap --version`, a real user-namespace
start, a real seccomp load; on macOS `/usr/bin/sandbox-exec`; Landlock's ABI; how a pids limit
can be enforced (`sandbox.pids`).

Backends (`choose_backend`): bubblewrap first (mounts, namespaces, seccomp, Landlock beneath);
without a usable bwrap, Landlock + seccomp alone (`landlock_backend`); Seatbelt on macOS. The
choice can be forced with `backend="bwrap"|"landlock"` (from `sandbox.backend` or
`TETHER_SANDBOX_BACKEND`); a forced backend that does not work here fails closed, naming why.
An inherited `TETHER_SANDBOX` is believed only when the kernel confirms tether's filter holds this
process (`seccomp.inside_tether_sandbox`).
"""

from __future__ import annotations

import functools
import logging
import os
import platform
import re
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import TracebackType
from typing import Literal

from tether.sandbox.bwrap import SANDBOX_ENV, render_bwrap
from tether.sandbox.landlock import landlock_status
from tether.sandbox.pids import (
    CGROUP_PREFIX,
    PidsMethod,
    ensure_cgroup,
    pids_method,
    running_processes,
    shell_prefix,
)
from tether.sandbox.policy import SandboxError, SandboxPolicy, check_layout
from tether.sandbox.seatbelt import SANDBOX_EXEC, render_seatbelt
from tether.sandbox.seccomp import SUPPORTED_MACHINES, seccomp_fd, seccomp_program

Backend = Literal["bwrap", "landlock", "seatbelt"]
BACKEND_CHOICES: tuple[str, ...] = ("auto", "bwrap", "landlock")
BACKEND_ENV = "TETHER_SANDBOX_BACKEND"

_INSTALL_HINT = (
    "bubblewrap (bwrap) is not installed: apt-get install bubblewrap "
    "(Debian/Ubuntu), dnf install bubblewrap (Fedora), pacman -S bubblewrap (Arch)"
)
_PROBE_TIMEOUT_S = 10.0
_log = logging.getLogger("tether.sandbox")


@dataclass(frozen=True, slots=True)
class SandboxStatus:
    backend: Backend | None
    bwrap_version: str | None
    userns_ok: bool
    landlock_abi: int | None
    seccomp: bool
    reasons: list[str] = field(default_factory=list)  # why something is missing or degraded
    bwrap_path: str | None = None
    pids: PidsMethod | None = None
    pids_cgroup_root: str | None = None  # the pids hierarchy where shared cgroups are created

    @property
    def disable_userns(self) -> bool:
        """bwrap ≥ 0.8 can forbid new user namespaces inside the sandbox."""
        return _version_tuple(self.bwrap_version) >= (0, 8, 0)


@dataclass(frozen=True, slots=True)
class WrappedCommand:
    """What to spawn: `argv` with `env`, passing `pass_fds` through (then `close()` them).

    One WrappedCommand serves one spawn (bwrap consumes the seccomp fd). `backend` is None when
    the command runs unwrapped (already inside a sandbox, or no backend for a non-workspace
    policy).
    """

    argv: list[str]
    pass_fds: tuple[int, ...]
    env: dict[str, str]
    backend: Backend | None = None

    def close(self) -> None:
        for fd in self.pass_fds:
            try:
                os.close(fd)
            except OSError:
                pass

    def __enter__(self) -> WrappedCommand:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


@functools.cache
def probe() -> SandboxStatus:
    """Find a working backend (cached for the life of the process)."""
    landlock = landlock_status()
    if sys.platform == "darwin":
        if os.path.exists(SANDBOX_EXEC):
            return SandboxStatus("seatbelt", None, False, None, False, [])
        return SandboxStatus(None, None, False, None, False, [f"{SANDBOX_EXEC} not found"])
    reasons: list[str] = []
    if landlock.abi is None:
        reasons.append(f"landlock: {landlock.reason}")
    pids, cgroup_root, pids_reason = pids_method()
    if pids_reason:
        reasons.append(pids_reason)
    fallback: Backend | None = "landlock" if _landlock_only_possible(landlock.abi) else None
    bwrap = shutil.which("bwrap")
    if bwrap is None:
        return SandboxStatus(
            fallback, None, False, landlock.abi, fallback is not None, [_INSTALL_HINT, *reasons],
            None, pids, cgroup_root,
        )
    version = _bwrap_version(bwrap)
    if version is None:
        reasons.insert(0, f"`{bwrap} --version` failed: bubblewrap looks broken")
        return SandboxStatus(
            fallback, None, False, landlock.abi, fallback is not None, reasons, bwrap, pids,
            cgroup_root,
        )
    userns_error = _run_probe([bwrap, "--unshare-user", "--ro-bind", "/", "/", "true"])
    if userns_error is not None:
        reasons.insert(
            0,
            f"bwrap cannot create a user namespace ({userns_error}); unprivileged user "
            "namespaces may be disabled (sysctl kernel.unprivileged_userns_clone, or AppArmor's "
            "kernel.apparmor_restrict_unprivileged_userns)",
        )
        return SandboxStatus(
            fallback, version, False, landlock.abi, fallback is not None, reasons, bwrap, pids,
            cgroup_root,
        )
    seccomp_ok = _probe_seccomp(bwrap, reasons)
    return SandboxStatus(
        "bwrap", version, True, landlock.abi, seccomp_ok, reasons, bwrap, pids, cgroup_root
    )


def format_status(status: SandboxStatus) -> str:
    """Human-readable lines for `tether sandbox status`."""
    if status.backend == "bwrap":
        backend = f"bwrap {status.bwrap_version} ({status.bwrap_path}), user namespaces ok"
    elif status.backend == "landlock":
        backend = (
            f"landlock + seccomp (Landlock ABI {status.landlock_abi}, no bubblewrap: "
            "filesystem allow-list, TCP and socket families, scoped signals/abstract sockets)"
        )
    elif status.backend == "seatbelt":
        backend = f"seatbelt ({SANDBOX_EXEC})"
    else:
        backend = "none: workspace sandboxes will refuse to run"
    if status.pids == "cgroup":
        pids = f"cgroup ({status.pids_cgroup_root}/{CGROUP_PREFIX}<N>)"
    elif status.pids == "rlimit":
        pids = "prlimit --nproc (per user, approximate)"
    else:
        pids = "not enforced"
    lines = [
        f"sandbox backend: {backend}",
        f"seccomp filter:  {'on' if status.seccomp else 'off'}",
        f"landlock:        {_landlock_line(status)}",
        f"pids limit:      {pids}",
    ]
    lines += [f"note: {reason}" for reason in status.reasons]
    return "\n".join(lines)


def _landlock_line(status: SandboxStatus) -> str:
    if not status.landlock_abi:
        return "no"
    if os.environ.get("TETHER_LANDLOCK", "").strip().lower() in ("0", "false", "off"):
        return f"ABI {status.landlock_abi}, off (TETHER_LANDLOCK=0)"
    from tether.sandbox.landlock import helper_path

    helper, why = helper_path(_tether_home(os.environ))
    if helper is None:
        return f"ABI {status.landlock_abi}, not applied: {why}"
    if status.backend == "landlock":
        return f"ABI {status.landlock_abi}, the whole sandbox (reads, writes, TCP, scopes)"
    return f"ABI {status.landlock_abi}, applied beneath bwrap (writes, TCP when network is off)"


def choose_backend(
    status: SandboxStatus, choice: str = "auto", home: Path | None = None
) -> tuple[Backend | None, str]:
    """The backend a `choice` ("auto", "bwrap", "landlock") gets here, and why (or why none).

    auto: bwrap first, else Landlock + seccomp alone, else Seatbelt on macOS. Naming one that
    does not work here gives None and the reason (the caller fails closed with it).
    """
    if choice not in BACKEND_CHOICES:
        raise SandboxError(
            f"unknown sandbox backend {choice!r}: use one of {', '.join(BACKEND_CHOICES)}"
        )
    if status.backend == "seatbelt":
        if choice == "auto":
            return "seatbelt", "macOS Seatbelt"
        return None, f"sandbox backend {choice} is not available on macOS (Seatbelt only)"
    bwrap_ok = status.bwrap_version is not None and status.userns_ok
    if choice in ("auto", "bwrap") and bwrap_ok:
        return "bwrap", "bubblewrap works here (the stronger choice: mounts and namespaces)"
    bwrap_why = "; ".join(status.reasons[:1]) or "bubblewrap is not usable"
    if choice == "bwrap":
        return None, f"sandbox backend bwrap was chosen but {bwrap_why}"
    if not _landlock_only_possible(status.landlock_abi):
        why = f"no Landlock (ABI {status.landlock_abi})" if status.landlock_abi else "no Landlock"
        if choice == "landlock":
            return None, f"sandbox backend landlock was chosen but this machine has {why}"
        return None, f"{bwrap_why}; and {why} for the Landlock-only backend"
    from tether.sandbox.landlock import helper_path

    helper, helper_why = helper_path(home or _tether_home(os.environ))
    if helper is None:
        return None, f"the Landlock-only backend cannot run: {helper_why}"
    reason = "chosen" if choice == "landlock" else f"bubblewrap unusable: {bwrap_why}"
    return "landlock", f"Landlock ABI {status.landlock_abi} + seccomp ({reason})"


def wrap_command(
    policy: SandboxPolicy,
    argv: Sequence[str],
    *,
    cwd: Path | str,
    env: Mapping[str, str],
    status: SandboxStatus | None = None,
    backend: str = "auto",
) -> WrappedCommand:
    """`argv` confined by `policy` with the chosen (or best) backend here.

    A workspace or confined policy fails closed (SandboxError naming what is missing) when no
    backend works; other policies run unwrapped with a warning logged once. A `TETHER_SANDBOX`
    variable in `env` is believed only when the kernel confirms it (`inside_tether_sandbox`):
    then the command stays in the outer sandbox; otherwise it is dropped and the command is
    wrapped as usual. `status` defaults to this machine's cached `probe()`.
    """
    child_env = dict(env)
    if SANDBOX_ENV in env:
        if _nested():
            return WrappedCommand(list(argv), (), child_env)
        del child_env[SANDBOX_ENV]  # a claim the kernel does not back: wrap anyway
    check_layout(policy)
    status = status or probe()
    home = _tether_home(child_env)
    _refuse_state_aliases(home)
    if backend == "auto":  # callers without settings (the memory subagent) follow the variable
        backend = env.get(BACKEND_ENV, "").strip().lower() or "auto"
    chosen, why = choose_backend(status, backend, home)
    if chosen is None:
        if policy.kind in _FAIL_CLOSED:
            raise SandboxError(f"cannot run the command in the {policy.kind} sandbox: {why}")
        _warn_unsandboxed(policy.kind, why)
        return WrappedCommand(list(argv), (), child_env)
    if policy.tmp_dir is not None:
        child_env["TMPDIR"] = str(policy.tmp_dir)
    if chosen == "seatbelt":
        child_env[SANDBOX_ENV] = "seatbelt"
        return WrappedCommand(render_seatbelt(policy, argv), (), child_env, "seatbelt")
    if chosen == "landlock":
        return _wrap_landlock(policy, argv, status, child_env, home)
    prefix = shell_prefix(policy.pids_limit, status.pids, status.pids_cgroup_root)
    if not status.seccomp and policy.kind in _FAIL_CLOSED:
        raise SandboxError(
            f"cannot run the command in the {policy.kind} sandbox: the seccomp filter cannot be "
            f"loaded ({'; '.join(r for r in status.reasons if 'seccomp' in r) or 'unknown'})"
        )
    landlock = _landlock_prefix(policy, status, child_env)
    if landlock:  # the helper may live in a hidden tether home: mount it back, read-only
        policy = replace(policy, readonly_roots=(*policy.readonly_roots, Path(landlock[0])))
    argv = [*landlock, *argv]
    fd = seccomp_fd(seccomp_program(unix_sockets=policy.unix_sockets)) if status.seccomp else None
    try:
        wrapped = render_bwrap(
            policy,
            argv,
            cwd=cwd,
            env=child_env,
            seccomp_fd=fd,
            disable_userns=status.disable_userns,
            bwrap=status.bwrap_path or "bwrap",
        )
    except BaseException:
        if fd is not None:
            os.close(fd)
        raise
    return WrappedCommand([*prefix, *wrapped], (fd,) if fd is not None else (), child_env, "bwrap")


_FAIL_CLOSED = ("workspace", "confined")


def _refuse_state_aliases(home: Path) -> None:
    """No sandboxed command runs while a secret of tether's state has another name: mounts and
    Landlock hide paths, but a hard link elsewhere (the workspace, /tmp) reaches the same inode,
    and file modes cannot tell the sandboxed command from tether (`core.permissions.aliases`)."""
    from tether.core.permissions.aliases import linked_state_files

    linked = linked_state_files(home)
    if linked:
        # Which file is not said: for a scoped client it would be another conversation's name.
        raise SandboxError(
            f"refusing to run sandboxed commands: a file of tether's own state ({home}) has "
            "another name, a hard link somewhere the sandbox cannot hide, through which a command "
            f"could read it. `find {home} -type f -links +1` lists it; remove its other name."
        )


def _wrap_landlock(
    policy: SandboxPolicy,
    argv: Sequence[str],
    status: SandboxStatus,
    child_env: dict[str, str],
    home: Path,
) -> WrappedCommand:
    from tether.sandbox.landlock import helper_path, userns_mounts_ok
    from tether.sandbox.landlock_backend import (
        mounted_hidden,
        mounted_read_only,
        render_landlock,
    )

    helper, why = helper_path(home)
    if helper is None or status.landlock_abi is None:
        raise SandboxError(f"cannot run the command in the {policy.kind} sandbox: {why}")
    program = seccomp_program(
        unix_sockets=policy.unix_sockets, strict=True, network=policy.network
    )
    fd = seccomp_fd(program)
    os.set_inheritable(fd, True)
    try:
        wrapped = render_landlock(
            policy,
            argv,
            helper=helper,
            abi=status.landlock_abi,
            seccomp_fd=fd,
            mounts=bool(mounted_read_only(policy) or mounted_hidden(policy))
            and userns_mounts_ok(helper),
        )
    except BaseException:
        os.close(fd)
        raise
    child_env[SANDBOX_ENV] = "landlock"
    # The helper bounds the process count itself (no shell in front: one exec less).
    pids: list[str] = []
    if policy.pids_limit is not None:
        group = pids_cgroup(policy.pids_limit, status)
        if group is not None:
            pids = ["--cgroup", str(group / "cgroup.procs")]
        elif status.pids == "rlimit":
            pids = ["--nproc", str(policy.pids_limit + running_processes())]
    return WrappedCommand([wrapped[0], *pids, *wrapped[1:]], (fd,), child_env, "landlock")


@functools.cache
def _nested() -> bool:
    from tether.sandbox.seccomp import inside_tether_sandbox

    return inside_tether_sandbox()


def _tether_home(env: Mapping[str, str]) -> Path:
    return Path(env.get("TETHER_HOME") or Path(env.get("HOME") or Path.home()) / ".tether").expanduser()


def _landlock_only_possible(abi: int | None) -> bool:
    return bool(abi) and sys.platform.startswith("linux") and platform.machine() in SUPPORTED_MACHINES


def _landlock_prefix(policy: SandboxPolicy, status: SandboxStatus, env: Mapping[str, str]) -> list[str]:
    """Landlock beneath bwrap for policies that restrict writes, where the kernel has it."""
    if not policy.restrict_writes or status.landlock_abi is None:
        return []
    if env.get("TETHER_LANDLOCK", "").strip().lower() in ("0", "false", "off"):
        return []
    from tether.sandbox.landlock import helper_path, landlock_argv

    helper, _why = helper_path(_tether_home(env))
    if helper is None:
        return []
    writable = [Path(p) for p in policy.writable_roots]
    prefix = landlock_argv(helper, writable, network=policy.network, abi=status.landlock_abi)
    return prefix


def pids_cgroup(limit: int, status: SandboxStatus | None = None) -> Path | None:
    """The shared cgroup bounding sandboxes with `limit` pids (created on first use)."""
    status = status or probe()
    if status.pids != "cgroup" or status.pids_cgroup_root is None:
        return None
    return ensure_cgroup(status.pids_cgroup_root, limit)


def _bwrap_version(bwrap: str) -> str | None:
    try:
        out = subprocess.run(
            [bwrap, "--version"], capture_output=True, text=True, timeout=_PROBE_TIMEOUT_S
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    match = re.search(r"(\d+\.\d+(?:\.\d+)?)", out.stdout)
    return match.group(1) if out.returncode == 0 and match else None


def _run_probe(cmd: list[str], pass_fds: tuple[int, ...] = ()) -> str | None:
    """None when `cmd` succeeds, else a short reason."""
    try:
        out = subprocess.run(
            cmd,
            capture_output=True,
            text=True,
            timeout=_PROBE_TIMEOUT_S,
            pass_fds=pass_fds,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return str(exc)
    if out.returncode == 0:
        return None
    return out.stderr.strip().splitlines()[-1] if out.stderr.strip() else f"exit {out.returncode}"


def _probe_seccomp(bwrap: str, reasons: list[str]) -> bool:
    machine = platform.machine()
    if machine not in SUPPORTED_MACHINES:
        reasons.append(f"seccomp filter not available for {machine} (x86_64 and aarch64 only)")
        return False
    fd = seccomp_fd()
    try:
        cmd = [bwrap, "--unshare-user", "--ro-bind", "/", "/", "--seccomp", str(fd), "true"]
        error = _run_probe(cmd, (fd,))
    finally:
        os.close(fd)
    if error is not None:
        reasons.append(f"bwrap cannot load the seccomp filter: {error}")
        return False
    return True


@functools.cache
def _warn_unsandboxed(kind: str, why: str) -> None:
    _log.warning("running %s shell commands without a sandbox: %s", kind, why)


def _version_tuple(version: str | None) -> tuple[int, ...]:
    if not version:
        return ()
    return tuple(int(part) for part in version.split(".") if part.isdigit())
