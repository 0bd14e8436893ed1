"""Whether agent shell commands run sandboxed: the switches, the `ShellSandbox`, the confinement.

`TETHER_FS_SANDBOX=1|true` wraps every shell launch (Bash, background Bash) in the workspace
policy; `0|false` wraps none; unset (or empty), the settings' `sandbox.enabled` decides, default
off. `sandbox.network` (default false) lets sandboxed commands use the network;
`sandbox.allowUnixSockets` (default false) lets them open AF_UNIX sockets (else the seccomp filter
refuses socket(AF_UNIX): a Docker, ssh-agent, D-Bus or tmux socket they can see would be a way
out). Sandboxed commands get the run's environment without credential-looking variables
(`*KEY*`, `*TOKEN*`, `*SECRET*`, `*PASSWORD*`, `*PASSWD*`, `*CREDENTIAL*`) except the names in
`sandbox.keepEnv`; values shaped like credentials go too, whatever the name (a URL with a
password, `ghp_…`, `sk-…`, `xox…-`, AWS key ids, JWTs; see `tools.output.is_credential`).
`sandbox.backend` (or `TETHER_SANDBOX_BACKEND`, which wins) picks the kernel backend: `auto`
(bubblewrap, else Landlock + seccomp alone), `bwrap` or `landlock`. Anything else is a
`UsageError` naming the variable or key. The workspace policy fails closed: when no backend works,
`wrap` raises `SandboxError` and the command does not run. A process that really runs inside a
tether sandbox keeps its commands in that one; an inherited `TETHER_SANDBOX` variable alone is
not believed (`wrap_command` asks the kernel).

`confinement_sandbox` is the read-only sandbox for shell commands admitted without a human
(a Decision with `confine=True`): nothing writable but a private tmp, no network, no Unix
sockets, the credential paths and all of `$TETHER_HOME` hidden, the environment scrubbed. It is
None only when no kernel backend here can enforce that; then such commands must ask.

The workspace sandbox runs every command inside the armed-names guard (`sandbox.armed`): a
nested `.git`, a bare repository layout, `.envrc`, `.vscode`, `.idea` or `.tether` that appears
in the workspace during the command is moved aside and reported, and those already there are
mounted read-only.

The private tmp dirs are `<scratch>/sandbox-tmp` (workspace) and `<scratch>/confined-tmp`
(confinement): never the scratch dir itself, where tether keeps background logs, output overflow
files and the shell-group ledger, which a sandboxed command must not be able to write or plant
symlinks in.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tether.errors import UsageError

if TYPE_CHECKING:  # the sandbox package loads only when a sandbox is switched on
    from tether.sandbox import SandboxPolicy, SandboxStatus, WrappedCommand

FS_SANDBOX_ENV = "TETHER_FS_SANDBOX"
BACKEND_ENV = "TETHER_SANDBOX_BACKEND"
BACKENDS: tuple[str, ...] = ("auto", "bwrap", "landlock")
WORKSPACE_TMP = "sandbox-tmp"
CONFINED_TMP = "confined-tmp"
# Landlock alone confines auto-allowed commands only with scopes (ABI 6): signals and abstract
# Unix sockets stay inside the sandbox.
MIN_CONFINE_LANDLOCK_ABI = 6
_ON = ("1", "true")
_OFF = ("0", "false")


@dataclass(frozen=True, slots=True)
class ShellSandbox:
    """A policy every shell launch is confined by (the `Sandbox` the shell tools accept)."""

    policy: SandboxPolicy
    status: SandboxStatus | None = None  # None: this machine's cached probe()
    keep_env: frozenset[str] = frozenset()  # credential-looking names passed through anyway
    backend: str = "auto"  # "auto" | "bwrap" | "landlock"
    # The armed-names guard's state file (`sandbox.armed`): set, every launch runs inside the
    # guard and the armed names it knows in the writable roots are mounted read-only.
    guard_state: Path | None = None
    tether_home: Path | None = None  # where the compiled guard is cached
    # Workspace files the user's hooks run (`runtime/extensions/hook_scripts.py`): read-only while they exist.
    readonly_files: tuple[Path, ...] = ()

    def wrap(self, argv: Sequence[str], cwd: Path, env: Mapping[str, str]) -> WrappedCommand:
        """What to spawn instead of `argv`; raises SandboxError (nothing may run) when it cannot."""
        from tether.sandbox import wrap_command

        policy, roots = self.policy, self._guarded_roots()
        if self.guard_state is not None and roots:
            from tether.sandbox.armed import known_armed

            # Existing nested .git/.envrc/.vscode … read-only (links excepted: a mount would
            # protect the target; the guard sees a replaced link by its inode).
            known = [Path(p) for p in known_armed(str(self.guard_state), roots)]
            known = [p for p in known if not p.is_symlink()]
            if known:
                policy = replace(policy, readonly_roots=(*policy.readonly_roots, *known))
        scripts = [p for p in self.readonly_files if p.is_file() and not p.is_symlink()]
        if scripts:
            policy = replace(policy, readonly_roots=(*policy.readonly_roots, *scripts))
        wrapped = wrap_command(
            policy,
            argv,
            cwd=cwd,
            env=self.command_env(env),
            status=self.status,
            backend=self.backend,
        )
        if self.guard_state is None or not roots or wrapped.backend is None:
            return wrapped
        from tether.sandbox.detect import WrappedCommand

        home = self.tether_home or Path.home() / ".tether"
        guard = [*_guard_program(home), str(self.guard_state), *roots, "--"]
        return WrappedCommand(
            [*guard, *wrapped.argv], wrapped.pass_fds, wrapped.env, wrapped.backend
        )

    def _guarded_roots(self) -> list[str]:
        return [str(r) for r in self.policy.writable_roots if r != self.policy.tmp_dir]

    def command_env(self, env: Mapping[str, str]) -> dict[str, str]:
        """`env` without its credentials (by name and by value shape): the sandbox keeps a
        command in, this keeps keys out."""
        from tether.tools.output import is_credential

        return {k: v for k, v in env.items() if k in self.keep_env or not is_credential(k, v)}


@dataclass(frozen=True, slots=True)
class SandboxSwitch:
    """What the environment and settings ask for, and which of them decided."""

    enabled: bool
    network: bool
    source: str  # "TETHER_FS_SANDBOX=1", "settings sandbox.enabled=true", "default"
    unix_sockets: bool = False
    keep_env: frozenset[str] = frozenset()
    backend: str = "auto"


def sandbox_backend(env: Mapping[str, str], settings: Mapping[str, Any] | None) -> str:
    """`TETHER_SANDBOX_BACKEND`, else `sandbox.backend`, else "auto"; UsageError when invalid."""
    raw = env.get(BACKEND_ENV, "").strip()
    if raw:
        if raw.lower() not in BACKENDS:
            raise UsageError(
                f"{BACKEND_ENV}={raw!r} is not valid: use auto (bubblewrap, else Landlock + "
                "seccomp), bwrap or landlock"
            )
        return raw.lower()
    value = _sandbox_settings(settings).get("backend")
    if value is None:
        return "auto"
    if not isinstance(value, str) or value not in BACKENDS:
        raise UsageError(
            f'settings sandbox.backend must be "auto", "bwrap" or "landlock", got {value!r}'
        )
    return value


def sandbox_switch(env: Mapping[str, str], settings: Mapping[str, Any] | None) -> SandboxSwitch:
    """Read `TETHER_FS_SANDBOX` and `sandbox.enabled`/`sandbox.network`; UsageError when invalid."""
    section = _sandbox_settings(settings)
    network = _setting_bool(section, "network") or False
    unix_sockets = _setting_bool(section, "allowUnixSockets") or False
    keep_env = _setting_names(section, "keepEnv")
    backend = sandbox_backend(env, settings)

    def switch(enabled: bool, source: str) -> SandboxSwitch:
        return SandboxSwitch(enabled, network, source, unix_sockets, keep_env, backend)

    from_settings = _setting_bool(section, "enabled")
    raw = env.get(FS_SANDBOX_ENV, "").strip()
    if raw:
        value = raw.lower()
        if value not in _ON + _OFF:
            raise UsageError(
                f"{FS_SANDBOX_ENV}={raw!r} is not valid: use 1 or true to sandbox shell "
                "commands, 0 or false to run them unsandboxed, or unset it to follow the "
                "settings' sandbox.enabled"
            )
        return switch(value in _ON, f"{FS_SANDBOX_ENV}={raw}")
    if from_settings is not None:
        return switch(from_settings, f"settings sandbox.enabled={str(from_settings).lower()}")
    return switch(False, "default")


def shell_sandbox_from(
    env: Mapping[str, str],
    settings: Mapping[str, Any] | None,
    cwd: Path,
    tether_home: Path,
    scratch: Path,
) -> ShellSandbox | None:
    """The workspace sandbox for a run in `cwd` (private tmp in `scratch`), or None when off.

    Writes are confined to `cwd` and `<scratch>/sandbox-tmp` (both must be absolute; the tmp is
    created),
    `.git`/`.tether` inside them stay read-only, the user's credential directories and tether's
    stored provider keys (`<tether_home>/providers`) are hidden. Raises UsageError for a bad
    switch and SandboxError for a layout the sandbox could not protect (e.g. a symlinked `.git`).
    """
    switch = sandbox_switch(env, settings)
    if not switch.enabled:
        return None
    from tether.sandbox import SandboxError, workspace_policy
    for label, path in (("working directory", cwd), ("scratch directory", scratch)):
        if not path.is_absolute():
            raise SandboxError(f"sandbox {label} {str(path)!r} must be an absolute path")
    tmp = private_tmp(scratch, WORKSPACE_TMP)
    policy = workspace_policy(
        cwd, tmp_dir=tmp, network=switch.network, home=env.get("HOME") or None
    )
    policy = replace(policy, unix_sockets=switch.unix_sockets)
    keys = tether_home.expanduser().absolute() / "providers"
    if not policy.writable_roots[0].is_relative_to(keys):
        policy = replace(policy, denied_roots=(*policy.denied_roots, keys))
    # tether's own state inside the workspace (cwd = $HOME, TETHER_HOME under it) stays
    # read-only: settings, agents, background logs; the private tmp inside it stays writable.
    home = tether_home.expanduser().absolute().resolve()
    root = policy.writable_roots[0]
    if home != root and home.is_relative_to(root):
        policy = replace(policy, readonly_roots=(*policy.readonly_roots, home))
    import hashlib

    digest = hashlib.sha256(str(policy.writable_roots[0]).encode()).hexdigest()[:12]
    return ShellSandbox(
        policy,
        keep_env=switch.keep_env,
        backend=switch.backend,
        guard_state=scratch / f"armed-{digest}.json",
        tether_home=tether_home,
    )


def _guard_program(tether_home: Path) -> list[str]:
    """The armed-names guard: the compiled one (no interpreter start-up per command), else
    `sandbox/armed.py` under an isolated Python."""
    import sys

    from tether.sandbox import armed
    from tether.sandbox.landlock import guard_path

    built, _why = guard_path(tether_home.expanduser().absolute())
    if built is not None:
        return [str(built)]
    return [sys.executable, "-I", "-S", armed.__file__]


def private_tmp(scratch: Path, name: str) -> Path:
    """`<scratch>/<name>`, created 0700; refused when it (or `scratch`) is a symlink, since a
    planted link would point the sandbox's only writable place somewhere else."""
    import os
    import stat

    from tether.sandbox import SandboxError

    scratch.mkdir(parents=True, exist_ok=True, mode=0o700)
    tmp = scratch / name
    for path in (scratch, tmp):
        try:
            st = os.lstat(path)
        except FileNotFoundError:
            continue
        if stat.S_ISLNK(st.st_mode):
            raise SandboxError(f"refusing to use {path} as sandbox tmp: it is a symlink")
    tmp.mkdir(exist_ok=True, mode=0o700)
    return tmp


