"""Which built-in tools a run offers: the reference's toolsets, `--toolset auto`'s choice per model,
and `--base-tools` / `--tools` checked against the names that exist.

Models work best with the tools they were trained on: OpenAI's coding models with Codex's
`exec_command` / `apply_patch` / `update_plan`, Gemini's with gemini-cli's snake-case names,
Anthropic's with Claude Code's. Tool modules are imported only when the set is built.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from tether.errors import UsageError

if TYPE_CHECKING:
    from tether.core.tools import Tool

TOOLSET_CHOICES = ("auto", "default", "codex", "codex_snake", "gemini")

# Letta extras every full toolset carries (the reference's "worktree tools", task list, …).
_EXTRAS = (
    "AskUserQuestion", "Monitor", "TaskOutput", "TaskStop", "EnterWorktree", "ExitWorktree",
    "SetWorkingDirectory",
)  # fmt: skip
_TASK_LIST = ("TaskCreate", "TaskGet", "TaskList", "TaskUpdate")

TOOLSETS: dict[str, tuple[str, ...]] = {
    # tether keeps Glob/Grep/LS/MultiEdit/TodoWrite in its default set (the reference ships them
    # but leaves them out by default): the model reaches for them, and they stay read-only.
    "default": (
        "Bash", "Read", "Write", "Edit", "MultiEdit", "Glob", "Grep", "LS", "TodoWrite",
        *_EXTRAS, *_TASK_LIST,
    ),
    "codex": (*_EXTRAS, "exec_command", "write_stdin", "ApplyPatch", "UpdatePlan", "ViewImage"),
    "codex_snake": ("exec_command", "write_stdin", "apply_patch", "update_plan", "view_image"),
    "gemini": (
        "run_shell_command", "read_file", "list_directory", "glob", "search_file_content",
        "replace", "write_file", "write_todos", "read_many_files", *_EXTRAS,
    ),
}  # fmt: skip


def _factories() -> dict[str, Callable[[], Tool]]:
    """Every built-in tool by its model-facing name (imports the tool modules)."""
    from tether.tools.apply_patch import ApplyPatchTool
    from tether.tools.ask_user import AskUserQuestionTool
    from tether.tools.bash import BashTool
    from tether.tools.edit import EditTool, MultiEditTool
    from tether.tools.exec_command import exec_tools
    from tether.tools.files import ReadTool, WriteTool
    from tether.tools.gemini import gemini_tools
    from tether.tools.listing import LSTool
    from tether.tools.monitor import MonitorTool
    from tether.tools.search import GlobTool, GrepTool
    from tether.tools.task_list import task_list_tools
    from tether.tools.tasks import TaskOutputTool, TaskStopTool
    from tether.tools.todo import TodoWriteTool
    from tether.tools.update_plan import UpdatePlanTool
    from tether.tools.view_image import ViewImageTool
    from tether.tools.working_dir import SetWorkingDirectoryTool
    from tether.tools.worktree import EnterWorktreeTool, ExitWorktreeTool

    out: dict[str, Callable[[], Tool]] = {
        "Bash": BashTool, "Read": ReadTool, "Write": WriteTool, "Edit": EditTool,
        "MultiEdit": MultiEditTool, "Glob": GlobTool, "Grep": GrepTool, "LS": LSTool,
        "TodoWrite": TodoWriteTool, "TaskOutput": TaskOutputTool, "TaskStop": TaskStopTool,
        "AskUserQuestion": AskUserQuestionTool, "Monitor": MonitorTool,
        "EnterWorktree": EnterWorktreeTool, "ExitWorktree": ExitWorktreeTool,
        "SetWorkingDirectory": SetWorkingDirectoryTool,
        "ApplyPatch": ApplyPatchTool, "apply_patch": lambda: ApplyPatchTool("apply_patch"),
        "UpdatePlan": UpdatePlanTool, "update_plan": lambda: UpdatePlanTool("update_plan"),
        "ViewImage": ViewImageTool, "view_image": lambda: ViewImageTool("view_image"),
    }  # fmt: skip
    for name, factory in {**task_list_tools(), **gemini_tools(), **exec_tools()}.items():
        out[name] = factory
    return out


# The memory tool the models of each toolset know (registered with the agent's memory, not
# with the toolset: a run without memory has neither).
MEMORY_TOOLS = ("memory", "memory_apply_patch")
_MEMORY_TOOL_OF = {"codex": "memory_apply_patch", "codex_snake": "memory_apply_patch"}


def known_tool_names() -> frozenset[str]:
    return frozenset(n for names in TOOLSETS.values() for n in names)


def memory_tool_names(
    toolset: str | None, model: str | None, tools: Sequence[str] | None = None
) -> list[str]:
    """The memory tools a run offers: its toolset's (`memory_apply_patch` for the codex sets,
    `memory` otherwise), or those `--tools` names explicitly."""
    if tools is not None:
        return [t for t in MEMORY_TOOLS if t in tools]
    return [_MEMORY_TOOL_OF.get(resolve_toolset(toolset, model), "memory")]


def resolve_toolset(requested: str | None, model: str | None) -> str:
    """The concrete toolset: `auto` (or none) is codex for OpenAI models, else default."""
    if requested in (None, "", "auto"):
        provider = (model or "").split("/", 1)[0].lower()
        return "codex" if provider in ("openai", "openai-chat", "chatgpt", "chatgpt_oauth") else "default"
    if requested not in TOOLSETS:
        raise UsageError(
            f"--toolset {requested!r} is not valid; choose one of: {', '.join(TOOLSET_CHOICES)}"
        )
    return requested


def parse_base_tools(value: str | None, tools: Sequence[str] | None = None) -> list[str] | None:
    """`--base-tools a,b`: the built-in tools to offer instead of the toolset's; unknown names
    are an error naming them. Without it, built-ins that `--tools` names explicitly are offered
    whichever toolset has them (a subagent naming Claude Code's tools on an OpenAI model)."""
    if value is None:
        if tools is None:
            return None
        known = known_tool_names()
        return [t for t in tools if t in known]
    names = [t.strip() for t in value.split(",") if t.strip()]
    unknown = sorted(set(names) - known_tool_names())
    if unknown:
        raise UsageError(
            f"--base-tools names unknown tools: {', '.join(unknown)} (known: "
            f"{', '.join(sorted(known_tool_names()))})"
        )
    return names


def toolset_tools(
    toolset: str | None = "default",
    *,
    model: str | None = None,
    base_tools: Sequence[str] | None = None,
    ask_user: bool = False,
) -> list[Tool]:
    """Fresh tool instances for one registry. AskUserQuestion only when someone can answer it
    (the TUI, or an SDK on the bidirectional protocol): one-shot headless never offers it."""
    names = list(base_tools) if base_tools is not None else list(TOOLSETS[resolve_toolset(toolset, model)])
    factories = _factories()
    return [factories[n]() for n in names if ask_user or n != "AskUserQuestion"]
