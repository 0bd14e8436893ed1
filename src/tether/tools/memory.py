"""The `memory` tool: the model edits its own MemFS, one git commit per change (§6.2, §15).

Commands: create, str_replace, insert, delete, rename, update_description; each takes a
`reason`, which becomes the commit message. Paths are relative to the memory repository
(`system/human.md`; `.md` is added to a bare label), never absolute, never through `..`, `.git`
or a symlink. A file whose frontmatter says `read_only: true` refuses every change. The
system prompt shows committed HEAD only, so the change reaches the model on its next send.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tether.core.tools import Effect, ToolResult, ToolRunContext
from tether.errors import ToolFailure
from tether.memory import blocks
from tether.memory.memfs import MemFS, MemFSError, normalize_path
from tether.tools.output import error_result

COMMANDS = ("create", "str_replace", "insert", "delete", "rename", "update_description")

MEMORY_DESCRIPTION = """\
Edit your persistent memory: a git repository of Markdown files that outlives this \
conversation. Files under system/ are compiled into your system prompt (you see them in \
<memory>); other files are listed by path and description. Every call commits one change, \
with `reason` as the commit message, and the change shows in your prompt from the next step on.

Commands (paths are relative to the memory directory, e.g. system/human.md):
- create: new file at `path` with `description` (what it is for, one line) and `file_text`.
- str_replace: replace `old_string` (must occur exactly once) with `new_string` in `path`.
- insert: insert `insert_text` after line `insert_line` of `path` (0 = at the top).
- delete: remove the file (or folder) at `path`.
- rename: move `old_path` to `new_path`.
- update_description: set the `description` of `path`.
Files marked read_only cannot be changed. Never store secrets in memory."""

MEMORY_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "command": {"type": "string", "enum": list(COMMANDS), "description": "The operation"},
        "reason": {
            "type": "string",
            "description": "Why this change is made; becomes the commit message",
        },
        "path": {"type": "string", "description": "Memory file, e.g. system/human.md"},
        "old_path": {"type": "string", "description": "rename: the current path"},
        "new_path": {"type": "string", "description": "rename: the new path"},
        "old_string": {"type": "string", "description": "str_replace: exact text to replace"},
        "new_string": {"type": "string", "description": "str_replace: replacement text"},
        "insert_line": {
            "type": "integer",
            "minimum": 0,
            "description": "insert: line after which to insert (0 = before the first line)",
        },
        "insert_text": {"type": "string", "description": "insert: text to insert"},
        "description": {
            "type": "string",
            "description": "create / update_description: what the file is for (one line)",
        },
        "file_text": {"type": "string", "description": "create: the file's initial body"},
    },
    "required": ["command", "reason"],
    "additionalProperties": False,
}


class MemoryRepoTool:
    """A tool that writes the agent's memory repository (`memory`, `memory_apply_patch`)."""

    effect = Effect.WRITE

    def __init__(self, memfs: MemFS) -> None:
        self.memfs = memfs

    def paths(self, args: Mapping[str, Any], cwd: Path) -> list[Path]:
        # The whole repo: memory writes in one batch serialise (they share git's index).
        return [self.memfs.root]


class MemoryTool(MemoryRepoTool):
    name = "memory"
    description = MEMORY_DESCRIPTION
    parameters = MEMORY_PARAMETERS

    async def run(self, args: Mapping[str, Any], ctx: ToolRunContext) -> ToolResult:
        try:
            message = await asyncio.to_thread(apply_memory_command, self.memfs, args)
        except (MemFSError, ToolFailure) as exc:
            return error_result(f"memory: {exc}")
        return ToolResult(message)


def apply_memory_command(memfs: MemFS, args: Mapping[str, Any]) -> str:
    """Run one command and commit it; the result text for the model. Raises on bad input."""
    command = args.get("command")
    if command not in COMMANDS:
        raise ToolFailure(f"'command' must be one of {', '.join(COMMANDS)}, got {command!r}")
    reason = args.get("reason")
    if not isinstance(reason, str) or not reason.strip():
        raise ToolFailure("'reason' must be a non-empty string (it becomes the commit message)")
    with memfs.writing():
        changed = _COMMANDS[command](memfs, args)
        sha = memfs.commit(changed, reason.strip())
    shown = " -> ".join(changed)
    if sha is None:
        return f"Memory {command} on {shown} made no change; nothing committed."
    return f"Memory {command} applied to {shown} (commit {sha[:7]})."


def _create(memfs: MemFS, args: Mapping[str, Any]) -> list[str]:
    path = normalize_path(args.get("path"))
    description = _text(args, "description", required=True)
    if not description.strip():
        raise ToolFailure("create: 'description' must say what the file is for")
    body = _text(args, "file_text", required=False)
    if memfs.read_working(path) is not None or memfs.read_head(path) is not None:
        raise ToolFailure(f"create: {path} already exists; use str_replace or insert to change it")
    if body and not body.endswith("\n"):
        body += "\n"
    memfs.write_working(path, blocks.render(blocks.new_file(description, body)))
    return [path]


