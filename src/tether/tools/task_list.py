"""TaskCreate, TaskGet, TaskList and TaskUpdate: the conversation's task list, kept on disk.

The list is one JSON file per conversation (`services.task_list_path` when the runtime names
one, else `$TETHER_HOME/task-lists/<conversation>.json`), so it survives a resume. Each call
reads, changes and atomically replaces the file without awaiting in between, so calls in one
process never interleave.
"""

from __future__ import annotations

import base64
import contextlib
import os
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from tether.core.tools import Effect, Tool, ToolResult, ToolRunContext
from tether.errors import ToolFailure
from tether.tools.arguments import checked_text, optional_str, require_str
from tether.tools.boundary import tether_home_of
from tether.tools.output import error_result

STATUSES = ("pending", "in_progress", "completed")
MAX_TEXT = 10_000
_FIELDS = ("subject", "description", "activeForm", "owner")


def task_list_path(ctx: ToolRunContext) -> Path | None:
    given = ctx.services.task_list_path
    if isinstance(given, str | Path) and str(given):
        return Path(given)
    env = ctx.env or {}
    conversation = env.get("TETHER_CONVERSATION_ID")
    if not conversation:
        return None
    if conversation == "default":
        conversation = f"default:{env.get('TETHER_AGENT_ID', '')}"
    name = base64.urlsafe_b64encode(conversation.encode()).decode().rstrip("=")
    return tether_home_of(ctx) / "task-lists" / f"{name}.json"


class _Store:
    """The list for one run: on disk when a path is known, in memory otherwise."""

    def __init__(self) -> None:
        self.memory: list[dict[str, Any]] = []

    def load(self, path: Path | None) -> list[dict[str, Any]]:
        import json  # on first use: off the start-up path

        if path is None:
            return [dict(t) for t in self.memory]
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            return []
        except (OSError, ValueError) as exc:
            raise ToolFailure(f"The task list at {path} could not be read: {exc}") from exc
        if not isinstance(data, list):
            raise ToolFailure(f"The task list at {path} is not a JSON list.")
        return [t for t in data if isinstance(t, dict)]

    def save(self, path: Path | None, tasks: list[dict[str, Any]]) -> None:
        import json

        if path is None:
            self.memory = tasks
            return
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        temp = path.with_name(f".{path.name}.{os.urandom(4).hex()}.tmp")
        try:
            temp.write_text(json.dumps(tasks, indent=1), encoding="utf-8")
            os.replace(temp, path)
        except BaseException:
            with contextlib.suppress(OSError):
                temp.unlink()
            raise


def _find(tasks: list[dict[str, Any]], task_id: str) -> dict[str, Any]:
    for task in tasks:
        if task.get("id") == task_id:
            return task
    known = ", ".join(str(t.get("id")) for t in tasks) or "none"
    raise ToolFailure(f"No task with id {task_id!r} (known ids: {known}). Use TaskList.")


def _line(task: Mapping[str, Any]) -> str:
    blocked = task.get("blockedBy") or []
    tail = f" (blocked by {', '.join(blocked)})" if blocked else ""
    return f"#{task['id']} [{task['status']}] {task['subject']}{tail}"


_ID = {"taskId": {"type": "string"}}
_SCHEMAS: dict[str, tuple[str, dict[str, Any]]] = {
    "TaskCreate": (
        "Adds a task to this conversation's task list (kept across resumes). Use it to track "
        "multi-step work; mark progress with TaskUpdate.",
        {
            "type": "object",
            "properties": {
                "subject": {"type": "string", "description": "Imperative title"},
                "description": {"type": "string"},
                "activeForm": {"type": "string", "description": "Present continuous form"},
            },
            "required": ["subject", "description"],
            "additionalProperties": False,
        },
    ),
    "TaskGet": (
        "Returns one task of the task list in full.",
        {"type": "object", "properties": _ID, "required": ["taskId"], "additionalProperties": False},
    ),
    "TaskList": (
        "Lists this conversation's tasks: id, status, subject, blockers.",
        {"type": "object", "properties": {}, "additionalProperties": False},
    ),
    "TaskUpdate": (
        "Changes a task: status (pending, in_progress, completed, or deleted to remove it), "
        "subject, description, activeForm, owner, or dependencies (addBlocks, addBlockedBy).",
        {
            "type": "object",
            "properties": {
                **_ID,
                "status": {"type": "string", "enum": [*STATUSES, "deleted"]},
                "subject": {"type": "string"},
                "description": {"type": "string"},
                "activeForm": {"type": "string"},
                "owner": {"type": "string"},
                "addBlocks": {"type": "array", "items": {"type": "string"}},
                "addBlockedBy": {"type": "array", "items": {"type": "string"}},
            },
            "required": ["taskId"],
            "additionalProperties": False,
        },
    ),
}