def confinement_sandbox(
    env: Mapping[str, str],
    settings: Mapping[str, Any] | None,
    cwd: Path,
    tether_home: Path,
    scratch: Path,
) -> ShellSandbox | None:
    """The read-only sandbox for auto-allowed shell commands, or None when nothing here can
    enforce it (then those commands must ask).

    Nothing writable but `<scratch>/confined-tmp` (TMPDIR), no network, no Unix sockets, the
    user's credential paths, all of `tether_home` and `scratch` hidden (the tmp inside stays
    usable), credential variables removed (`sandbox.keepEnv` still passes names through).
    `settings` is the merged settings dict (`{"sandbox": {...}}`); the backend follows
    `sandbox.backend` / `TETHER_SANDBOX_BACKEND`. Cheap to call: the probe is cached.
    Raises UsageError for bad settings; a layout it cannot protect gives None.
    """
    from tether.sandbox import SandboxError, probe
    from tether.sandbox.detect import choose_backend
    from tether.sandbox.policy import confined_policy

    section = _sandbox_settings(settings)
    keep_env = _setting_names(section, "keepEnv")
    backend = sandbox_backend(env, settings)
    home = tether_home.expanduser().absolute()
    status = probe()
    chosen, _why = choose_backend(status, backend, home)
    if chosen is None or chosen == "seatbelt":  # Seatbelt: not verified to hide tether home
        return None
    if chosen == "landlock" and (status.landlock_abi or 0) < MIN_CONFINE_LANDLOCK_ABI:
        return None  # no scopes: a confined command could signal the user's other processes
    if not cwd.is_absolute() or not scratch.is_absolute():
        return None
    hidden = [home, scratch.absolute()]
    resolved_cwd = cwd.resolve()
    if any(resolved_cwd.is_relative_to(h.resolve()) for h in hidden):
        return None  # a command there could not even see its working directory
    try:
        tmp = private_tmp(scratch, CONFINED_TMP)
        policy = confined_policy(tmp, home=env.get("HOME") or None, hidden=hidden)
    except (SandboxError, OSError):
        return None
    return ShellSandbox(policy, keep_env=keep_env, backend=backend)


