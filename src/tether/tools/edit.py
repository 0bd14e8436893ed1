"""The Edit and MultiEdit tools: exact string replacement in a text file, written atomically.

MultiEdit applies its edits one after another to the content in memory and writes once, so a
failing edit leaves the file exactly as it was.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tether.core.tools import Effect, ToolResult, ToolRunContext
from tether.errors import ToolFailure
from tether.tools.arguments import (
    optional_bool,
    paths_from,
    require_path_text,
    require_str,
    resolve_path,
)
from tether.tools.confined import FileAccess
from tether.tools.files import load_text, missing_file, numbered, write_atomic
from tether.tools.output import error_result

SNIPPET_CONTEXT_LINES = 4
SNIPPET_MAX_LINES = 40
_SHOWN_STRING_CHARS = 500


@dataclass(frozen=True, slots=True)
class Replacement:
    old_string: str
    new_string: str
    replace_all: bool = False


def _shown(text: str) -> str:
    return text if len(text) <= _SHOWN_STRING_CHARS else text[:_SHOWN_STRING_CHARS] + "..."


def apply_replacement(content: str, edit: Replacement) -> tuple[str, int, int]:
    """(new content, replacements made, index of the first one), or a `ToolFailure` saying why."""
    old, new = edit.old_string, edit.new_string
    if old == new:
        raise ToolFailure(
            "No changes to make: old_string and new_string are exactly the same. Give the new "
            "text in new_string."
        )
    if old == "":
        if content:
            raise ToolFailure(
                "old_string is empty, but the file already has content. Give the exact text to "
                "replace, or use Write to replace the whole file."
            )
        return new, 1, 0
    count = content.count(old)
    if count == 0 and "\r\n" in content and "\n" in old and "\r\n" not in old:
        # Models send LF; the file is CRLF. Match and write in the file's own convention.
        old, new = old.replace("\n", "\r\n"), new.replace("\n", "\r\n")
        count = content.count(old)
    if count == 0:
        raise ToolFailure(
            "String to replace not found in file.\n"
            f"String: {_shown(edit.old_string)}\n"
            "Check whitespace and indentation (copy the text after the line-number tab from "
            "Read), or Read the file again if it may have changed."
        )
    if count > 1 and not edit.replace_all:
        raise ToolFailure(
            f"Found {count} matches of the string to replace, but replace_all is false. To "
            "replace all occurrences, set replace_all to true. To replace only one occurrence, "
            "add more surrounding context to old_string so it matches exactly once.\n"
            f"String: {_shown(edit.old_string)}"
        )
    first = content.find(old)
    if edit.replace_all:
        return content.replace(old, new), count, first
    return content[:first] + new + content[first + len(old) :], 1, first


def snippet(content: str, index: int, inserted: str) -> str:
    """A `cat -n` view of the lines around `inserted`, which starts at `index` in `content`."""
    lines = content.split("\n")
    start_line = content.count("\n", 0, index)
    end_line = start_line + inserted.count("\n")
    first = max(start_line - SNIPPET_CONTEXT_LINES, 0)
    last = min(end_line + SNIPPET_CONTEXT_LINES, len(lines) - 1, first + SNIPPET_MAX_LINES - 1)
    return numbered([line[:2000] for line in lines[first : last + 1]], first + 1)


def _load_or_empty(path: Path, creating: bool, access: FileAccess, tool: str) -> tuple[str, bool]:
    """The file's text, or ("", True) when it is missing and the edit creates it."""
    if not path.exists() and not path.is_symlink():
        if creating:
            return "", True
        raise ToolFailure(
            str(missing_file(path)) + " To create a file, use Write (or an empty old_string)."
        )
    return load_text(path, access, tool), False


# -- Edit ------------------------------------------------------------------------------------

EDIT_DESCRIPTION = """\
Performs an exact string replacement in a file.

Usage:
- Read the file first, so old_string is copied from its current content.
- When copying from Read output, keep the exact indentation (tabs/spaces) that follows the \
line-number tab; never include the line-number prefix itself.
- The edit fails if old_string is not found, or if it matches more than once: then add enough \
surrounding lines to make it unique, or set `replace_all` to change every occurrence (useful for \
renaming a variable).
- old_string and new_string must differ. An empty old_string creates a new file (or fills an \
empty one) with new_string.
- Prefer editing existing files over creating new ones. For several changes to one file use \
MultiEdit."""

EDIT_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "file_path": {"type": "string", "description": "The absolute path to the file to modify"},
        "old_string": {"type": "string", "description": "The text to replace"},
        "new_string": {
            "type": "string",
            "description": "The text to replace it with (must be different from old_string)",
        },
        "replace_all": {
            "type": "boolean",
            "default": False,
            "description": "Replace all occurrences of old_string (default false)",
        },
    },
    "required": ["file_path", "old_string", "new_string"],
    "additionalProperties": False,
}


