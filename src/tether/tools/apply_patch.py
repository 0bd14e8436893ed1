"""The ApplyPatch tool (`apply_patch` in codex_snake): a V4A patch applied to several files at once.

Every hunk is matched in memory before anything is written, so a hunk that does not apply leaves
every file as it was. Writes go through `confined.FileAccess` like Write and Edit (atomic, no
symlink swapped in followed); if a write fails part-way, the files already written are put
back. For permissions (`accesses`) each path is judged under the rules of what the patch does to
it: an add writes, a delete changes, an update reads and changes, and a move reads and deletes
its source and writes its destination, so `*** Move to:` cannot carry a file a Read rule
denies to a readable name, nor create what arms later execution without asking.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tether.core.tools import Effect, ToolResult, ToolRunContext
from tether.errors import ToolFailure
from tether.tools.arguments import checked_text, resolve_path
from tether.tools.confined import FileAccess, open_directory
from tether.tools.files import load_text, write_atomic
from tether.tools.output import error_result

if TYPE_CHECKING:
    from tether.tools.patch_format import FileChange

PATCH_MAX_CHARS = 2_000_000

DESCRIPTION = """\
Edits files with a patch in the V4A format. The whole patch applies or nothing changes.

*** Begin Patch
*** Update File: src/app.py
@@ def main():
-    print("hi")
+    print("hello")
*** Add File: notes.txt
+first line
*** Delete File: old.txt
*** End Patch

Update sections may start with `*** Move to: new/path`. Hunk lines start with ' ' (context, \
about 3 lines around each change), '-' (removed) or '+' (added); `@@ <line>` narrows the search \
to after that line. Paths are relative to the working directory (or absolute)."""

PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {"input": {"type": "string", "description": "The entire patch text"}},
    "required": ["input"],
    "additionalProperties": False,
}


def _parsed(args: Mapping[str, Any]) -> list[FileChange]:
    """The patch's changes, or [] when its input is not text, holds a NUL or does not parse."""
    from tether.tools.patch_format import parse_patch  # on first use: off the start-up path

    text = args.get("input")
    if not isinstance(text, str) or "\0" in text:
        return []
    try:
        return parse_patch(text)
    except ToolFailure:
        return []


def patch_paths(args: Mapping[str, Any], cwd: Path) -> list[Path]:
    """Every path the patch touches (moves: both ends), or [] when it does not parse."""
    out: list[Path] = []
    for change in _parsed(args):
        for spelled in (change.path, change.move_to):
            if spelled is not None:
                with contextlib.suppress(ToolFailure):
                    out.append(resolve_path(spelled, cwd))
    return out


def patch_accesses(args: Mapping[str, Any], cwd: Path) -> list[tuple[str, Path]]:
    """(family, path) for every path the patch reads, writes, deletes or moves from/to, or []
    when it does not parse (then `paths` is empty too, and the call is judged as a bare edit)."""
    out: list[tuple[str, Path]] = []
    for change in _parsed(args):
        families = {"add": ("Write",), "delete": ("Edit",), "update": ("Read", "Edit")}[change.kind]
        with contextlib.suppress(ToolFailure):
            source = resolve_path(change.path, cwd)
            out.extend((family, source) for family in families)
        if change.move_to is not None:
            with contextlib.suppress(ToolFailure):
                out.append(("Write", resolve_path(change.move_to, cwd)))
    return out


class _Plan:
    """The new content of each path (None: delete), computed before anything is written."""

    def __init__(self) -> None:
        self.writes: dict[Path, str | None] = {}
        self.summary: list[str] = []

    def add(self, path: Path, content: str | None, line: str) -> None:
        self.writes[path] = content
        self.summary.append(line)


def plan_patch(changes: list[FileChange], cwd: Path, access: FileAccess, tool: str) -> _Plan:
    from tether.tools.patch_format import apply_hunks

    plan = _Plan()
    for change in changes:
        path = resolve_path(change.path, cwd)
        exists = path.exists() or path.is_symlink()
        if change.kind == "add":
            if exists:
                raise ToolFailure(
                    f"Cannot add {change.path}: it already exists. Use '*** Update File:' to "
                    "change it. No file was changed."
                )
            plan.add(path, change.content, f"A {change.path}")
            continue
        if not exists:
            raise ToolFailure(
                f"Cannot {change.kind} {change.path}: it does not exist. No file was changed."
            )
        if change.kind == "delete":
            access.target(path, tool)  # refused paths fail now, before anything is written
            plan.add(path, None, f"D {change.path}")
            continue
        text = apply_hunks(load_text(path, access, tool), change)
        if change.move_to is None:
            plan.add(path, text, f"M {change.path}")
            continue
        destination = resolve_path(change.move_to, cwd)
        if destination.exists() and destination != path:
            raise ToolFailure(
                f"Cannot move {change.path} to {change.move_to}: the destination exists. No "
                "file was changed."
            )
        plan.add(destination, text, f"M {change.move_to} (moved from {change.path})")
        plan.writes[path] = None
    return plan


def delete_file(path: Path, access: FileAccess, tool: str) -> None:
    """Unlink `path` inside its verified directory descriptor (never through a swapped link)."""
    real = access.target(path, tool)
    parent, name = os.path.split(real)
    dir_fd = open_directory(parent, create=False)
    try:
        os.unlink(name, dir_fd=dir_fd)
    except FileNotFoundError:
        pass
    except OSError as exc:
        raise ToolFailure(f"Could not delete {path}: {exc.strerror or exc}") from exc
    finally:
        os.close(dir_fd)


def commit_plan(plan: _Plan, access: FileAccess, tool: str) -> None:
    """Write the plan; on a failure, restore what was already changed, then re-raise."""
    originals: dict[Path, str | None] = {}
    for path in plan.writes:
        exists = path.exists() or path.is_symlink()
        originals[path] = load_text(path, access, tool) if exists else None
    done: list[Path] = []
    try:
        for path, content in plan.writes.items():
            if content is None:
                delete_file(path, access, tool)
            else:
                write_atomic(path, content, access, tool)
            done.append(path)
    except BaseException:
        for path in reversed(done):
            with contextlib.suppress(Exception):
                before = originals[path]
                if before is None:
                    delete_file(path, access, tool)
                else:
                    write_atomic(path, before, access, tool)
        raise


class ApplyPatchTool:
    description = DESCRIPTION
    parameters = PARAMETERS
    effect = Effect.WRITE

    def __init__(self, name: str = "ApplyPatch") -> None:
        self.name = name

    def paths(self, args: Mapping[str, Any], cwd: Path) -> list[Path]:
        return patch_paths(args, cwd)

    def accesses(self, args: Mapping[str, Any], cwd: Path) -> list[tuple[str, Path]]:
        return patch_accesses(args, cwd)

    async def run(self, args: Mapping[str, Any], ctx: ToolRunContext) -> ToolResult:
        text = args.get("input")
        if not isinstance(text, str) or not text.strip():
            return error_result("Argument `input` must be the patch text (a non-empty string).")
        from tether.tools.patch_format import parse_patch

        try:
            checked_text("input", text, max_chars=PATCH_MAX_CHARS)
            changes = parse_patch(text)
            access = FileAccess.of(ctx)
            plan = plan_patch(changes, ctx.cwd, access, self.name)
            commit_plan(plan, access, self.name)
        except ToolFailure as exc:
            return error_result(str(exc))
        return ToolResult("Success. Updated the following files:\n" + "\n".join(plan.summary))
