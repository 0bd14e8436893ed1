"""Permission modes and the decision value every check returns.

`Decision.confine` is the confinement contract: a shell call the checker admitted only because
every command in it is read-only (no rule, mode or human admitted it) must run inside a kernel
read-only sandbox; the runner refuses to run it otherwise. A parser bug then costs at most a read.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from tether.core.tools import Effect
from tether.errors import UsageError

Verdict = Literal["allow", "deny", "ask"]

PERMISSION_MODES = ("standard", "acceptEdits", "unrestricted", "strict", "plan")
_MODE_ALIASES = {
    "default": "standard",
    "bypassPermissions": "unrestricted",
    "fullAccess": "unrestricted",
}
# From most to least restrictive: untrusted project settings may only move a mode left.
# `plan` admits reads only (core/permissions/plan.py), so it ranks with `strict`.
MODE_STRICTNESS = {"plan": 0, "strict": 0, "standard": 1, "acceptEdits": 2, "unrestricted": 3}


@dataclass(frozen=True, slots=True)
class Decision:
    verdict: Verdict
    reason: str
    matched_rule: str | None = None
    sticky: bool = False  # an `alwaysAsk`: only a human (or a deny) may settle it, never a hook
    confine: bool = False  # allowed only as read-only: run it in the kernel read-only sandbox
    # The real paths the decision judged (symlinks resolved then): a file tool opens only these,
    # so a name swapped for a link after the decision cannot lead it elsewhere.
    judged: tuple[str, ...] = ()


def normalize_mode(value: str) -> str:
    """Canonical mode name; legacy aliases map as the reference does; anything else is an error."""
    mode = _MODE_ALIASES.get(value, value)
    if mode not in PERMISSION_MODES:
        raise UsageError(
            f"Invalid permission mode {value!r}. Valid modes: {', '.join(PERMISSION_MODES)}"
        )
    return mode


def headless_denial(tool_name: str, effect: Effect, mode: str) -> str:
    """The reference's one-shot denial, plus the flag that would have allowed the call."""
    if effect is Effect.WRITE and mode == "standard":
        hint = "run with --permission-mode acceptEdits (or --yolo) to allow file edits"
    elif mode == "strict":
        hint = "permission mode strict asks for every call; use --permission-mode standard or an allow rule"
    else:
        hint = (
            f"add an allow rule (--allowedTools '{tool_name}(…)') or run with "
            f"--permission-mode unrestricted (or --yolo) to allow {tool_name}"
        )
    return f"Tool requires approval (headless mode): {hint}"
