"""The shell sandbox: policies, their bwrap/Landlock/Seatbelt renderings, seccomp, the probe.

Importing this package runs nothing; `probe()` and `wrap_command()` touch the system when called.
"""

from __future__ import annotations

from tether.sandbox.policy import (
    SandboxError,
    SandboxPolicy,
    cross_agent_policy,
    memory_subagent_policy,
    workspace_policy,
)
from tether.sandbox.probe import SandboxStatus, WrappedCommand, format_status, probe, wrap_command
from tether.sandbox.seccomp import inside_tether_sandbox

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