def describe_confinement(
    env: Mapping[str, str], settings: Mapping[str, Any] | None, tether_home: Path | None = None
) -> list[str]:
    """Lines for `tether sandbox status`: what auto-allowed shell commands get here."""
    from tether.sandbox import probe
    from tether.sandbox.detect import choose_backend

    backend = sandbox_backend(env, settings)
    status = probe()
    chosen, why = choose_backend(status, backend, tether_home)
    if chosen == "bwrap":
        landlock_off = env.get("TETHER_LANDLOCK", "").strip().lower() in ("0", "false", "off")
        layered = bool(status.landlock_abi) and not landlock_off
        layers = "bwrap+seccomp+landlock" if layered else "bwrap+seccomp"
    elif chosen == "landlock" and (status.landlock_abi or 0) < MIN_CONFINE_LANDLOCK_ABI:
        return [
            "auto-allowed shell commands: NOT confinable here: they will ask (Landlock ABI "
            f"{status.landlock_abi} < {MIN_CONFINE_LANDLOCK_ABI} cannot stop a command from "
            "signalling the user's other processes, and there is no usable bubblewrap)"
        ]
    elif chosen == "landlock":
        layers = "landlock+seccomp"
    else:
        if chosen == "seatbelt":
            why = "Seatbelt confinement of auto-allowed commands is not implemented"
        return [f"auto-allowed shell commands: NOT confinable here: they will ask ({why})"]
    return [
        f"auto-allowed shell commands: confined read-only by {layers} "
        f"(backend {backend}: {why}): no writes but a private tmp, no network, no Unix "
        "sockets, credential paths and tether's home hidden, credential variables removed"
    ]


