"""Whether a repository's own git config would make a "read-only" git command run programs.

`git status` runs `core.fsmonitor`, `git diff` runs `diff.external` and textconv drivers, `git log`
runs `core.pager`: a hostile repository turns an inspect command into code execution (QwenLM
qwen-code#8575). Such repositories lose the read-only auto-allow; the user can still approve.
"""

from __future__ import annotations

import re
from functools import lru_cache
from pathlib import Path

_HAZARDS = re.compile(
    r"^\s*(fsmonitor|pager|editor|sshcommand|hookspath|external|textconv|command|process|clean|"
    r"smudge|askpass|gitproxy|alternateRefsCommand|helper)\s*=",
    re.I | re.M,
)


def git_hazard(directory: Path) -> str | None:
    """The config key (e.g. `core.fsmonitor`) that would run a program, or None."""
    for parent in (directory, *directory.parents):
        git = parent / ".git"
        if git.exists():
            return _config_hazard(git)
    return None


def _config_hazard(git: Path) -> str | None:
    if git.is_file():
        # a worktree or submodule: `gitdir: <path>` names the real directory
        try:
            text = git.read_text(errors="replace").strip()
        except OSError:
            return "an unreadable .git file"
        if not text.startswith("gitdir:"):
            return "an unrecognised .git file"
        git = (git.parent / text[7:].strip()).resolve()
    config = git / "config"
    try:
        stat = config.stat()
    except OSError:
        return None
    return _scan(str(config), stat.st_mtime_ns, stat.st_size)


@lru_cache(maxsize=256)
def _scan(path: str, _mtime: int, _size: int) -> str | None:
    try:
        text = Path(path).read_text(errors="replace")
    except OSError:
        return "an unreadable git config"
    if re.search(r"^\s*\[\s*include", text, re.I | re.M):
        return "configuration included from another file"
    match = _HAZARDS.search(text)
    return f"`{match.group(1)}`" if match else None
