"""The built-in tool set, registered through the same `ToolRegistry.register` a mod uses."""

from __future__ import annotations

from collections.abc import Sequence

from tether.core.tools import Tool, ToolRegistry
from tether.tools.toolsets import TOOLSETS, toolset_tools

# The default toolset as a one-shot headless run sees it (AskUserQuestion needs someone to ask).
BUILTIN_TOOL_NAMES: tuple[str, ...] = tuple(n for n in TOOLSETS["default"] if n != "AskUserQuestion")


def builtin_tools(
    toolset: str | None = "default",
    *,
    model: str | None = None,
    base_tools: Sequence[str] | None = None,
    ask_user: bool = False,
) -> list[Tool]:
    """Fresh instances (per registry: the Bash and TodoWrite fallbacks keep per-instance state)."""
    return toolset_tools(toolset, model=model, base_tools=base_tools, ask_user=ask_user)


def register_builtin_tools(
    registry: ToolRegistry,
    toolset: str | None = "default",
    *,
    model: str | None = None,
    base_tools: Sequence[str] | None = None,
    ask_user: bool = False,
) -> None:
    """Register the toolset's tools (`auto` picks by `model`; see `tools.toolsets`)."""
    for tool in builtin_tools(toolset, model=model, base_tools=base_tools, ask_user=ask_user):
        registry.register(tool)
