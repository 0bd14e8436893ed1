"""The Read and Write tools, and the file plumbing Edit/MultiEdit share: text loading, atomic writes.

Writes go to a temporary file in the target's directory and are renamed over it, so a reader (or
a crash) sees the old content or the new, never half of one; the existing file's mode is kept.
Both directions go through `confined`: what is opened is what was checked (no FIFO, no device, no
symlink swapped in, nothing the `ReadBoundary` hides).
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tether.core.tools import Effect, ToolResult, ToolRunContext
from tether.errors import ToolFailure
from tether.tools.arguments import (
    optional_int,
    paths_from,
    require_path_text,
    require_str,
    resolve_path,
)
from tether.tools.boundary import ReadBoundary, boundary_for
from tether.tools.confined import FileAccess, open_regular
from tether.tools.output import error_result

READ_DEFAULT_LINES = 2000
READ_LINE_CHARS = 2000
READ_OUTPUT_CAP = 30_000
BINARY_SNIFF_BYTES = 8192
EMPTY_FILE_NOTE = (
    "<system-reminder>Warning: the file exists but the contents are empty.</system-reminder>"
)


# -- shared plumbing -------------------------------------------------------------------------


def looks_binary(head: bytes) -> bool:
    return b"\0" in head


def missing_file(path: Path) -> ToolFailure:
    return ToolFailure(
        f"File does not exist: {path}. Check the path (Glob can find files by name); "
        "relative paths are resolved against the working directory."
    )


def load_text(path: Path, access: FileAccess, tool: str) -> str:
    """A UTF-8 text file's exact content (line endings untouched), or a `ToolFailure` saying why not.

    Read for rewriting: the file is opened where `access` says the tool may write, without
    following a symlink that appeared since (see `confined`)."""
    try:
        data = access.read_bytes(path, tool)
    except FileNotFoundError:
        raise missing_file(path) from None
    except IsADirectoryError:
        raise ToolFailure(f"{path} is a directory, not a file.") from None
    except OSError as exc:
        raise ToolFailure(f"Could not read {path}: {exc.strerror or exc}") from exc
    if looks_binary(data[:BINARY_SNIFF_BYTES]):
        raise ToolFailure(f"{path} is a binary file; only text files can be edited.")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise ToolFailure(
            f"{path} is not valid UTF-8 text (byte {exc.start}); only UTF-8 files can be edited."
        ) from None


def _default_file_mode() -> int:
    # Reading the umask means setting it; /proc avoids that race where it exists.
    try:
        with open("/proc/self/status", encoding="ascii") as handle:
            for line in handle:
                if line.startswith("Umask:"):
                    return 0o666 & ~int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return 0o666 & ~mask


def write_atomic(path: Path, text: str, access: FileAccess, tool: str = "Write") -> bool:
    """Replace `path`'s content with `text` atomically; True if the file was created.

    A symlink inside the workspace is written through (its target changes, the link stays),
    matching how permission rules resolve the path; one leading out of the workspace, or a
    symlink swapped in while the write runs, is refused or replaced, never followed.
    """
    try:
        return access.write_bytes(
            path, text.encode("utf-8"), tool, default_mode=_default_file_mode()
        )
    except ToolFailure:
        raise
    except OSError as exc:
        raise ToolFailure(f"Could not write {path}: {exc.strerror or exc}") from exc


def numbered(lines: list[str], first_number: int) -> str:
    """`cat -n` layout: right-aligned line number, a tab, the line."""
    return "\n".join(f"{n:>6}\t{line}" for n, line in enumerate(lines, first_number))


# -- Read ------------------------------------------------------------------------------------

READ_DESCRIPTION = """\
Reads a text file from the local filesystem and returns it with line numbers.

