from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tether.core.tools import Effect, ToolContextStore, ToolRegistry
from tether.tools.builtin import BUILTIN_TOOL_NAMES, register_builtin_tools

from .support import make_ctx


def test_registers_every_builtin_under_the_reference_names() -> None:
    registry = ToolRegistry()
    register_builtin_tools(registry)
    assert registry.names() == list(BUILTIN_TOOL_NAMES)
    assert BUILTIN_TOOL_NAMES == (
        "Bash", "Read", "Write", "Edit", "MultiEdit", "Glob", "Grep", "LS", "TodoWrite",
        "TaskOutput", "TaskStop",
    )  # fmt: skip
    with pytest.raises(ValueError, match="already registered"):
        register_builtin_tools(registry)


def test_specs_are_object_schemas_with_descriptions() -> None:
    registry = ToolRegistry()
    register_builtin_tools(registry)
    ctx = ToolContextStore().snapshot(registry, Path("/"), "standard")
    for spec in ctx.specs():
        assert spec.parameters["type"] == "object"
        assert len(spec.description) > 100
        for name in spec.parameters.get("required", []):
            assert name in spec.parameters["properties"]
    effects = {name: tool.effect for name, tool in registry.tools().items()}
    assert effects["Bash"] is Effect.EXEC
    assert {effects[n] for n in ("Write", "Edit", "MultiEdit")} == {Effect.WRITE}
    assert {effects[n] for n in ("Read", "Glob", "Grep", "LS", "TodoWrite")} == {Effect.READ}


def test_tools_survive_garbage_arguments(tmp_path: Path) -> None:
    registry = ToolRegistry()
    register_builtin_tools(registry)

    async def scenario() -> None:
        for tool in registry.tools().values():
            garbage = {"file_path": None, "pattern": 5, "command": 1, "todos": None, "path": 7}
            for args in ({}, garbage):
                assert tool.paths(args, tmp_path) in ([], [tmp_path])
                if not args and not tool.parameters.get("required"):
                    continue  # LS with no arguments is a valid call
                result = await tool.run(args, make_ctx(tmp_path))
                assert result.is_error, (tool.name, args, result.output)
                assert "Traceback" not in result.output

    asyncio.run(scenario())
