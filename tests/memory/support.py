"""Helpers for the memory tests: a fresh MemFS, git run the way a user would, a tool call."""

from __future__ import annotations

import asyncio
import os
import subprocess
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tether.core.tools import ToolResult, ToolRunContext
from tether.memory.memfs import MemFS
from tether.tools.memory import MemoryTool

AGENT = "agent-local-test"


def open_memfs(home: Path, agent_id: str = AGENT) -> MemFS:
    return MemFS.open(home, agent_id, agent_name="Tester")


def git(root: Path, *args: str) -> str:
    """Plain git with a throwaway identity, as a shell command in the repo would run it."""
    env = {**os.environ, "GIT_AUTHOR_NAME": "u", "GIT_AUTHOR_EMAIL": "u@x", "GIT_COMMITTER_NAME": "u",
           "GIT_COMMITTER_EMAIL": "u@x", "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1"}
    return subprocess.run(["git", *args], cwd=root, env=env, check=True, capture_output=True, text=True).stdout


def commit_count(memfs: MemFS) -> int:
    return int(git(memfs.root, "rev-list", "--count", "HEAD").strip())


def call(memfs: MemFS, args: Mapping[str, Any]) -> ToolResult:
    ctx = ToolRunContext(cwd=memfs.root.parent, tool_call_id="call-1")
    return asyncio.run(MemoryTool(memfs).run(args, ctx))
