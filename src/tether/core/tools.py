"""Tools as the turn engine sees them: the Tool contract, the registry, per-send snapshots.

Built-in tools register through the same `ToolRegistry.register` a mod would use. Every send to
the model takes a `ToolContext` snapshot under an id (`ctx-<ms>-<n>`); classification and
execution use the snapshot the stream names, never the live registry, so a tool registered or
removed mid-turn cannot change what an in-flight call means.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections import OrderedDict
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from enum import Enum
from pathlib import Path
from types import MappingProxyType
from typing import Any, Protocol

from tether.core.services import Services
from tether.protocol.llm import ToolSpec
from tether.protocol.messages import ImagePart


class Effect(Enum):
    """What a tool may do to the world; drives default permissions and batch scheduling."""

    READ = "read"  # no effects: may run concurrently with other reads
    WRITE = "write"  # writes files: serialised per path
    EXEC = "exec"  # runs programs: serialised under one global lock
    NETWORK = "network"


@dataclass(frozen=True, slots=True)
class ToolResult:
    output: str
    is_error: bool = False
    stdout: tuple[str, ...] | None = None
    stderr: tuple[str, ...] | None = None
    images: tuple[ImagePart, ...] = ()  # shown to the model beside the text (ViewImage, MCP)

    @property
    def status(self) -> str:
        return "error" if self.is_error else "success"


@dataclass(slots=True)
class ToolRunContext:
    """What a running tool may know about its surroundings (no globals)."""

    cwd: Path
    tool_call_id: str
    abort: asyncio.Event = field(default_factory=asyncio.Event)
    scratch_dir: Path | None = None  # background task logs, overflow files
    env: Mapping[str, str] | None = None  # extra environment for launched programs
    services: Services = field(default_factory=Services)
    # Admitted by nothing but the read-only auto-allow: a shell tool must run it inside the
    # read-only confinement sandbox (services.confinement) or not at all.
    confined: bool = False
    judged_paths: tuple[str, ...] = ()  # what the permission decision saw (Decision.judged)


class Tool(Protocol):
    name: str
    description: str
    parameters: dict[str, Any]  # JSON schema (type: object)
    effect: Effect

    def paths(self, args: Mapping[str, Any], cwd: Path) -> list[Path]:
        """Absolute paths this call would touch (for permission checks and write ordering)."""
        ...

    async def run(self, args: Mapping[str, Any], ctx: ToolRunContext) -> ToolResult: ...


class ToolRegistry:
    """Named tools; `register` returns a disposer; replacing a name needs `override=True`."""

    def __init__(self) -> None:
        self._tools: dict[str, Tool] = {}
        # The tools as they are, read-only, shared by every snapshot until the next change.
        self._frozen: Mapping[str, Tool] | None = None

    def register(self, tool: Tool, *, override: bool = False) -> Callable[[], None]:
        if tool.name in self._tools and not override:
            raise ValueError(f"tool {tool.name!r} is already registered (pass override=True)")
        previous = self._tools.get(tool.name)
        self._tools[tool.name] = tool
        self._frozen = None

        def dispose() -> None:
            if self._tools.get(tool.name) is tool:
                if previous is not None:
                    self._tools[tool.name] = previous
                else:
                    del self._tools[tool.name]
                self._frozen = None

        return dispose

    def get(self, name: str) -> Tool | None:
        return self._tools.get(name)

    def names(self) -> list[str]:
        return list(self._tools)

    def filtered(self, allow: Callable[[str], bool]) -> ToolRegistry:
        out = ToolRegistry()
        out._tools = {n: t for n, t in self._tools.items() if allow(n)}
        return out

    def tools(self) -> Mapping[str, Tool]:
        """The tools now, read-only: one copy shared until a tool is registered or disposed
        (every send's snapshot copied the dict, ~0.6 KB kept up to 4,096 times per
        conversation in a long-lived server)."""
        if self._frozen is None:
            self._frozen = MappingProxyType(dict(self._tools))
        return self._frozen


@dataclass(frozen=True, slots=True)
class ToolContext:
    """One send's view of the tools, the working directory and the permission mode."""

    id: str
    tools: Mapping[str, Tool]
    cwd: Path
    permission_mode: str

    def specs(self) -> tuple[ToolSpec, ...]:
        return tuple(ToolSpec(t.name, t.description, t.parameters) for t in self.tools.values())


class ToolContextStore:
    """Snapshots by id, least recently used evicted past `capacity` (the reference keeps 4096)."""

    def __init__(self, capacity: int = 4096) -> None:
        self._capacity = capacity
        self._items: OrderedDict[str, ToolContext] = OrderedDict()
        self._counter = itertools.count(1)

    def snapshot(self, registry: ToolRegistry, cwd: Path, permission_mode: str) -> ToolContext:
        ctx_id = f"ctx-{int(time.time() * 1000)}-{next(self._counter)}"
        ctx = ToolContext(ctx_id, registry.tools(), cwd, permission_mode)
        self._items[ctx_id] = ctx
        while len(self._items) > self._capacity:
            self._items.popitem(last=False)
        return ctx

    def get(self, ctx_id: str) -> ToolContext | None:
        ctx = self._items.get(ctx_id)
        if ctx is not None:
            self._items.move_to_end(ctx_id)
        return ctx
