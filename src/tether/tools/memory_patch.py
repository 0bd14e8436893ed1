"""The `memory_apply_patch` tool (the codex toolsets' `memory`): a V4A patch applied to the
agent's memory repository as one git commit.

Paths in the patch are relative to the memory directory (`system/human.md`) and held to the
`memory` tool's rules: never absolute, never through `..`, `.git` or a symlink, and a file
whose frontmatter says `read_only: true` (in the working tree or at HEAD) refuses every change.
Every hunk is matched before anything is written, so a patch that does not apply leaves memory
as it was; if a write fails part-way, what was already written is put back. The commit message
names the files changed.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping
from typing import Any

from tether.core.tools import ToolResult, ToolRunContext
from tether.errors import ToolFailure
from tether.memory import blocks
from tether.memory.memfs import MemFS, MemFSError, normalize_path
from tether.tools.memory import MemoryRepoTool
from tether.tools.output import error_result

PATCH_MAX_CHARS = 500_000  # memory files are small; a larger "patch" is a mistake

DESCRIPTION = """\
Edits your persistent memory (a git repository of Markdown files that outlives this \
conversation) with a patch in the V4A format; the whole patch is one commit, or nothing changes.

*** Begin Patch
*** Update File: system/human.md
@@
 The user's name is Ada.
-Prefers tabs.
+Prefers spaces (said so on 2026-03-02).
*** Add File: projects/tether.md
+---
+description: What I know about the tether codebase
+---
+Tests: ./scripts/test
*** End Patch

Paths are relative to the memory directory. Files under system/ are compiled into your system \
prompt; give a new file a `description` in its frontmatter. Files marked read_only cannot be \
changed. Never store secrets in memory."""

PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {"input": {"type": "string", "description": "The entire patch text"}},
    "required": ["input"],
    "additionalProperties": False,
}


class MemoryPatchTool(MemoryRepoTool):
    name = "memory_apply_patch"
    description = DESCRIPTION
    parameters = PARAMETERS

    async def run(self, args: Mapping[str, Any], ctx: ToolRunContext) -> ToolResult:
        text = args.get("input")
        if not isinstance(text, str) or not text.strip():
            return error_result("Argument `input` must be the patch text (a non-empty string).")
        if len(text) > PATCH_MAX_CHARS or "\0" in text:
            return error_result(
                f"Argument `input` must be text of at most {PATCH_MAX_CHARS} characters "
                "without NUL bytes."
            )
        try:
            message = await asyncio.to_thread(apply_memory_patch, self.memfs, text)
        except (MemFSError, ToolFailure) as exc:
            return error_result(f"memory_apply_patch: {exc} No memory file was changed.")
        return ToolResult(message)


def apply_memory_patch(memfs: MemFS, text: str) -> str:
    """Apply `text` to the memory repo and commit it; the result text for the model."""
    from tether.tools.patch_format import parse_patch

    changes = parse_patch(text)
    with memfs.writing():
        writes, summary = _plan(memfs, changes)
        _write_all(memfs, writes)
        sha = memfs.commit(list(writes), "memory_apply_patch: " + ", ".join(summary))
    if sha is None:
        return "The patch made no change to memory; nothing committed."
    return f"Memory updated (commit {sha[:7]}):\n" + "\n".join(summary)


def _plan(memfs: MemFS, changes: list[Any]) -> tuple[dict[str, str | None], list[str]]:
    """The new text of each memory path (None: delete), computed before anything is written."""
    from tether.tools.patch_format import apply_hunks

    writes: dict[str, str | None] = {}
    summary: list[str] = []
    for change in changes:
        path = normalize_path(change.path, markdown=False)
        current = memfs.read_working(path)
        if change.kind == "add":
            if current is not None or memfs.read_head(path) is not None:
                raise ToolFailure(f"Cannot add {path}: it already exists; use '*** Update File:'.")
            writes[path] = change.content
            summary.append(f"A {path}")
            continue
        if current is None:
            raise ToolFailure(f"Cannot {change.kind} {path}: it does not exist in memory.")
        _refuse_read_only(memfs, path, current)
        if change.kind == "delete":
            writes[path] = None
            summary.append(f"D {path}")
            continue
        new_text = apply_hunks(current, change)
        if change.move_to is None:
            writes[path] = new_text
            summary.append(f"M {path}")
            continue
        destination = normalize_path(change.move_to, "Move to", markdown=False)
        if destination != path and (
            memfs.read_working(destination) is not None or memfs.read_head(destination) is not None
        ):
            raise ToolFailure(f"Cannot move {path} to {destination}: the destination exists.")
        writes[path] = None
        writes[destination] = new_text
        summary.append(f"M {destination} (moved from {path})")
    return writes, summary


def _refuse_read_only(memfs: MemFS, path: str, current: str) -> None:
    """Judged by the working tree and by HEAD, as the memory tool: a shell edit that drops the
    flag without committing does not unlock the file."""
    committed = memfs.read_head(path)
    if blocks.parse(current).read_only or (
        committed is not None and blocks.parse(committed).read_only
    ):
        raise ToolFailure(f"{path} is read_only and cannot be modified.")


def _write_all(memfs: MemFS, writes: dict[str, str | None]) -> None:
    """Write the plan through the repo's confined paths; on a failure, restore what was already
    changed, then re-raise (nothing is committed)."""
    originals = {path: memfs.read_working(path) for path in writes}
    done: list[str] = []
    try:
        for path, content in writes.items():
            _put(memfs, path, content)
            done.append(path)
    except BaseException:
        for path in reversed(done):
            with contextlib.suppress(Exception):
                _put(memfs, path, originals[path])
        raise


def _put(memfs: MemFS, path: str, content: str | None) -> None:
    if content is not None:
        memfs.write_working(path, content)
        return
    with contextlib.suppress(FileNotFoundError):
        memfs.resolve(path).unlink()