def describe_switch(switch: SandboxSwitch) -> str:
    """One line for `tether sandbox status`: what shell commands of a run here would get."""
    if not switch.enabled:
        why = switch.source
        if why == "default":
            why = f"{FS_SANDBOX_ENV} unset and no sandbox.enabled setting"
        return f"shell commands: not sandboxed ({why})"
    from tether.sandbox import probe
    from tether.sandbox.detect import choose_backend

    chosen, why = choose_backend(probe(), switch.backend)
    using = f"{chosen}: {why}" if chosen else f"NONE, every command is refused: {why}"
    network = "network allowed" if switch.network else "network off"
    unix = "Unix sockets allowed" if switch.unix_sockets else "no Unix sockets"
    kept = f" except {', '.join(sorted(switch.keep_env))}" if switch.keep_env else ""
    return (
        f"shell commands: workspace sandbox ({switch.source}) on {using} (sandbox.backend "
        f"{switch.backend}): writes only under the working directory and a private tmp, "
        f".git/.tether read-only, nested .git/.envrc/.vscode/.idea planted by a command moved "
        f"aside, {network}, {unix}, credential variables removed (by name and by value){kept}"
    )


def _sandbox_settings(settings: Mapping[str, Any] | None) -> Mapping[str, Any]:
    if settings is None:
        return {}
    section = settings.get("sandbox")
    if section is None:
        return {}
    if not isinstance(section, Mapping):
        raise UsageError(
            f'settings sandbox must be an object like {{"enabled": true}}, got {section!r}'
        )
    return section


def _setting_names(section: Mapping[str, Any], key: str) -> frozenset[str]:
    value = section.get(key)
    if value is None:
        return frozenset()
    if not isinstance(value, list) or not all(
        isinstance(v, str) and v and "=" not in v for v in value
    ):
        raise UsageError(
            f'settings sandbox.{key} must be a list of variable names like ["NPM_TOKEN"], '
            f"got {value!r}"
        )
    return frozenset(value)


def _setting_bool(section: Mapping[str, Any], key: str) -> bool | None:
    value = section.get(key)
    if value is None:
        return None
    if not isinstance(value, bool):
        raise UsageError(f"settings sandbox.{key} must be true or false, got {value!r}")
    return value
