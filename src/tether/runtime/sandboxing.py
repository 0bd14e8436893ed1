"""Whether agent shell commands run in the workspace sandbox: the switches and the `ShellSandbox`.

`TETHER_FS_SANDBOX=1|true` wraps every shell launch (Bash, background Bash) in the workspace
policy; `0|false` wraps none; unset (or empty), the settings' `sandbox.enabled` decides, default
off. `sandbox.network` (default false) lets sandboxed commands use the network;
`sandbox.allowUnixSockets` (default false) lets them open AF_UNIX sockets (else the seccomp filter
refuses socket(AF_UNIX): a Docker, ssh-agent, D-Bus or tmux socket they can see would be a way
out). Sandboxed commands get the run's environment without credential-looking variables
(`*KEY*`, `*TOKEN*`, `*SECRET*`, `*PASSWORD*`, `*PASSWD*`, `*CREDENTIAL*`) except the names in
`sandbox.keepEnv`. Anything else is a `UsageError` naming the variable or key. The workspace policy fails closed: when no backend
works, `wrap` raises `SandboxError` and the command does not run. A process that already runs
inside a tether sandbox (`TETHER_SANDBOX` set) keeps its commands in that one: `wrap_command`
never nests.
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
_ON = ("1", "true")
_OFF = ("0", "false")


@dataclass(frozen=True, slots=True)
class ShellSandbox:
    """A policy every shell launch is confined by (the `Sandbox` the shell tools accept)."""

    policy: SandboxPolicy
    status: SandboxStatus | None = None  # None: this machine's cached probe()
    keep_env: frozenset[str] = frozenset()  # credential-looking names passed through anyway

    def wrap(self, argv: Sequence[str], cwd: Path, env: Mapping[str, str]) -> WrappedCommand:
        """What to spawn instead of `argv`; raises SandboxError (nothing may run) when it cannot."""
        from tether.sandbox import wrap_command

        return wrap_command(
            self.policy, argv, cwd=cwd, env=self.command_env(env), status=self.status
        )

    def command_env(self, env: Mapping[str, str]) -> dict[str, str]:
        """`env` without its credentials: the sandbox keeps a command in, this keeps keys out."""
        from tether.tools.output import is_credential_name

        return {k: v for k, v in env.items() if k in self.keep_env or not is_credential_name(k)}


@dataclass(frozen=True, slots=True)
class SandboxSwitch:
    """What the environment and settings ask for, and which of them decided."""

    enabled: bool
    network: bool
    source: str  # "TETHER_FS_SANDBOX=1", "settings sandbox.enabled=true", "default"
    unix_sockets: bool = False
    keep_env: frozenset[str] = frozenset()


def sandbox_switch(env: Mapping[str, str], settings: Mapping[str, Any] | None) -> SandboxSwitch:
    """Read `TETHER_FS_SANDBOX` and `sandbox.enabled`/`sandbox.network`; UsageError when invalid."""
    section = _sandbox_settings(settings)
    network = _setting_bool(section, "network") or False
    unix_sockets = _setting_bool(section, "allowUnixSockets") or False
    keep_env = _setting_names(section, "keepEnv")

    def switch(enabled: bool, source: str) -> SandboxSwitch:
        return SandboxSwitch(enabled, network, source, unix_sockets, keep_env)

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
    """The workspace sandbox for a run in `cwd` (private tmp = `scratch`), or None when off.

    Writes are confined to `cwd` and `scratch` (both must be absolute; `scratch` is created),
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
    scratch.mkdir(parents=True, exist_ok=True, mode=0o700)
    policy = workspace_policy(
        cwd, tmp_dir=scratch, network=switch.network, home=env.get("HOME") or None
    )
    policy = replace(policy, unix_sockets=switch.unix_sockets)
    keys = tether_home.expanduser().absolute() / "providers"
    if not policy.writable_roots[0].is_relative_to(keys):
        policy = replace(policy, denied_roots=(*policy.denied_roots, keys))
    return ShellSandbox(policy, keep_env=switch.keep_env)


def describe_switch(switch: SandboxSwitch) -> str:
    """One line for `tether sandbox status`: what shell commands of a run here would get."""
    if not switch.enabled:
        why = switch.source
        if why == "default":
            why = f"{FS_SANDBOX_ENV} unset and no sandbox.enabled setting"
        return f"shell commands: not sandboxed ({why})"
    network = "network allowed" if switch.network else "network off"
    unix = "Unix sockets allowed" if switch.unix_sockets else "no Unix sockets"
    kept = f" except {', '.join(sorted(switch.keep_env))}" if switch.keep_env else ""
    return (
        f"shell commands: workspace sandbox ({switch.source}): writes only under the working "
        f"directory and the scratch dir, .git/.tether read-only, {network}, {unix}, "
        f"credential variables removed{kept}"
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
