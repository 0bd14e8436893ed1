"""Shared helpers for the built-in tool tests: run a tool once, check whether a pid is dead."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tether.core.services import Services
from tether.core.tools import Tool, ToolResult, ToolRunContext


def make_ctx(cwd: Path, **kwargs: Any) -> ToolRunContext:
    """A run context; `services={"name": service}` is the test's shorthand for `Services(...)`."""
    services = kwargs.pop("services", None)
    if isinstance(services, dict):
        services = Services(**services)
    return ToolRunContext(cwd=cwd, tool_call_id=kwargs.pop("tool_call_id", "call-1"),
                          services=services or Services(), **kwargs)


def run_tool(tool: Tool, args: Mapping[str, Any], cwd: Path, **ctx_kwargs: Any) -> ToolResult:
    return asyncio.run(tool.run(args, make_ctx(cwd, **ctx_kwargs)))


def pid_dead(pid: int) -> bool:
    """Gone, or a zombie (this machine's init does not reap orphans; a zombie runs nothing)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as handle:
            stat = handle.read()
    except FileNotFoundError:
        return True
    return stat[stat.rfind(b")") + 2 :].split()[0] == b"Z"


def live_children() -> set[int]:
    """This process's children that are not zombies."""
    me = os.getpid()
    kids: set[int] = set()
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat", "rb") as handle:
                stat = handle.read()
        except OSError:
            continue
        fields = stat[stat.rfind(b")") + 2 :].split()
        if int(fields[1]) == me and fields[0] != b"Z":
            kids.add(int(name))
    return kids