Usage:
- `file_path` should be an absolute path; a relative path is resolved against the working \
directory.
- By default up to 2000 lines are read from the start of the file. For long files pass \
`offset` (the 1-based line number to start at) and `limit` (how many lines), but prefer reading \
the whole file when it fits.
- Lines longer than 2000 characters are truncated, and the whole answer is capped at 30000 \
characters; a note tells you the offset to continue from.
- Output is in `cat -n` format: line number, a tab, then the line. When editing, copy text from \
after the tab, never the number prefix.
- Directories cannot be read: use LS (or Glob) for them. Binary files are refused.
- It is fine to read a path that may not exist: you get an error saying so.
- Read several files in parallel when you are likely to need them."""

READ_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "file_path": {"type": "string", "description": "The absolute path to the file to read"},
        "offset": {
            "type": "number",
            "description": (
                "The line number to start reading from (1-based). Only provide if the file is "
                "too large to read at once"
            ),
        },
        "limit": {
            "type": "number",
            "description": (
                "The number of lines to read. Only provide if the file is too large to read at once."
            ),
        },
    },
    "required": ["file_path"],
    "additionalProperties": False,
}


class ReadTool:
    name = "Read"
    description = READ_DESCRIPTION
    parameters = READ_PARAMETERS
    effect = Effect.READ

    def paths(self, args: Mapping[str, Any], cwd: Path) -> list[Path]:
        return paths_from(args, "file_path", cwd, default_cwd=False)

    async def run(self, args: Mapping[str, Any], ctx: ToolRunContext) -> ToolResult:
        try:
            path = resolve_path(require_path_text(args, "file_path"), ctx.cwd)
            offset = optional_int(args, "offset", minimum=0) or 1
            limit = optional_int(args, "limit", minimum=1) or READ_DEFAULT_LINES
            boundary = boundary_for(ctx)
            return ToolResult(await asyncio.to_thread(
                read_numbered, path, offset, limit, boundary, ctx.judged_paths))
        except ToolFailure as exc:
            return error_result(str(exc))


def read_numbered(
    path: Path, offset: int, limit: int, boundary: ReadBoundary | None,
    judged: tuple[str, ...] = (),
) -> str:
    try:
        fd = open_regular(path, tool="Read", boundary=boundary, judged=judged)
    except FileNotFoundError:
        raise missing_file(path) from None
    except IsADirectoryError:
        raise ToolFailure(
            f"{path} is a directory, not a file. Use the LS tool to list a directory."
        ) from None
    with open(fd, "rb") as handle:
        head = handle.read(BINARY_SNIFF_BYTES)
        if not head:
            return EMPTY_FILE_NOTE
        if looks_binary(head):
            raise ToolFailure(
                f"Cannot read {path}: it is a binary file (it contains NUL bytes). Read shows "
                "text files only; inspect binary files with Bash (e.g. `file`, `xxd | head`)."
            )
        handle.seek(0)
        shown: list[str] = []
        used = 0
        total = 0
        long_lines = False
        capped_at: int | None = None  # first line number not shown because of the char cap
        for total, raw in enumerate(handle, 1):  # noqa: B007 - `total` is the line count after
            if total < offset or len(shown) >= limit or capped_at is not None:
                continue
            line = raw.rstrip(b"\n").rstrip(b"\r").decode("utf-8", errors="replace")
            if len(line) > READ_LINE_CHARS:
                line, long_lines = line[:READ_LINE_CHARS], True
            cost = len(line) + 8  # number column, tab and newline
            if used + cost > READ_OUTPUT_CAP - 400:  # leave room for the notes
                capped_at = total
                continue
            shown.append(line)
            used += cost

    if offset > total:
        return (
            f"<system-reminder>Warning: the file has only {total} lines, so offset {offset} is "
            "past its end. Use a smaller offset.</system-reminder>"
        )
    last = offset + len(shown) - 1
    notes: list[str] = []
    if long_lines:
        notes.append(f"[Some lines were longer than {READ_LINE_CHARS} characters and were cut.]")
    if capped_at is not None:
        notes.append(
            f"[Output capped at {READ_OUTPUT_CAP} characters: showing lines {offset}-{last} of "
            f"{total}. To read further, call Read with offset={last + 1}.]"
        )
    elif last < total:
        notes.append(
            f"[Showing lines {offset}-{last} of {total}. To read further, call Read with "
            f"offset={last + 1} (and a limit if you want fewer lines).]"
        )
    body = numbered(shown, offset)
    return body + ("\n\n" + "\n".join(notes) if notes else "")


# -- Write -----------------------------------------------------------------------------------

WRITE_DESCRIPTION = """\
Writes a file to the local filesystem, creating it (and any missing parent directories) or \
replacing its whole content.

Usage:
- `file_path` should be an absolute path; a relative path is resolved against the working \
directory.
- This overwrites an existing file completely. Read the file first, and prefer Edit or MultiEdit \
to change part of an existing file: they send only the change.
- The write is atomic and keeps an existing file's permissions.
- Do not create documentation or README files unless the user asked for them."""

WRITE_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "file_path": {
            "type": "string",
            "description": "The absolute path to the file to write (must be absolute, not relative)",
        },
        "content": {"type": "string", "description": "The content to write to the file"},
    },
    "required": ["file_path", "content"],
    "additionalProperties": False,
}


class WriteTool:
    name = "Write"
    description = WRITE_DESCRIPTION
    parameters = WRITE_PARAMETERS
    effect = Effect.WRITE

    def paths(self, args: Mapping[str, Any], cwd: Path) -> list[Path]:
        return paths_from(args, "file_path", cwd, default_cwd=False)

    async def run(self, args: Mapping[str, Any], ctx: ToolRunContext) -> ToolResult:
        try:
            path = resolve_path(require_path_text(args, "file_path"), ctx.cwd)
            content = require_str(args, "content", allow_nul=True)
            created = write_atomic(path, content, FileAccess.of(ctx))
        except ToolFailure as exc:
            return error_result(str(exc))
        lines = content.count("\n") + (0 if content.endswith("\n") or not content else 1)
        if created:
            return ToolResult(f"File created successfully at: {path} ({lines} lines)")
        return ToolResult(f"The file {path} has been overwritten ({lines} lines).")
