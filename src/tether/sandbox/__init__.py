"""The shell sandbox: policies, their bwrap/Landlock/Seatbelt renderings, seccomp, the probe.

Importing this package runs and imports nothing: each name below loads from its module on first
use, so a light submodule (`sandbox.armed`, read by skill discovery on every run) costs only
itself, not the probe, Landlock's ctypes and seccomp (~4.5 ms of a headless turn). No submodule
shares a name with what the package exports (`probe()` lives in `detect.py`), so the import
system's binding of a loaded submodule never shadows an exported function. `probe()` and
`wrap_command()` touch the system when called.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tether.sandbox.detect import (
        SandboxStatus,
        WrappedCommand,
        format_status,
        probe,
        wrap_command,
    )
    from tether.sandbox.policy import (
        SandboxError,
        SandboxPolicy,
        cross_agent_policy,
        memory_subagent_policy,
        workspace_policy,
    )
    from tether.sandbox.seccomp import inside_tether_sandbox

_MODULE_OF = {
    "SandboxError": "policy",
    "SandboxPolicy": "policy",
    "cross_agent_policy": "policy",
    "memory_subagent_policy": "policy",
    "workspace_policy": "policy",
    "SandboxStatus": "detect",
    "WrappedCommand": "detect",
    "format_status": "detect",
    "probe": "detect",
    "wrap_command": "detect",
    "inside_tether_sandbox": "seccomp",
}

__all__ = [
    "SandboxError",
    "SandboxPolicy",
    "SandboxStatus",
    "WrappedCommand",
    "cross_agent_policy",
    "format_status",
    "inside_tether_sandbox",
    "memory_subagent_policy",
    "probe",
    "workspace_policy",
    "wrap_command",
]


def __getattr__(name: str) -> Any:
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module 'tether.sandbox' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"tether.sandbox.{module}"), name)
    globals()[name] = value
    return value
