"""The permission decision: one pure function from (call, mode, workspace) to allow / deny / ask.

This is the minimal engine of the first slice: modes only. Rules, shell parsing and hooks tighten
or lift it in later layers, but every decision still comes out of `decide()`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from tether.core.tools import Effect
from tether.errors import UsageError

Verdict = Literal["allow", "deny", "ask"]

PERMISSION_MODES = ("standard", "acceptEdits", "unrestricted", "strict")
_MODE_ALIASES = {
    "default": "standard",
    "bypassPermissions": "unrestricted",
    "fullAccess": "unrestricted",
}

# Tools whose effect is bookkeeping inside the conversation, allowed without a path check.
_ALWAYS_SAFE = frozenset({"TodoWrite", "TaskOutput"})


@dataclass(frozen=True, slots=True)
class Decision:
    verdict: Verdict
    reason: str
    matched_rule: str | None = None


def normalize_mode(value: str) -> str:
    """Canonical mode name; legacy aliases map as the reference does; anything else is an error."""
    mode = _MODE_ALIASES.get(value, value)
    if mode not in PERMISSION_MODES:
        raise UsageError(
            f"Invalid permission mode {value!r}. Valid modes: {', '.join(PERMISSION_MODES)}"
        )
    return mode


def is_within(path: Path, roots: Sequence[Path]) -> bool:
    """True when the fully resolved `path` lies inside one of the resolved `roots`."""
    resolved = path.resolve()
    for root in roots:
        try:
            resolved.relative_to(root.resolve())
            return True
        except ValueError:
            continue
    return False


def decide(
    tool_name: str,
    effect: Effect,
    paths: Sequence[Path],
    mode: str,
    workspace: Sequence[Path],
) -> Decision:
    """Decide one call. `paths` are what the call touches; `workspace` the roots it may use."""
    if mode == "unrestricted":
        return Decision("allow", "permission mode unrestricted")
    if mode == "strict":
        return Decision("ask", "permission mode strict asks for every call")
    if tool_name in _ALWAYS_SAFE:
        return Decision("allow", f"{tool_name} only changes conversation state")
    inside = all(is_within(p, workspace) for p in paths)
    if effect is Effect.READ and inside:
        return Decision("allow", "read-only tool inside the working directory")
    if mode == "acceptEdits" and effect is Effect.WRITE and paths and inside:
        return Decision(
            "allow", "permission mode acceptEdits allows edits inside the working directory"
        )
    if not inside:
        return Decision("ask", "the call touches a path outside the working directory")
    return Decision(
        "ask", f"{tool_name} has effect {effect.value!r}, which needs approval in mode {mode}"
    )


def headless_denial(tool_name: str, effect: Effect, mode: str) -> str:
    """The reference's one-shot denial, plus the flag that would have allowed the call."""
    if effect is Effect.WRITE and mode == "standard":
        hint = "run with --permission-mode acceptEdits (or --yolo) to allow file edits"
    elif mode == "strict":
        hint = "permission mode strict asks for every call; use --permission-mode standard or an allow rule"
    else:
        hint = f"run with --permission-mode unrestricted (or --yolo) to allow {tool_name}"
    return f"Tool requires approval (headless mode): {hint}"
