"""The TodoWrite tool: the model's task list, replaced wholesale on every call and kept by the runtime.

The list lives in `ctx.services.todos` when the runtime provides a mutable sequence there (so a
frontend can render it); otherwise on the tool instance.
"""

from __future__ import annotations

from collections.abc import Mapping, MutableSequence
from pathlib import Path
from typing import Any

from tether.core.tools import Effect, ToolResult, ToolRunContext
from tether.errors import ToolFailure
from tether.tools.arguments import checked_text
from tether.tools.output import error_result

TODO_STATUSES = ("pending", "in_progress", "completed")
TODOS_UPDATED = (
    "Todos have been modified successfully. Ensure that you continue to use the todo list to "
    "track your progress. Please proceed with the current tasks if applicable"
)

TODO_DESCRIPTION = """\
Creates and updates a structured task list for this session, so progress on multi-step work \
stays visible. Use it for work with three or more steps or several requests at once; skip it \
for a single trivial step. Each call replaces the whole list; every item has `content` \
(imperative: "Run the tests"), `activeForm` ("Running the tests") and `status`. Keep one item \
`in_progress`, and mark items `completed` only when really done (not while tests fail)."""

TODO_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "todos": {
            "type": "array",
            "items": {
                "type": "object",
                "properties": {
                    "content": {"type": "string", "minLength": 1},
                    "status": {"type": "string", "enum": list(TODO_STATUSES)},
                    "activeForm": {"type": "string", "minLength": 1},
                },
                "required": ["content", "status", "activeForm"],
                "additionalProperties": False,
            },
            "description": "The updated todo list",
        }
    },
    "required": ["todos"],
    "additionalProperties": False,
}


def parse_todos(value: object) -> list[dict[str, str]]:
    if not isinstance(value, list):
        raise ToolFailure(
            "Argument `todos` must be a list of {content, status, activeForm} objects, "
            f"got {type(value).__name__}."
        )
    todos: list[dict[str, str]] = []
    for index, item in enumerate(value):
        if not isinstance(item, Mapping):
            raise ToolFailure(f"todos[{index}] must be an object, got {type(item).__name__}.")
        for key in ("content", "activeForm"):
            text = item.get(key)
            if not isinstance(text, str) or not text.strip():
                raise ToolFailure(f"todos[{index}].{key} must be a non-empty string.")
            checked_text(f"todos[{index}].{key}", text)
        status = item.get("status")
        if status not in TODO_STATUSES:
            raise ToolFailure(
                f"todos[{index}].status must be one of {', '.join(TODO_STATUSES)}, got {status!r}."
            )
        todos.append(
            {"content": item["content"], "status": str(status), "activeForm": item["activeForm"]}
        )
    return todos


class TodoWriteTool:
    name = "TodoWrite"
    description = TODO_DESCRIPTION
    parameters = TODO_PARAMETERS
    effect = Effect.READ

    def __init__(self) -> None:
        self.todos: list[dict[str, str]] = []

    def paths(self, args: Mapping[str, Any], cwd: Path) -> list[Path]:
        return []

    async def run(self, args: Mapping[str, Any], ctx: ToolRunContext) -> ToolResult:
        try:
            todos = parse_todos(args.get("todos"))
        except ToolFailure as exc:
            return error_result(str(exc))
        holder = ctx.services.todos
        if isinstance(holder, MutableSequence):
            holder[:] = todos
        else:
            self.todos = todos
        return ToolResult(TODOS_UPDATED)