class EditTool:
    name = "Edit"
    description = EDIT_DESCRIPTION
    parameters = EDIT_PARAMETERS
    effect = Effect.WRITE

    def paths(self, args: Mapping[str, Any], cwd: Path) -> list[Path]:
        return paths_from(args, "file_path", cwd, default_cwd=False)

    async def run(self, args: Mapping[str, Any], ctx: ToolRunContext) -> ToolResult:
        try:
            path = resolve_path(require_path_text(args, "file_path"), ctx.cwd)
            edit = Replacement(
                require_str(args, "old_string", allow_nul=True),
                require_str(args, "new_string", allow_nul=True),
                optional_bool(args, "replace_all"),
            )
            access = FileAccess.of(ctx)
            content, missing = _load_or_empty(path, edit.old_string == "", access, self.name)
            updated, count, first = apply_replacement(content, edit)
            write_atomic(path, updated, access, self.name)
        except ToolFailure as exc:
            return error_result(str(exc))
        if missing:
            return ToolResult(f"File created successfully at: {path}")
        what = f"{count} occurrences replaced" if count > 1 else "1 occurrence replaced"
        return ToolResult(
            f"The file {path} has been updated ({what}). Result around the first change:\n"
            + snippet(updated, first, edit.new_string)
        )


# -- MultiEdit -------------------------------------------------------------------------------

MULTI_EDIT_DESCRIPTION = """\
Makes several exact string replacements in one file in a single call: all of them or none.

Usage:
- Read the file first. Each entry of `edits` works like the Edit tool (old_string, new_string, \
optional replace_all) and applies to the result of the previous one, in order.
- If any edit fails (not found, ambiguous, no change) nothing is written and the error names \
that edit's index; fix it and send the whole list again.
- Plan the order so an earlier edit does not change text a later one looks for.
- To create a file, give an empty old_string in the first edit; its new_string becomes the \
content."""

MULTI_EDIT_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "file_path": {"type": "string", "description": "The absolute path to the file to modify"},
        "edits": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "old_string": {"type": "string", "description": "The text to replace"},
                    "new_string": {"type": "string", "description": "The text to replace it with"},
                    "replace_all": {
                        "type": "boolean",
                        "default": False,
                        "description": "Replace all occurrences of old_string (default false).",
                    },
                },
                "required": ["old_string", "new_string"],
                "additionalProperties": False,
            },
            "minItems": 1,
            "description": "Array of edit operations to perform sequentially on the file",
        },
    },
    "required": ["file_path", "edits"],
    "additionalProperties": False,
}


def parse_edits(value: object) -> list[Replacement]:
    if not isinstance(value, list):
        raise ToolFailure(
            "Argument `edits` must be a list of {old_string, new_string, replace_all?} objects, "
            f"got {type(value).__name__}."
        )
    if not value:
        raise ToolFailure("Argument `edits` is empty: give at least one edit.")
    edits: list[Replacement] = []
    for index, item in enumerate(value):
        if not isinstance(item, Mapping):
            raise ToolFailure(
                f"edits[{index}] must be an object with old_string and new_string, "
                f"got {type(item).__name__}."
            )
        try:
            edits.append(
                Replacement(
                    require_str(item, "old_string", allow_nul=True),
                    require_str(item, "new_string", allow_nul=True),
                    optional_bool(item, "replace_all"),
                )
            )
        except ToolFailure as exc:
            raise ToolFailure(f"edits[{index}]: {exc}") from None
    return edits


class MultiEditTool:
    name = "MultiEdit"
    description = MULTI_EDIT_DESCRIPTION
    parameters = MULTI_EDIT_PARAMETERS
    effect = Effect.WRITE

    def paths(self, args: Mapping[str, Any], cwd: Path) -> list[Path]:
        return paths_from(args, "file_path", cwd, default_cwd=False)

    async def run(self, args: Mapping[str, Any], ctx: ToolRunContext) -> ToolResult:
        try:
            path = resolve_path(require_path_text(args, "file_path"), ctx.cwd)
            edits = parse_edits(args.get("edits"))
            access = FileAccess.of(ctx)
            content, missing = _load_or_empty(path, edits[0].old_string == "", access, self.name)
            replaced = 0
            for index, edit in enumerate(edits):
                try:
                    content, count, _ = apply_replacement(content, edit)
                except ToolFailure as exc:
                    raise ToolFailure(
                        f"Edit at index {index} (edit {index + 1} of {len(edits)}) failed: {exc}\n"
                        "No edits were applied; the file is unchanged."
                    ) from None
                replaced += count
            write_atomic(path, content, access, self.name)
        except ToolFailure as exc:
            return error_result(str(exc))
        verb = "created" if missing else "updated"
        return ToolResult(
            f"Applied {len(edits)} edit{'s' if len(edits) != 1 else ''} to {path} "
            f"({replaced} replacement{'s' if replaced != 1 else ''}); the file has been {verb}."
        )
