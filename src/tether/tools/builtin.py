"""The built-in tool set, registered through the same `ToolRegistry.register` a mod uses."""

from __future__ import annotations

from tether.core.tools import Tool, ToolRegistry
from tether.tools.bash import BashTool
from tether.tools.edit import EditTool, MultiEditTool
from tether.tools.files import ReadTool, WriteTool
from tether.tools.listing import LSTool
from tether.tools.search import GlobTool, GrepTool
from tether.tools.tasks import TaskOutputTool, TaskStopTool
from tether.tools.todo import TodoWriteTool

BUILTIN_TOOL_NAMES: tuple[str, ...] = (
    "Bash",
    "Read",
    "Write",
    "Edit",
    "MultiEdit",
    "Glob",
    "Grep",
    "LS",
    "TodoWrite",
    "TaskOutput",
    "TaskStop",
)


def builtin_tools() -> list[Tool]:
    """Fresh instances (per registry: the Bash and TodoWrite fallbacks keep per-instance state)."""
    return [
        BashTool(),
        ReadTool(),
        WriteTool(),
        EditTool(),
        MultiEditTool(),
        GlobTool(),
        GrepTool(),
        LSTool(),
        TodoWriteTool(),
        TaskOutputTool(),
        TaskStopTool(),
    ]


def register_builtin_tools(registry: ToolRegistry) -> None:
    for tool in builtin_tools():
        registry.register(tool)
