"""Every string argument of every built-in tool: a NUL byte, a lone surrogate or an overlong path
is a tool error naming the argument; `Tool.paths` never raises and never hands such a path on."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tether.tools.arguments import checked_text, paths_from, text_problem
from tether.tools.builtin import builtin_tools
from tether.tools.toolsets import TOOLSETS

from .support import run_tool

PATCH = "*** Begin Patch\n*** Add File: b.txt\n+x\n*** End Patch"


def every_builtin_tool() -> list[Any]:
    """One instance of each built-in tool of every toolset (AskUserQuestion included)."""
    seen: dict[str, Any] = {}
    for toolset in TOOLSETS:
        for tool in builtin_tools(toolset, ask_user=True):
            seen.setdefault(tool.name, tool)
    return list(seen.values())


GOOD: dict[str, dict[str, Any]] = {
    "Bash": {"command": "true", "description": "d"},
    "Read": {"file_path": "a.txt"},
    "Write": {"file_path": "b.txt", "content": "x"},
    "Edit": {"file_path": "a.txt", "old_string": "hello", "new_string": "bye"},
    "MultiEdit": {"file_path": "a.txt", "edits": [{"old_string": "hello", "new_string": "x"}]},
    "Glob": {"pattern": "*.txt", "path": "."},
    "Grep": {
        "pattern": "hello",
        "path": ".",
        "glob": "*.txt",
        "type": "txt",
        "output_mode": "content",
    },
    "LS": {"path": ".", "ignore": ["x"]},
    "TodoWrite": {"todos": [{"content": "c", "status": "pending", "activeForm": "a"}]},
    "TaskOutput": {"task_id": "bash_1", "block": False, "timeout": 0},
    "TaskStop": {"task_id": "bash_1"},
    "AskUserQuestion": {
        "questions": [{"question": "q", "header": "h", "options": [{"label": "a"}], "multiSelect": False}]
    },
    "Monitor": {"description": "d", "command": "true"},
    "EnterWorktree": {"name": "w"},
    "ExitWorktree": {"action": "keep"},
    "SetWorkingDirectory": {"path": "."},
    "TaskCreate": {"subject": "s", "description": "d", "activeForm": "a"},
    "TaskGet": {"taskId": "1"},
    "TaskList": {},
    "TaskUpdate": {"taskId": "1", "status": "completed", "subject": "s"},
    "exec_command": {"cmd": "true", "description": "d", "workdir": "."},
    "write_stdin": {"session_id": 1, "chars": "x"},
    "ApplyPatch": {"input": PATCH},
    "apply_patch": {"input": PATCH},
    "UpdatePlan": {"plan": [{"step": "s", "status": "pending"}], "explanation": "e"},
    "update_plan": {"plan": [{"step": "s", "status": "pending"}], "explanation": "e"},
    "ViewImage": {"path": "a.txt"},
    "view_image": {"path": "a.txt"},
    "run_shell_command": {"command": "true", "description": "d", "directory": "."},
    "read_file": {"absolute_path": "a.txt"},
    "write_file": {"file_path": "b.txt", "content": "x"},
    "replace": {"file_path": "a.txt", "old_string": "hello", "new_string": "bye"},
    "list_directory": {"path": "."},
    "glob": {"pattern": "*.txt", "path": "."},
    "search_file_content": {"pattern": "hello", "path": ".", "include": "*.txt"},
    "write_todos": {"todos": [{"description": "d", "status": "pending"}]},
    "read_many_files": {"paths": ["a.txt"]},
}
# Arguments that are data (file content), where a NUL is a byte like any other.
CONTENT = {
    ("Write", "content"), ("Edit", "old_string"), ("Edit", "new_string"), ("write_file", "content"),
    ("replace", "old_string"), ("replace", "new_string"),
}  # fmt: skip
BAD = {"nul": "a\0b", "surrogate": "a\ud800b"}


def _string_arguments() -> list[tuple[str, str, str]]:
    """(tool, argument, kind of bad text); content arguments may hold NUL bytes."""
    names = {tool.name for tool in every_builtin_tool()}
    assert names == set(GOOD), "a new built-in tool needs a row in GOOD"
    return [
        (tool, arg, kind)
        for tool, args in GOOD.items()
        for arg, v in args.items()
        for kind in sorted(BAD)
        if isinstance(v, str) and not (kind == "nul" and (tool, arg) in CONTENT)
    ]


def _tool(name: str) -> Any:
    return next(t for t in every_builtin_tool() if t.name == name)


@pytest.mark.parametrize(("name", "argument", "kind"), _string_arguments())
def test_bad_text_in_any_argument_is_named(
    tmp_path: Path, name: str, argument: str, kind: str
) -> None:
    (tmp_path / "a.txt").write_text("hello\n")
    args = {**GOOD[name], argument: BAD[kind]}
    tool = _tool(name)
    for path in tool.paths(args, tmp_path):  # what the permission layer sees: never the bad text
        assert text_problem(str(path)) is None
    result = run_tool(tool, args, tmp_path)
    assert result.is_error and f"`{argument}`" in result.output, result.output
    assert (tmp_path / "a.txt").read_text() == "hello\n"
    assert not (tmp_path / "b.txt").exists()


@pytest.mark.parametrize("name", ["Read", "Write", "Edit", "MultiEdit", "Glob", "Grep", "LS"])
def test_overlong_path_is_named(tmp_path: Path, name: str) -> None:
    argument = "file_path" if "file_path" in GOOD[name] else "path"
    args = {**GOOD[name], argument: "d/" * 3000}
    assert _tool(name).paths(args, tmp_path) == []
    result = run_tool(_tool(name), args, tmp_path)
    assert result.is_error and f"`{argument}`" in result.output and "limit" in result.output


def test_nested_and_listed_strings_are_checked(tmp_path: Path) -> None:
    result = run_tool(
        _tool("MultiEdit"),
        {"file_path": "a.txt", "edits": [{"old_string": "a\ud800", "new_string": "b"}]},
        tmp_path,
    )
    assert result.is_error and "edits[0]" in result.output and "surrogate" in result.output
    result = run_tool(_tool("LS"), {"ignore": ["ok", "b\0d"]}, tmp_path)
    assert result.is_error and "`ignore[1]`" in result.output
    result = run_tool(
        _tool("TodoWrite"),
        {"todos": [{"content": "ok", "status": "pending", "activeForm": "x\0"}]},
        tmp_path,
    )
    assert result.is_error and "todos[0].activeForm" in result.output


def test_nul_in_content_is_data(tmp_path: Path) -> None:
    result = run_tool(_tool("Write"), {"file_path": "n.txt", "content": "a\0b"}, tmp_path)
    assert not result.is_error and (tmp_path / "n.txt").read_bytes() == b"a\0b"


def test_helpers(tmp_path: Path) -> None:
    assert checked_text("x", "fine") == "fine"
    assert "NUL" in (text_problem("\0") or "")
    assert text_problem("x" * 10, max_chars=9) == "is 10 characters long (the limit is 9)"
    assert paths_from({"p": "a\0"}, "p", tmp_path, default_cwd=True) == []
    assert paths_from({}, "p", tmp_path, default_cwd=True) == [tmp_path]
    assert paths_from({"p": "a"}, "p", tmp_path, default_cwd=False) == [tmp_path / "a"]


DEEP_BRACES = "{" * 1500 + "a" + "}" * 1500


@pytest.mark.parametrize(
    ("name", "args", "argument"),
    [
        ("Glob", {"pattern": DEEP_BRACES}, "glob pattern"),
        ("Glob", {"pattern": "[z-a]"}, "glob pattern"),
        ("Grep", {"pattern": "x", "glob": DEEP_BRACES}, "glob pattern"),
        ("Grep", {"pattern": "(" * 1000 + ")" * 1000}, "regex pattern"),
        ("Grep", {"pattern": "[z-a]"}, "regex pattern"),
        ("LS", {"ignore": ["[z-a]"]}, "`ignore`"),
        ("LS", {"ignore": [DEEP_BRACES]}, "`ignore`"),
    ],
    ids=[
        "glob-deep",
        "glob-range",
        "grep-glob-deep",
        "grep-regex-deep",
        "grep-range",
        "ls-range",
        "ls-deep",
    ],
)
def test_hostile_patterns_are_clear_errors(
    tmp_path: Path, name: str, args: dict[str, Any], argument: str
) -> None:
    result = run_tool(_tool(name), args, tmp_path)  # a RecursionError used to escape
    assert result.is_error and argument in result.output and len(result.output) < 600, result


@pytest.mark.parametrize("timeout", [float("nan"), float("inf"), -1, "5", True])
def test_task_output_timeout_must_be_a_finite_number(tmp_path: Path, timeout: object) -> None:
    result = run_tool(
        _tool("TaskOutput"), {"task_id": "bash_1", "block": True, "timeout": timeout}, tmp_path
    )
    assert result.is_error and "timeout" in result.output
