"""Git branches of a workspace for an App Server client: list them (newest commit first) and
check one out, with git run in the folder as the user would run it (its hooks and config
included, which is why the server offers this to unscoped connections only)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any

from tether.errors import UsageError

GIT_TIMEOUT_S = 30


def _git(cwd: Path, *args: str) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env["GIT_TERMINAL_PROMPT"] = "0"
    try:
        done = subprocess.run(["git", *args], cwd=cwd, env=env, capture_output=True,
                              timeout=GIT_TIMEOUT_S, check=False)
    except FileNotFoundError:
        raise UsageError("git is not installed on the server") from None
    except subprocess.TimeoutExpired:
        raise UsageError(f"git {args[0]} took longer than {GIT_TIMEOUT_S}s in {cwd}") from None
    if done.returncode != 0:
        why = done.stderr.decode("utf-8", "replace").strip() or f"exit {done.returncode}"
        raise UsageError(f"git {args[0]} in {cwd}: {why}")
    return done.stdout.decode("utf-8", "replace")


def search_branches(cwd: Path, query: str, max_results: int = 20) -> list[dict[str, Any]]:
    """Local and remote branches whose name holds `query` (case-insensitive)."""
    out = _git(cwd, "for-each-ref", "--sort=-committerdate",
               "--format=%(HEAD)%00%(refname)%00%(refname:short)", "refs/heads", "refs/remotes")
    needle = query.lower()
    rows = []
    for line in out.splitlines():
        head, ref, short = (line.split("\0") + ["", "", ""])[:3]
        if ref.endswith("/HEAD") or needle not in short.lower():
            continue
        rows.append({"name": short, "is_current": head == "*",
                     "is_remote": ref.startswith("refs/remotes/")})
    return rows[:max_results]


def checkout_branch(cwd: Path, branch: str, *, create: bool = False) -> str:
    if not branch or branch.startswith("-"):
        raise UsageError(f"branch {branch!r} is not a branch name")
    _git(cwd, "check-ref-format", "--branch", branch)
    _git(cwd, "switch", *(["-c"] if create else []), branch)
    return _git(cwd, "branch", "--show-current").strip() or branch