def _str_replace(memfs: MemFS, args: Mapping[str, Any]) -> list[str]:
    path = normalize_path(args.get("path"))
    old = _text(args, "old_string", required=True)
    new = _text(args, "new_string", required=True)
    if old == "":
        raise ToolFailure("str_replace: 'old_string' must not be empty")
    file = _editable(memfs, path)
    count = file.body.count(old)
    if count == 0:
        raise ToolFailure(f"str_replace: old_string was not found in {path}")
    if count > 1:
        raise ToolFailure(
            f"str_replace: old_string occurs {count} times in {path}; include more context so "
            "it matches exactly once"
        )
    memfs.write_working(path, blocks.render(file.with_body(file.body.replace(old, new, 1))))
    return [path]


def _insert(memfs: MemFS, args: Mapping[str, Any]) -> list[str]:
    path = normalize_path(args.get("path"))
    text = _text(args, "insert_text", required=True)
    line = args.get("insert_line")
    if not isinstance(line, int) or isinstance(line, bool) or line < 0:
        raise ToolFailure(f"insert: 'insert_line' must be an integer >= 0, got {line!r}")
    file = _editable(memfs, path)
    lines = file.body.splitlines(keepends=True)
    if line > len(lines):
        raise ToolFailure(f"insert: {path} has {len(lines)} lines; insert_line {line} is past the end")
    if lines and not lines[-1].endswith("\n"):
        lines[-1] += "\n"
    insertion = text if text.endswith("\n") else text + "\n"
    lines.insert(line, insertion)
    memfs.write_working(path, blocks.render(file.with_body("".join(lines))))
    return [path]


def _delete(memfs: MemFS, args: Mapping[str, Any]) -> list[str]:
    raw = args.get("path")
    folder = normalize_path(raw, markdown=False)
    target = memfs.resolve(folder)
    if target.is_dir():
        files: list[Path] = []
        for dirpath, _, names in os.walk(target):  # never descends through symlinks
            files.extend(Path(dirpath) / n for n in names)
        for f in sorted(files):
            rel = f.relative_to(memfs.root).as_posix()
            if f.suffix == ".md" and not f.is_symlink():
                try:
                    _editable(memfs, rel)
                except ToolFailure:
                    raise ToolFailure(
                        f"delete: {rel} is read_only, so {folder}/ cannot be deleted"
                    ) from None
        for f in files:
            f.unlink()
        _remove_empty_dirs(target)
        return [folder]
    path = normalize_path(raw)
    _editable(memfs, path)
    memfs.resolve(path).unlink()
    return [path]


def _rename(memfs: MemFS, args: Mapping[str, Any]) -> list[str]:
    old = normalize_path(args.get("old_path"), "old_path")
    new = normalize_path(args.get("new_path"), "new_path")
    if old == new:
        raise ToolFailure("rename: old_path and new_path are the same")
    _editable(memfs, old)
    if memfs.read_working(new) is not None:
        raise ToolFailure(f"rename: {new} already exists")
    target = memfs.resolve(new)
    target.parent.mkdir(parents=True, exist_ok=True)
    memfs.resolve(new)
    memfs.resolve(old).rename(target)
    return [old, new]


def _update_description(memfs: MemFS, args: Mapping[str, Any]) -> list[str]:
    path = normalize_path(args.get("path"))
    description = _text(args, "description", required=True)
    if not description.strip():
        raise ToolFailure("update_description: 'description' must not be empty")
    file = _editable(memfs, path)
    memfs.write_working(path, blocks.render(file.with_meta("description", blocks.one_line(description))))
    return [path]


_COMMANDS = {
    "create": _create,
    "str_replace": _str_replace,
    "insert": _insert,
    "delete": _delete,
    "rename": _rename,
    "update_description": _update_description,
}


def _text(args: Mapping[str, Any], key: str, *, required: bool) -> str:
    value = args.get(key)
    if value is None and not required:
        return ""
    if not isinstance(value, str):
        command = args.get("command")
        raise ToolFailure(f"{command}: '{key}' must be a string, got {type(value).__name__}")
    return value


def _parse(memfs: MemFS, path: str) -> blocks.MemoryFile:
    text = memfs.read_working(path)
    if text is None:
        raise ToolFailure(f"{path} does not exist in memory")
    return blocks.parse(text)


def _editable(memfs: MemFS, path: str) -> blocks.MemoryFile:
    """The file's parts, refusing read_only files (judged by the working tree and by HEAD, so
    a shell edit that drops the flag without committing does not unlock it)."""
    file = _parse(memfs, path)
    committed = memfs.read_head(path)
    if file.read_only or (committed is not None and blocks.parse(committed).read_only):
        raise ToolFailure(f"{path} is read_only and cannot be modified")
    return file


def _remove_empty_dirs(top: Path) -> None:
    for dirpath, _, _ in sorted(os.walk(top), key=lambda w: -len(w[0])):
        with contextlib.suppress(OSError):  # not empty: something untracked stays
            os.rmdir(dirpath)
