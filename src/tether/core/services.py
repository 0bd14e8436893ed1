"""The run's services a tool (or a frontend) may reach, typed: each member is a narrow Protocol
of what its users call, or None where the run has no such service (a test, a hosted agent, a
one-shot run nobody can ask). The runtime fills it (`runtime/session/assembly.py`); every member is
reached as an attribute, never looked up by a string.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping, MutableSequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol


class TaskPool(Protocol):
    """Background shell tasks (`tools/background.py`) or subagents (`runtime/agents/subagents.py`)."""

    def tasks(self) -> list[Any]: ...

    async def stop_all(self) -> None: ...


class BackgroundService(TaskPool, Protocol):
    @property
    def running_count(self) -> int: ...


class SubagentService(TaskPool, Protocol):
    progress: Any  # where a child's progress events go (a stream-json frontend tags them)
    notify: Any  # who delivers a finished task's notification (bidirectional starts a turn)

    def take_notifications(self) -> list[str]: ...


class ExecSessionService(Protocol):
    async def close_all(self) -> None: ...


class ShellGroupService(Protocol):
    def reap_orphans(self) -> Any: ...

    def started(self, pgid: int) -> None: ...


class SandboxService(Protocol):
    """A shell sandbox (`runtime/policy/sandboxing.py`): its policy and how it wraps a command."""

    @property
    def policy(self) -> Any: ...


class ConfinementService(Protocol):
    def available(self) -> bool: ...


class WorkingDirectoryService(Protocol):
    listeners: list[Callable[[Path], None]]


class McpService(Protocol):
    @property
    def states(self) -> Mapping[str, Any]: ...  # server name -> status, error, tools, prompts

    async def ready(self, abort: asyncio.Event | None = None) -> None: ...

    async def get_prompt(self, server: str, prompt: str, arguments: Mapping[str, str]) -> str: ...

    def status(self) -> list[dict[str, Any]]: ...

    async def close(self) -> None: ...


class SkillCatalogService(Protocol):
    @property
    def sources(self) -> Any: ...

    @property
    def enabled(self) -> bool: ...

    def all(self) -> Mapping[str, Any]: ...


class ReflectionService(Protocol):
    async def after_turn(self, abort: asyncio.Event | None = None) -> Any: ...


AskUser = Callable[[list[dict[str, Any]]], Awaitable[Any]]


@dataclass(slots=True)
class Services:
    tether_home: Path | None = None
    read_denied: Callable[[Path], bool] | None = None  # a file deny rule protects this path
    background: BackgroundService | None = None
    exec_sessions: ExecSessionService | None = None
    shell_groups: ShellGroupService | None = None
    sandbox: SandboxService | None = None  # the workspace sandbox of every shell command
    confinement: ConfinementService | None = None  # the read-only sandbox of auto-allowed ones
    working_directory: WorkingDirectoryService | None = None
    subagents: SubagentService | None = None
    mcp: McpService | None = None
    memfs: Any = None  # memory.memfs.MemFS (its many readers are the TUI's /memory and tools)
    skills: SkillCatalogService | None = None
    system_prompt: Callable[..., Awaitable[str]] | None = None
    reflection: ReflectionService | None = None
    ask_user: AskUser | None = None
    todos: MutableSequence[Any] | None = None
    plan: MutableSequence[Any] | None = None
    task_list_path: Path | None = None
