"""The conversation's working directory as tools may change it: SetWorkingDirectory, and the
`WorkingDirectory` service the runtime reads its cwd from.

A change is allowed only into the directories the session may use (the start directory, the
permission scope's additional directories, and worktrees tether made for this conversation);
anything else is refused, naming the allowed roots. Listeners (the runtime's sandbox and
permission scope) hear of every change so the writable root follows the working directory.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from tether.core.tools import Effect, ToolResult, ToolRunContext
from tether.errors import ToolFailure
from tether.tools.arguments import paths_from, require_path_text, resolve_path
from tether.tools.output import error_result


class WorkingDirectory:
    """`services.working_directory`: the current directory and where it may go."""

    def __init__(self, start: Path, allowed: Iterable[Path] = ()) -> None:
        self.start = Path(os.path.realpath(start))
        self.current = self.start
        self.allowed: list[Path] = [self.start, *(Path(os.path.realpath(p)) for p in allowed)]
        self.listeners: list[Callable[[Path], None]] = []

    def allow(self, root: Path) -> None:
        real = Path(os.path.realpath(root))
        if real not in self.allowed:
            self.allowed.append(real)

    def permits(self, path: Path) -> bool:
        real = os.path.realpath(path)
        return any(real == str(r) or real.startswith(str(r).rstrip("/") + "/") for r in self.allowed)

    def change(self, path: Path) -> Path:
        real = Path(os.path.realpath(path))
        if not real.is_dir():
            raise ToolFailure(f"{path} is not an existing directory.")
        if not self.permits(real):
            roots = ", ".join(str(r) for r in self.allowed)
            raise ToolFailure(
                f"{path} is outside the directories this session may use ({roots}). Ask the "
                "user to add it (additionalDirectories in settings) or start tether there."
            )
        previous, self.current = self.current, real
        try:
            for listener in self.listeners:
                listener(real)
        except Exception as exc:
            self.current = previous
            for listener in self.listeners:  # put the runtime back where it was
                listener(previous)
            raise ToolFailure(f"Could not move the session to {real}: {exc}") from exc
        return real


def working_directory(ctx: ToolRunContext) -> WorkingDirectory:
    service = ctx.services.working_directory
    if not isinstance(service, WorkingDirectory):
        raise ToolFailure(
            "This runtime keeps a fixed working directory (it provides no working_directory "
            f"service); you are in {ctx.cwd}. Use absolute paths instead."
        )
    return service


DESCRIPTION = """\
Changes the working directory for the rest of the conversation (tools and shell commands run \
there). Only directories inside the session's allowed roots are accepted."""

PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {"path": {"type": "string", "description": "Directory, absolute or relative"}},
    "required": ["path"],
    "additionalProperties": False,
}


class SetWorkingDirectoryTool:
    name = "SetWorkingDirectory"
    description = DESCRIPTION
    parameters = PARAMETERS
    effect = Effect.EXEC  # not with the concurrent reads: it changes where later calls run

    def paths(self, args: Mapping[str, Any], cwd: Path) -> list[Path]:
        return paths_from(args, "path", cwd, default_cwd=False)

    async def run(self, args: Mapping[str, Any], ctx: ToolRunContext) -> ToolResult:
        try:
            target = resolve_path(require_path_text(args, "path"), ctx.cwd)
            now = working_directory(ctx).change(target)
        except ToolFailure as exc:
            return error_result(str(exc))
        return ToolResult(f"Working directory is now {now}")
