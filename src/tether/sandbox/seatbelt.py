"""Turns a SandboxPolicy into a macOS Seatbelt (SBPL) profile run with `sandbox-exec -p`.

The profile allows by default and then applies the policy's rules in `ordered_rules` order;
Seatbelt lets the last matching rule win, which gives the same result as bwrap's mount stacking
(deeper paths after their parents). Rules match paths, so a read-only `.git`/`.tether` that does
not exist yet is protected without creating anything. Seatbelt sees real paths (`/private/tmp`),
which is why the policy constructors resolve their roots. There is no pids limit on macOS.
"""

from __future__ import annotations

from collections.abc import Sequence

from tether.sandbox.policy import SandboxError, SandboxPolicy, ordered_rules

SANDBOX_EXEC = "/usr/bin/sandbox-exec"  # absolute: a PATH lookup could be hijacked

# Device files ordinary commands write to even when writes are otherwise confined.
_DEVICE_WRITES = (
    '(allow file-write* (literal "/dev/null") (literal "/dev/zero") (literal "/dev/tty")'
    ' (literal "/dev/dtracehelper") (regex #"^/dev/fd/") (regex #"^/dev/ttys[0-9]+$"))'
)


def render_seatbelt_profile(policy: SandboxPolicy) -> str:
    """The SBPL text for `policy`, one rule per line."""
    lines = ["(version 1)", "(allow default)"]
    if policy.restrict_writes:
        lines += ["(deny file-write*)", _DEVICE_WRITES]
    for path, access in ordered_rules(policy):
        subpath = f"(subpath {_sbpl_string(str(path))})"
        if access == "deny":
            lines.append(f"(deny file-read* file-write* {subpath})")
        elif access == "write":
            lines.append(f"(allow file-read* file-write* {subpath})")
        else:
            lines.append(f"(allow file-read* {subpath})")
            lines.append(f"(deny file-write* {subpath})")
    if not policy.network:
        lines.append("(deny network*)")  # Unix sockets included
    elif not policy.unix_sockets:
        lines.append("(deny network-outbound (remote unix-socket))")
    return "\n".join(lines) + "\n"


def render_seatbelt(policy: SandboxPolicy, argv: Sequence[str]) -> list[str]:
    """The argv running `argv` under `sandbox-exec` with the policy's profile."""
    if not argv:
        raise SandboxError("nothing to run: the sandboxed command line is empty")
    return [SANDBOX_EXEC, "-p", render_seatbelt_profile(policy), "--", *argv]


def _sbpl_string(text: str) -> str:
    if any(ord(ch) < 0x20 for ch in text):
        raise SandboxError(f"sandbox path {text!r} contains control characters")
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'
