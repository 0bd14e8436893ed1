"""The Gemini toolset: gemini-cli's tool names and argument schemas over tether's own tools.

Each Gemini tool translates its arguments into the tether tool's and runs that tool, so the
checks (read boundary, confined writes, sandboxed shell) and the permission families
(`run_shell_command` is Bash, `replace` is Edit, …) are the same ones.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from tether.core.tools import Effect, Tool, ToolResult, ToolRunContext
from tether.errors import ToolFailure
from tether.tools.arguments import optional_path_text, resolve_path
from tether.tools.exec_command import inner_workdir
from tether.tools.output import error_result

Translate = Callable[[Mapping[str, Any]], dict[str, Any]]


def _schema(required: list[str], **props: dict[str, Any]) -> dict[str, Any]:
    return {"type": "object", "properties": props, "required": required}


_S = {"type": "string"}
_N = {"type": "number"}


class GeminiTool:
    """A Gemini-named tool that runs `inner` with translated arguments."""

    def __init__(self, name: str, description: str, parameters: dict[str, Any], inner: Tool,
                 translate: Translate, *, workdir_arg: str | None = None,
                 renamed: Mapping[str, str] | None = None) -> None:  # fmt: skip
        self.name, self.description, self.parameters = name, description, parameters
        self.inner, self.translate, self.effect = inner, translate, inner.effect
        self.workdir_arg = workdir_arg  # an argument that moves the call's cwd (shell only)
        self.renamed = dict(renamed or {})  # inner argument name -> the Gemini name it came from

    def _cwd(self, args: Mapping[str, Any], cwd: Path) -> Path:
        value = optional_path_text(args, self.workdir_arg) if self.workdir_arg else None
        return inner_workdir(resolve_path(value, cwd), cwd) if value else cwd

    def paths(self, args: Mapping[str, Any], cwd: Path) -> list[Path]:
        try:
            return self.inner.paths(self.translate(args), self._cwd(args, cwd))
        except ToolFailure:
            return []

    async def run(self, args: Mapping[str, Any], ctx: ToolRunContext) -> ToolResult:
        try:
            translated = self.translate(args)
            cwd = self._cwd(args, ctx.cwd)
        except ToolFailure as exc:
            return error_result(str(exc))
        run_ctx = dataclasses.replace(ctx, cwd=cwd) if cwd != ctx.cwd else ctx
        result = await self.inner.run(translated, run_ctx)
        if not result.is_error or not self.renamed:
            return result
        text = result.output  # errors name the argument the model sent, not the inner one
        for inner, outer in self.renamed.items():
            text = text.replace(f"`{inner}`", f"`{outer}`")
        return dataclasses.replace(result, output=text)


def _pick(args: Mapping[str, Any], mapping: dict[str, str]) -> dict[str, Any]:
    return {new: args[old] for old, new in mapping.items() if args.get(old) is not None}


def _read_args(args: Mapping[str, Any]) -> dict[str, Any]:
    out = _pick(args, {"limit": "limit"})
    out["file_path"] = args.get("absolute_path", args.get("file_path"))
    offset = args.get("offset")
    if isinstance(offset, int | float) and not isinstance(offset, bool):
        out["offset"] = offset + 1  # Gemini counts lines from 0
    return out


def _replace_args(args: Mapping[str, Any]) -> dict[str, Any]:
    out = _pick(args, {"file_path": "file_path", "old_string": "old_string", "new_string": "new_string"})
    expected = args.get("expected_replacements")
    if isinstance(expected, int | float) and not isinstance(expected, bool) and expected > 1:
        out["replace_all"] = True
    return out


def _todo_args(args: Mapping[str, Any]) -> dict[str, Any]:
    todos = args.get("todos")
    if not isinstance(todos, list):
        return {"todos": todos}
    out = []
    for item in todos:
        if not isinstance(item, Mapping):
            out.append(item)
            continue
        if item.get("status") == "cancelled":
            continue
        text = item.get("description")
        out.append({"content": text, "activeForm": text, "status": item.get("status")})
    return {"todos": out}


class ReadManyFilesTool:
    """`read_many_files`: several files (paths or glob patterns) read with Read, concatenated."""

    name = "read_many_files"
    description = "Reads several text files (paths or glob patterns) and returns their contents."
    parameters = _schema(["paths"], paths={"type": "array", "items": _S})
    effect = Effect.READ
    MAX_FILES = 50

    def __init__(self, read: Tool, glob: Tool) -> None:
        self.read, self.glob = read, glob

    def paths(self, args: Mapping[str, Any], cwd: Path) -> list[Path]:
        paths = args.get("paths")
        if not isinstance(paths, list):
            return []
        out: list[Path] = []
        for p in paths:
            if isinstance(p, str) and p and "\0" not in p:
                out.extend(self.glob.paths({"pattern": p}, cwd))
        return out

    async def run(self, args: Mapping[str, Any], ctx: ToolRunContext) -> ToolResult:
        paths = args.get("paths")
        if not isinstance(paths, list) or not paths or not all(isinstance(p, str) for p in paths):
            return error_result("Argument `paths` must be a non-empty list of paths or globs.")
        files: list[str] = []
        for pattern in paths:
            if any(c in pattern for c in "*?[{"):
                found = await self.glob.run({"pattern": pattern}, ctx)
                files += [ln for ln in found.output.splitlines() if ln.startswith("/")]
            else:
                files.append(pattern)
        parts: list[str] = []
        for path in files[: self.MAX_FILES]:
            result = await self.read.run({"file_path": path}, ctx)
            parts.append(f"--- {path} ---\n{result.output}")
        if len(files) > self.MAX_FILES:
            parts.append(f"[{len(files) - self.MAX_FILES} more files not read]")
        text = "\n\n".join(parts) or "No files matched."
        return ToolResult(text[:30_000])


def gemini_tools() -> dict[str, Callable[[], Tool]]:
    from tether.tools.bash import BashTool
    from tether.tools.edit import EditTool
    from tether.tools.files import ReadTool, WriteTool
    from tether.tools.listing import LSTool
    from tether.tools.search import GlobTool, GrepTool
    from tether.tools.todo import TodoWriteTool

    def shell_args(a: Mapping[str, Any]) -> dict[str, Any]:
        return {"command": a.get("command"), "description": a.get("description") or "Run a shell command"}

    return {
        "run_shell_command": lambda: GeminiTool(
            "run_shell_command", "Runs a bash command (`bash -c`) and returns its output and exit code.",
            _schema(["command"], command=_S, description=_S, directory=_S), BashTool(), shell_args,
            workdir_arg="directory"),
        "read_file": lambda: GeminiTool(
            "read_file", "Reads a text file; `offset` (0-based line) and `limit` for long files.",
            _schema(["absolute_path"], absolute_path=_S, offset=_N, limit=_N), ReadTool(), _read_args,
            renamed={"file_path": "absolute_path"}),
        "write_file": lambda: GeminiTool(
            "write_file", "Writes content to a file, replacing it.",
            _schema(["file_path", "content"], file_path=_S, content=_S), WriteTool(),
            lambda a: _pick(a, {"file_path": "file_path", "content": "content"})),
        "replace": lambda: GeminiTool(
            "replace", "Replaces old_string with new_string in a file (exact match; "
            "expected_replacements when several occurrences should change).",
            _schema(["file_path", "old_string", "new_string"], file_path=_S, old_string=_S,
                    new_string=_S, expected_replacements=_N), EditTool(), _replace_args),
        "list_directory": lambda: GeminiTool(
            "list_directory", "Lists a directory's entries.",
            _schema(["path"], path=_S, ignore={"type": "array", "items": _S}), LSTool(),
            lambda a: _pick(a, {"path": "path", "ignore": "ignore"})),
        "glob": lambda: GeminiTool(
            "glob", "Finds files by glob pattern, newest first.",
            _schema(["pattern"], pattern=_S, path=_S), GlobTool(),
            lambda a: _pick(a, {"pattern": "pattern", "path": "path"})),
        "search_file_content": lambda: GeminiTool(
            "search_file_content", "Searches file contents with a regular expression; `include` "
            "filters files by glob.", _schema(["pattern"], pattern=_S, path=_S, include=_S), GrepTool(),
            lambda a: {**_pick(a, {"pattern": "pattern", "path": "path", "include": "glob"}),
                       "output_mode": "content"}, renamed={"glob": "include"}),
        "write_todos": lambda: GeminiTool(
            "write_todos", "Replaces the todo list: [{description, status pending|in_progress|"
            "completed|cancelled}].", _schema(["todos"], todos={"type": "array", "items": {"type": "object"}}),
            TodoWriteTool(), _todo_args),
        "read_many_files": lambda: ReadManyFilesTool(ReadTool(), GlobTool()),
    }  # fmt: skip
