from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tether.core.tools import Effect, ToolContextStore, ToolRegistry
from tether.errors import UsageError
from tether.tools.builtin import BUILTIN_TOOL_NAMES, builtin_tools, register_builtin_tools
from tether.tools.toolsets import TOOLSETS, parse_base_tools, resolve_toolset

from .support import make_ctx


def test_registers_every_builtin_under_the_reference_names() -> None:
    registry = ToolRegistry()
    register_builtin_tools(registry)
    assert registry.names() == list(BUILTIN_TOOL_NAMES)
    assert BUILTIN_TOOL_NAMES == (
        "Bash", "Read", "Write", "Edit", "MultiEdit", "Glob", "Grep", "LS", "TodoWrite",
        "Monitor", "TaskOutput", "TaskStop", "EnterWorktree", "ExitWorktree",
        "SetWorkingDirectory", "TaskCreate", "TaskGet", "TaskList", "TaskUpdate",
    )  # fmt: skip
    with pytest.raises(ValueError, match="already registered"):
        register_builtin_tools(registry)


def test_specs_are_object_schemas_with_descriptions() -> None:
    registry = ToolRegistry()
    register_builtin_tools(registry)
    ctx = ToolContextStore().snapshot(registry, Path("/"), "standard")
    for spec in ctx.specs():
        assert spec.parameters["type"] == "object"
        assert len(spec.description) > 30
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


@pytest.mark.parametrize(
    ("toolset", "model", "expected"),
    [
        ("auto", "openai/gpt-5", "codex"),
        ("auto", "openai-chat/gpt-5", "codex"),
        ("auto", "anthropic/claude-x", "default"),
        (None, None, "default"),
        ("gemini", "openai/gpt-5", "gemini"),
    ],
)
def test_auto_picks_codex_for_openai_models(toolset: str | None, model: str | None, expected: str) -> None:
    assert resolve_toolset(toolset, model) == expected


def test_each_toolset_registers_its_names_and_ask_user_only_when_someone_answers() -> None:
    for name, names in TOOLSETS.items():
        registry = ToolRegistry()
        register_builtin_tools(registry, name, ask_user=True)
        assert registry.names() == list(names)
        quiet = ToolRegistry()
        register_builtin_tools(quiet, name)
        assert "AskUserQuestion" not in quiet.names()
    codex = ToolRegistry()
    register_builtin_tools(codex, "auto", model="openai/gpt-5")
    assert {"exec_command", "write_stdin", "ApplyPatch", "UpdatePlan", "ViewImage"} <= set(codex.names())
    assert "Bash" not in codex.names()


def test_base_tools_replace_the_toolset_and_unknown_names_are_named() -> None:
    registry = ToolRegistry()
    register_builtin_tools(registry, "default", base_tools=parse_base_tools("Read,ApplyPatch"))
    assert registry.names() == ["Read", "ApplyPatch"]
    # --tools naming built-ins offers them from whichever toolset has them; others are not ours
    assert parse_base_tools(None, ["Bash", "Agent", "mcp__x__y"]) == ["Bash"]
    assert parse_base_tools(None, None) is None
    with pytest.raises(UsageError, match="--base-tools names unknown tools: Nope"):
        parse_base_tools("Read,Nope")
    with pytest.raises(UsageError, match="--toolset 'x' is not valid"):
        resolve_toolset("x", None)


def test_every_toolset_stays_lean() -> None:
    """The tool specs are most of the first request; the issue keeps it under 25 KB."""
    import json

    for name in TOOLSETS:
        tools = builtin_tools(name, ask_user=True)
        size = len(json.dumps([{"name": t.name, "description": t.description,
                                "input_schema": t.parameters} for t in tools]))  # fmt: skip
        assert size < 20_000, (name, size)
