"""Hard links into tether's state: the other names of a state file that no path check can see.

A hard link is the same inode under a second name. The state guard, the file tools' boundary and
the kernel sandbox (bind mounts, Landlock) all work on paths, so `ws/notes.txt` linked to
`$TETHER_HOME/providers/anthropic.json` reads as a workspace file to each of them; file modes
belong to the inode, and the sandboxed command runs as the same user. What can be known is the
inode: `state_name_of` finds, for a file a tool opened, another name of it under the state dir
(only a file with `st_nlink > 1` on the state dir's device can have one, so ordinary files cost
one comparison); `linked_state_files` lists the sensitive state files (provider keys, the
effect checkpoints, conversations' records and scratch files) that have other names at all,
wherever those are — tether never hard-links them itself, so any is planted, and a sandboxed
command could read it through a name the sandbox cannot hide.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

# The state that holds secrets or other conversations (relative to $TETHER_HOME).
SENSITIVE = ("providers", "conversations", "tmp", "checkpoints.db", "checkpoints.db-wal",
             "checkpoints.db-shm")
MAX_FILES = 200_000  # a walk of the state dir stops here (then it answers as if found)


def _files(top: str) -> list[os.DirEntry[str]] | None:
    """Every regular file under `top` (not following links); None when there are too many."""
    out: list[os.DirEntry[str]] = []
    stack = [top]
    while stack:
        try:
            with os.scandir(stack.pop()) as it:
                for entry in it:
                    if entry.is_dir(follow_symlinks=False):
                        stack.append(entry.path)
                    elif entry.is_file(follow_symlinks=False):
                        out.append(entry)
                        if len(out) > MAX_FILES:
                            return None
        except OSError:
            continue
    return out


def linked_state_files(state: Path | str) -> list[str]:
    """The sensitive files under `state` with more than one name (`st_nlink > 1`)."""
    found: list[str] = []
    for name in SENSITIVE:
        path = os.path.join(state, name)
        try:
            info = os.lstat(path)
        except OSError:
            continue
        if stat.S_ISREG(info.st_mode):
            if info.st_nlink > 1:
                found.append(path)
            continue
        if not stat.S_ISDIR(info.st_mode):
            continue
        entries = _files(path)
        if entries is None:
            return [path]
        for entry in entries:
            try:
                if entry.stat(follow_symlinks=False).st_nlink > 1:
                    found.append(entry.path)
            except OSError:
                continue
    return found


def state_name_of(info: os.stat_result, real: str, state: Path | str) -> str | None:
    """A name under `state`, other than `real`, of the file `info` describes; None if it has none.

    `info` is the open file's `fstat`: only a regular file with other names on the state dir's
    own device can have one (hard links never cross file systems)."""
    if not stat.S_ISREG(info.st_mode) or info.st_nlink < 2:
        return None
    top = os.path.realpath(state)
    try:
        if os.stat(top).st_dev != info.st_dev:
            return None
    except OSError:
        return None
    entries = _files(top)
    if entries is None:
        return top
    for entry in entries:
        if entry.path == real:
            continue
        try:
            other = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        if other.st_ino == info.st_ino and other.st_dev == info.st_dev:
            return entry.path
    return None
