"""EnterWorktree and ExitWorktree: a git worktree for the conversation, under tether's state.

EnterWorktree adds `$TETHER_HOME/worktrees/<conversation>/<name>` on a new branch
`tether/<name>` from the repository holding the working directory, makes it an allowed root and
moves the working directory into it (through the `WorkingDirectory` service, whose listeners
let the sandbox's writable root follow). ExitWorktree moves back, and with `action: "remove"`
deletes the worktree: refused while it has uncommitted changes unless `discard_changes`.
"""

from __future__ import annotations

import os
import re
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tether.core.tools import Effect, ToolResult, ToolRunContext
from tether.errors import ToolFailure
from tether.tools.arguments import optional_bool, optional_str
from tether.tools.boundary import tether_home_of
from tether.tools.output import error_result
from tether.tools.working_dir import working_directory

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")


def _git(args: list[str], cwd: Path) -> str:
    try:
        done = subprocess.run(
            ["git", *args], cwd=cwd, capture_output=True, text=True, timeout=60, check=False,
            env={**os.environ, "GIT_TERMINAL_PROMPT": "0"},
        )  # fmt: skip
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ToolFailure(f"git {args[0]} failed: {exc}") from exc
    if done.returncode != 0:
        raise ToolFailure(f"git {' '.join(args[:2])} failed: {done.stderr.strip()[:500]}")
    return done.stdout


def worktrees_root(ctx: ToolRunContext) -> Path:
    conversation = (ctx.env or {}).get("TETHER_CONVERSATION_ID") or "default"
    return tether_home_of(ctx) / "worktrees" / re.sub(r"[^A-Za-z0-9._-]", "_", conversation)


ENTER_DESCRIPTION = """\
Creates a git worktree (a checkout on a new branch `tether/<name>`) for this conversation and \
moves the working directory into it. Only when the user asks for one."""

EXIT_DESCRIPTION = """\
Leaves EnterWorktree's worktree for the original directory. `action`: "keep" (default) or \
"remove" (refused with uncommitted changes unless `discard_changes`)."""


class EnterWorktreeTool:
    name = "EnterWorktree"
    description = ENTER_DESCRIPTION
    parameters: dict[str, Any] = {
        "type": "object",
        "properties": {"name": {"type": "string"}},
        "additionalProperties": False,
    }
    effect = Effect.EXEC

    def paths(self, args: Mapping[str, Any], cwd: Path) -> list[Path]:
        return []

    async def run(self, args: Mapping[str, Any], ctx: ToolRunContext) -> ToolResult:
        try:
            name = optional_str(args, "name") or f"wt-{ctx.tool_call_id[-8:]}"
            if not _NAME.match(name):
                raise ToolFailure(f"Worktree name {name!r}: use letters, digits, '.', '_', '-'.")
            wd = working_directory(ctx)
            top = Path(_git(["rev-parse", "--show-toplevel"], wd.current).strip())
            target = worktrees_root(ctx) / name
            if target.exists():
                raise ToolFailure(f"A worktree named {name!r} already exists at {target}.")
            target.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            _git(["worktree", "add", "-b", f"tether/{name}", str(target), "HEAD"], top)
            wd.allow(target)
            wd.change(target)
        except ToolFailure as exc:
            return error_result(str(exc))
        return ToolResult(
            f"Created worktree {target} on branch tether/{name} (from {top}); the working "
            "directory is now there. ExitWorktree returns."
        )


class ExitWorktreeTool:
    name = "ExitWorktree"
    description = EXIT_DESCRIPTION
    parameters: dict[str, Any] = {
        "type": "object",
        "properties": {
            "action": {"type": "string", "enum": ["keep", "remove"]},
            "discard_changes": {"type": "boolean"},
        },
        "additionalProperties": False,
    }
    effect = Effect.EXEC

    def paths(self, args: Mapping[str, Any], cwd: Path) -> list[Path]:
        return []

    async def run(self, args: Mapping[str, Any], ctx: ToolRunContext) -> ToolResult:
        try:
            action = optional_str(args, "action") or "keep"
            if action not in ("keep", "remove"):
                raise ToolFailure(f"Argument `action` must be keep or remove, got {action!r}.")
            discard = optional_bool(args, "discard_changes")
            wd = working_directory(ctx)
            root = worktrees_root(ctx).resolve()
            here = wd.current
            if not str(here).startswith(str(root) + "/"):
                raise ToolFailure(f"The working directory {here} is not a worktree EnterWorktree made.")
            tree = root / here.relative_to(root).parts[0]
            if action == "remove" and not discard and _git(["status", "--porcelain"], tree).strip():
                raise ToolFailure(
                    f"{tree} has uncommitted changes; commit them, or pass discard_changes: true "
                    "to remove it anyway."
                )
            wd.change(wd.start)
            if action == "remove":
                _git(["worktree", "remove", "--force", str(tree)], wd.start)
        except ToolFailure as exc:
            return error_result(str(exc))
        verb = "Removed" if action == "remove" else "Left (kept on disk)"
        return ToolResult(f"{verb} worktree {tree}; the working directory is {wd.current} again.")
