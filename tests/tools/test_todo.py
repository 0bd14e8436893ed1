from __future__ import annotations

from pathlib import Path

from tether.core.tools import Effect
from tether.tools.todo import TODOS_UPDATED, TodoWriteTool

from .support import run_tool

TODOS = [
    {"content": "Run tests", "status": "in_progress", "activeForm": "Running tests"},
    {"content": "Fix bug", "status": "pending", "activeForm": "Fixing bug"},
]


def test_todos_go_to_the_service_holder(tmp_path: Path) -> None:
    holder: list[dict[str, str]] = [{"content": "stale", "status": "completed", "activeForm": "x"}]
    result = run_tool(TodoWriteTool(), {"todos": TODOS}, tmp_path, services={"todos": holder})
    assert (result.output, result.is_error) == (TODOS_UPDATED, False)
    assert holder == TODOS
    assert TODOS_UPDATED.startswith("Todos have been modified successfully.")


def test_todos_kept_on_the_instance_without_a_holder(tmp_path: Path) -> None:
    tool = TodoWriteTool()
    run_tool(tool, {"todos": TODOS}, tmp_path, services={"todos": "not a list"})
    assert tool.todos == TODOS
    run_tool(tool, {"todos": []}, tmp_path)
    assert tool.todos == []


def test_invalid_todos_name_the_index(tmp_path: Path) -> None:
    tool = TodoWriteTool()
    bad = [*TODOS, {"content": "x", "status": "done", "activeForm": "x"}]
    result = run_tool(tool, {"todos": bad}, tmp_path)
    assert result.is_error
    assert "todos[2].status must be one of pending, in_progress, completed" in result.output
    result = run_tool(
        tool, {"todos": [{"content": "", "status": "pending", "activeForm": "a"}]}, tmp_path
    )
    assert result.is_error and "todos[0].content" in result.output
    result = run_tool(tool, {"todos": "[]"}, tmp_path)
    assert result.is_error and "`todos` must be a list" in result.output
    assert tool.todos == []


def test_contract_surface(tmp_path: Path) -> None:
    tool = TodoWriteTool()
    assert tool.effect is Effect.READ and tool.paths({}, tmp_path) == []
    item = tool.parameters["properties"]["todos"]["items"]
    assert item["required"] == ["content", "status", "activeForm"]
    assert item["properties"]["status"]["enum"] == ["pending", "in_progress", "completed"]
