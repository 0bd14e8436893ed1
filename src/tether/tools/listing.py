"""The LS tool: a tree of a directory's contents, breadth-first so a capped listing stays shallow.

What the `ReadBoundary` hides (the sandbox's hidden paths, tether's own state) is not listed.
"""

from __future__ import annotations

import asyncio
import os
import re
from collections import deque
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tether.core.tools import Effect, ToolResult, ToolRunContext
from tether.errors import ToolFailure
from tether.tools.arguments import (
    optional_path_text,
    optional_str_list,
    paths_from,
    resolve_path,
)
from tether.tools.boundary import ReadBoundary, boundary_for
from tether.tools.globbing import SKIPPED_DIRS, GlobMatcher
from tether.tools.output import error_result

LS_MAX_ENTRIES = 1000
# Noise nobody asks to see in an overview; Glob and Grep still reach inside them.
HIDDEN_BY_DEFAULT = frozenset({"__pycache__", "node_modules"})

LS_DESCRIPTION = """\
Lists the files and directories under a path as an indented tree (directories end with `/`).

- `path` should be an absolute directory path; it defaults to the working directory.
- `ignore` takes glob patterns (e.g. `["*.log", "build"]`) for entries to leave out.
- Hidden entries (dot-files), `__pycache__` and `node_modules` are not shown. Large trees are \
cut at 1000 entries, shallowest first.
- Prefer Glob or Grep when you know what you are looking for."""

LS_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "path": {
            "type": "string",
            "description": "The absolute path to the directory to list (default: working directory)",
        },
        "ignore": {
            "type": "array",
            "items": {"type": "string"},
            "description": "List of glob patterns to ignore",
        },
    },
    "additionalProperties": False,
}


class LSTool:
    name = "LS"
    description = LS_DESCRIPTION
    parameters = LS_PARAMETERS
    effect = Effect.READ

    def paths(self, args: Mapping[str, Any], cwd: Path) -> list[Path]:
        return paths_from(args, "path", cwd, default_cwd=True)

    async def run(self, args: Mapping[str, Any], ctx: ToolRunContext) -> ToolResult:
        try:
            root = resolve_path(optional_path_text(args, "path") or ".", ctx.cwd)
            ignore = [_ignore_pattern(p) for p in optional_str_list(args, "ignore") if p]
            if not root.exists():
                raise ToolFailure(f"Directory does not exist: {root}")
            if not root.is_dir():
                raise ToolFailure(
                    f"{root} is not a directory. Use Read to read a file, or give a directory."
                )
            boundary = boundary_for(ctx)
            boundary.refuse_walk("LS", root)
        except ToolFailure as exc:
            return error_result(str(exc))
        return ToolResult(await asyncio.to_thread(list_tree, root, ignore, boundary))


def _ignore_pattern(pattern: str) -> GlobMatcher:
    try:
        return GlobMatcher.compile(pattern)
    except re.error as exc:
        raise ToolFailure(f"Invalid glob pattern {pattern[:200]!r} in `ignore`: {exc}") from None


def list_tree(root: Path, ignore: list[GlobMatcher], boundary: ReadBoundary | None = None) -> str:
    entries, truncated = _collect(root, ignore, boundary)
    children: dict[str, list[tuple[str, bool]]] = {}
    for relative, is_dir in entries:
        parent, _, name = relative.rpartition("/")
        children.setdefault(parent, []).append((name, is_dir))

    lines = [f"- {root.as_posix().rstrip('/')}/"]

    def render(prefix: str, depth: int) -> None:
        for name, is_dir in sorted(children.get(prefix, [])):
            lines.append(f"{'  ' * depth}- {name}{'/' if is_dir else ''}")
            if is_dir:
                render(f"{prefix}/{name}" if prefix else name, depth + 1)

    render("", 1)
    if not entries:
        lines.append("  (empty directory)")
    if truncated:
        lines.append(
            f"\n[Listing cut at {LS_MAX_ENTRIES} entries; there are more. List a subdirectory, "
            "pass `ignore`, or use Glob to find specific files.]"
        )
    return "\n".join(lines)


def _collect(
    root: Path, ignore: list[GlobMatcher], boundary: ReadBoundary | None
) -> tuple[list[tuple[str, bool]], bool]:
    found: list[tuple[str, bool]] = []
    # (directory, its real path, relative prefix); below the root no symlink is entered, so a
    # real path is the parent's plus the name.
    queue: deque[tuple[Path, str, str]] = deque([(root, os.path.realpath(root), "")])
    while queue:
        directory, real, prefix = queue.popleft()
        try:
            with os.scandir(directory) as it:
                items = sorted(it, key=lambda e: e.name)
        except OSError:
            continue
        for entry in items:
            name = entry.name
            if name.startswith(".") or name in HIDDEN_BY_DEFAULT or name in SKIPPED_DIRS:
                continue
            relative = prefix + name
            if any(m.matches(relative) for m in ignore):
                continue
            if len(found) >= LS_MAX_ENTRIES:
                return found, True
            try:
                is_dir = entry.is_dir(follow_symlinks=False)
            except OSError:
                is_dir = False
            entry_real = os.path.join(real, name)
            if boundary is not None and (
                boundary.prune(entry_real) if is_dir else boundary.why_hidden(entry_real)
            ):
                continue
            found.append((relative, is_dir))
            if is_dir:
                queue.append((Path(entry.path), entry_real, relative + "/"))
    return found, False
