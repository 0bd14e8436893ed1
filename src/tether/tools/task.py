"""The Task tool, shown to the model as `Agent`: delegate work to a subagent (reference §6.2, §11).

The tool only validates and hands the call to the run's subagent service (`ctx.services
["subagents"]`), which owns child processes; without one, it says subagents are unavailable.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Protocol, cast

from tether.core.tools import Effect, ToolResult, ToolRunContext


class SubagentService(Protocol):
    async def launch(
        self, args: Mapping[str, Any], abort: asyncio.Event, tool_call_id: str | None = None
    ) -> ToolResult: ...


class AgentTool:
    name = "Agent"
    effect = Effect.EXEC
    parameters: dict[str, Any] = {
        "type": "object",
        "properties": {
            "description": {
                "type": "string",
                "description": "A short (3-5 word) description of the task",
            },
            "prompt": {
                "type": "string",
                "description": "The task for the subagent, complete and self-contained",
            },
            "subagent_type": {"type": "string", "description": "Which kind of subagent to use"},
            "model": {"type": "string", "description": "Optional model handle for the subagent"},
            "run_in_background": {
                "type": "boolean",
                "default": True,
                "description": "Run in the background (default) and be notified on completion",
            },
            "agent_id": {
                "type": "string",
                "description": "Run as this existing agent (yours or one you created), in a new "
                "conversation unless conversation_id is given; general-purpose only",
            },
            "conversation_id": {
                "type": "string",
                "description": "Continue this existing conversation of such an agent "
                "(`default` with agent_id: its primary history)",
            },
        },
        "required": ["description", "prompt", "subagent_type"],
        "additionalProperties": False,
    }

    def __init__(self, type_descriptions: Mapping[str, str]) -> None:
        kinds = "\n".join(f"- {name}: {text}" for name, text in sorted(type_descriptions.items()))
        self.description = (
            "Launch a subagent: a separate agent that works one delegated task with its own tools "
            "and context, then reports back. Give it a complete, self-contained prompt. By default "
            "it runs in the background and you are notified when it finishes (TaskOutput reads its "
            "result, TaskStop stops it); set run_in_background=false to wait for its report.\n"
            f"Subagent types:\n{kinds}"
        )

    def paths(self, args: Mapping[str, Any], cwd: Path) -> list[Path]:
        return []

    async def run(self, args: Mapping[str, Any], ctx: ToolRunContext) -> ToolResult:
        service = ctx.services.subagents
        if service is None:
            return ToolResult("Subagents are not available in this run.", True)
        for key in ("description", "prompt", "subagent_type"):
            if not isinstance(args.get(key), str) or not args[key].strip():
                return ToolResult(f"{key} must be a non-empty string", True)
        if "run_in_background" in args and not isinstance(args["run_in_background"], bool):
            return ToolResult("run_in_background must be true or false", True)
        for key in ("agent_id", "conversation_id"):
            if key in args and not isinstance(args[key], str):
                return ToolResult(f"{key} must be a string (an existing id)", True)
        launch = cast(SubagentService, service)  # the runtime's Subagents (runtime/agents/subagents.py)
        return await launch.launch(args, ctx.abort, ctx.tool_call_id)
