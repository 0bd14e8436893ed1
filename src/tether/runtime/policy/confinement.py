"""The read-only confinement of shell commands tether admits without anyone's explicit yes.

A command that only the read-only auto-allow admitted (the permission decision says
`confine=True`) runs in the sandbox built here: the filesystem read-only but for a private tmp, no
network, no Unix sockets, credential paths and tether's own state hidden, the environment
scrubbed (`runtime.sandboxing.confinement_sandbox`), and every git inside it with the
repository's programs switched off (`tools.git_safety.git_safe_env`). The parser decides what to
ask; this is what enforces the rest.

Nothing here runs until the first shell call needs it: a turn without one never probes the
kernel. When no backend can confine, `available()` is False and the permission decision asks
instead of auto-allowing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tether.errors import SandboxError

if TYPE_CHECKING:
    from tether.runtime.policy.sandboxing import ShellSandbox
    from tether.sandbox import WrappedCommand


class Confinement:
    """The run's read-only sandbox, built on first use (the `Sandbox` the shell tools accept)."""

    def __init__(
        self, env: Mapping[str, str], settings: Mapping[str, Any] | None, cwd: Path,
        tether_home: Path, scratch: Path,
    ) -> None:
        self._args = (env, settings, cwd, tether_home, scratch)
        self._sandbox: ShellSandbox | None = None
        self._built = False
        self._why_not = ""

    def available(self) -> bool:
        """Whether a kernel backend here can confine a command (probed once per run)."""
        return self._build() is not None

    @property
    def why_not(self) -> str:
        return self._why_not

    def wrap(self, argv: Sequence[str], cwd: Path, env: Mapping[str, str]) -> WrappedCommand:
        sandbox = self._build()
        if sandbox is None:
            raise SandboxError(f"no kernel sandbox here can confine the command ({self._why_not})")
        from dataclasses import replace

        from tether.tools.git_safety import git_safe_env

        # The caller's own command-line config (it may carry a token) stays out; git's safe mode
        # goes in, and its GIT_CONFIG_KEY_n names must survive the credential-name scrub.
        plain = {k: v for k, v in env.items() if not k.startswith("GIT_CONFIG_")}
        safe = git_safe_env(plain)
        ours = frozenset(k for k in safe if k.startswith("GIT_CONFIG_"))
        return replace(sandbox, keep_env=sandbox.keep_env | ours).wrap(argv, cwd, safe)

    def _build(self) -> ShellSandbox | None:
        if not self._built:
            self._built = True
            from tether.runtime.policy.sandboxing import confinement_sandbox

            try:
                self._sandbox = confinement_sandbox(*self._args)
            except SandboxError as exc:
                self._why_not = str(exc)
            else:
                if self._sandbox is None:
                    self._why_not = "no bubblewrap, and no Landlock in this kernel"
        return self._sandbox