def _ids(args: Mapping[str, Any], name: str) -> list[str]:
    value = args.get(name)
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise ToolFailure(f"Argument `{name}` must be a list of task ids.")
    return [checked_text(f"{name}[{i}]", v, max_chars=200) for i, v in enumerate(value)]


class TaskListTool:
    effect = Effect.READ  # conversation state only

    def __init__(self, name: str, store: _Store) -> None:
        self.name = name
        self.description, self.parameters = _SCHEMAS[name]
        self._store = store

    def paths(self, args: Mapping[str, Any], cwd: Path) -> list[Path]:
        return []

    async def run(self, args: Mapping[str, Any], ctx: ToolRunContext) -> ToolResult:
        try:
            unknown = sorted(set(args) - set(self.parameters["properties"]))
            if unknown:
                raise ToolFailure(f"{self.name} takes no argument {', '.join(unknown)}.")
            path = task_list_path(ctx)
            tasks = self._store.load(path)
            text, changed = self._apply(args, tasks)
            if changed:
                self._store.save(path, tasks)
        except ToolFailure as exc:
            return error_result(str(exc))
        except OSError as exc:
            return error_result(f"The task list could not be saved: {exc.strerror or exc}")
        return ToolResult(text)

    def _apply(self, args: Mapping[str, Any], tasks: list[dict[str, Any]]) -> tuple[str, bool]:
        if self.name == "TaskList":
            return ("\n".join(_line(t) for t in tasks) or "No tasks."), False
        if self.name == "TaskCreate":
            task_id = str(1 + max((int(t["id"]) for t in tasks if str(t.get("id")).isdigit()), default=0))
            new: dict[str, Any] = {
                "id": task_id,
                "subject": require_str(args, "subject", allow_empty=False, max_chars=MAX_TEXT),
                "description": require_str(args, "description", max_chars=MAX_TEXT),
                "activeForm": optional_str(args, "activeForm", max_chars=MAX_TEXT) or "",
                "status": "pending",
                "blocks": [],
                "blockedBy": [],
            }
            tasks.append(new)
            return f"Task #{task_id} created: {new['subject']}", True
        task_id = require_str(args, "taskId", allow_empty=False, max_chars=200)
        status = optional_str(args, "status")
        fields = {k: optional_str(args, k, max_chars=MAX_TEXT) for k in _FIELDS}
        links = {k: _ids(args, k) for k in ("addBlocks", "addBlockedBy")}
        task = _find(tasks, task_id)
        if self.name == "TaskGet":
            import json

            return json.dumps(task, indent=1), False
        if status == "deleted":
            tasks.remove(task)
            for other in tasks:
                for key in ("blocks", "blockedBy"):
                    other[key] = [i for i in other.get(key, []) if i != task["id"]]
            return f"Task #{task['id']} deleted", True
        if status is not None and status not in STATUSES:
            raise ToolFailure(
                f"Argument `status` must be one of {', '.join(STATUSES)} or deleted, got {status!r}."
            )
        if status is not None:
            task["status"] = status
        task.update({k: v for k, v in fields.items() if v is not None})
        for key, other_key in (("addBlocks", "blockedBy"), ("addBlockedBy", "blocks")):
            for other_id in links[key]:
                other = _find(tasks, other_id)
                mine = "blocks" if key == "addBlocks" else "blockedBy"
                task.setdefault(mine, [])
                if other_id not in task[mine]:
                    task[mine].append(other_id)
                other.setdefault(other_key, [])
                if task["id"] not in other[other_key]:
                    other[other_key].append(task["id"])
        return f"Task #{task['id']} updated: {_line(task)}", True


def task_list_tools() -> dict[str, Callable[[], Tool]]:
    """Factories; the four tools built for one registry share one in-memory fallback."""
    shared: dict[str, _Store] = {}

    def factory(name: str) -> Callable[[], Tool]:
        def make() -> Tool:
            store = shared.setdefault("store", _Store())
            return TaskListTool(name, store)

        return make

    return {name: factory(name) for name in _SCHEMAS}
