"""Glob patterns and directory walks, as ripgrep's `--glob` understands them, in pure Python.

A pattern without a slash matches a file's name at any depth (`*.py`); a pattern with one
matches the path from the search root (`src/**/*.ts`). `**` spans directories, `{a,b}`
alternates, `[...]` is a character class. Walks never enter `.git` (or other VCS metadata) and
never follow directory symlinks, so a link loop cannot hang a search; given a `ReadBoundary` they
skip what it hides.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    from tether.tools.boundary import ReadBoundary

SKIPPED_DIRS = frozenset({".git", ".hg", ".svn"})
_DIR_FLAGS = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_CLOEXEC", 0)
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_MAGIC = re.compile(r"[*?\[{]")


def _translate(pattern: str) -> str:
    out: list[str] = []
    i, n = 0, len(pattern)
    while i < n:
        c = pattern[i]
        if c == "*":
            if pattern.startswith("**", i):
                j = i + 2
                at_segment_start = i == 0 or pattern[i - 1] == "/"
                if at_segment_start and j < n and pattern[j] == "/":
                    out.append("(?:[^/]*/)*")  # `**/`: zero or more directories
                    i = j + 1
                    continue
                if at_segment_start and j == n:
                    out.append(".*")  # trailing `**`: everything below
                    i = j
                    continue
                out.append("[^/]*")
                i = j
                continue
            out.append("[^/]*")
        elif c == "?":
            out.append("[^/]")
        elif c == "[":
            end = pattern.find("]", i + 2 if pattern[i + 1 : i + 2] in ("!", "^") else i + 1)
            if end == -1:
                out.append(re.escape(c))
            else:
                body = pattern[i + 1 : end]
                negate = body[:1] in ("!", "^")
                if negate:
                    body = body[1:]
                body = body.replace("\\", "\\\\")
                out.append(f"[{'^' if negate else ''}{body}]")
                i = end
        elif c == "{":
            end, alternatives = _split_braces(pattern, i)
            if end == -1:
                out.append(re.escape(c))
            else:
                out.append("(?:" + "|".join(_translate(alt) for alt in alternatives) + ")")
                i = end
        elif c == "\\" and i + 1 < n:
            i += 1
            out.append(re.escape(pattern[i]))
        else:
            out.append(re.escape(c))
        i += 1
    return "".join(out)


def _split_braces(pattern: str, start: int) -> tuple[int, list[str]]:
    """Index of the `}` closing the `{` at `start` and the top-level alternatives, or (-1, [])."""
    depth = 0
    current: list[str] = []
    alternatives: list[str] = []
    for index in range(start + 1, len(pattern)):
        c = pattern[index]
        if c == "{":
            depth += 1
        elif c == "}":
            if depth == 0:
                alternatives.append("".join(current))
                return index, alternatives
            depth -= 1
        elif c == "," and depth == 0:
            alternatives.append("".join(current))
            current = []
            continue
        current.append(c)
    return -1, []


@dataclass(frozen=True, slots=True)
class GlobMatcher:
    """Matches paths relative to a search root (with `/` separators)."""

    regex: re.Pattern[str]
    anchored: bool  # the pattern has a slash: match the whole relative path, not the name

    @classmethod
    def compile(cls, pattern: str, *, ignore_case: bool = False) -> GlobMatcher:
        pattern = pattern.removeprefix("./")
        anchored = "/" in pattern.rstrip("/")
        pattern = pattern.lstrip("/") if anchored else pattern.rstrip("/")
        flags = re.IGNORECASE if ignore_case else 0
        try:
            return cls(re.compile(rf"\A{_translate(pattern)}\Z", flags | re.DOTALL), anchored)
        except RecursionError:  # `{{{…}}}` thousands deep: a clear error, not a traceback
            raise re.error("braces or groups are nested too deeply") from None

    def matches(self, relative: str) -> bool:
        target = relative if self.anchored else relative.rsplit("/", 1)[-1]
        return self.regex.match(target) is not None


def split_literal_root(pattern: str, base: Path) -> tuple[Path, str]:
    """Move a pattern's leading literal directories into the root: (`/a/b`, `**/*.py`).

    An absolute pattern becomes relative to its own literal prefix, so `/repo/src/**/*.py` walks
    only `/repo/src`.
    """
    parts = pattern.split("/")
    root = Path("/") if pattern.startswith("/") else base
    if pattern.startswith("/"):
        parts = parts[1:]
    taken = 0
    for part in parts[:-1]:
        if _MAGIC.search(part):
            break
        taken += 1
    if taken:
        root = Path(os.path.normpath(root.joinpath(*parts[:taken])))
    rest = "/".join(parts[taken:])
    # A pattern that was anchored by its prefix stays anchored once the prefix is removed.
    if taken and "/" not in rest:
        rest = "/" + rest
    return root, rest


class WalkedFile(NamedTuple):
    """A regular file a walk found: its path as spelled from the root, and its real path."""

    relative: str  # from the walk's root, `/`-separated
    path: str  # the root joined with `relative`
    real: str  # where it is (a symlink's target for linked files)
    entry: os.DirEntry[str]  # stat() works while the walk is at this file's directory


def _real_of(fd: int) -> str | None:
    try:
        real = os.readlink(f"/proc/self/fd/{fd}")
    except OSError:
        return None
    return real if real.startswith("/") else None


def walk_files(
    root: Path,
    *,
    include_hidden: bool = True,
    skip_dir: Callable[[str, str], bool] | None = None,
    should_stop: Callable[[], bool] | None = None,
    boundary: ReadBoundary | None = None,
) -> Iterator[WalkedFile]:
    """Every regular file below `root`, directories in name order.

    A symlinked file is listed only if its target lies inside the root (a walk never leaves its
    tree through a link), and with a `boundary`, what it hides is never listed: hidden
    directories are not entered. Each directory below the root is
    opened with O_NOFOLLOW and its real path checked before it is listed, so a directory swapped
    for a symlink mid-walk is skipped, not followed.
    """
    top = os.path.realpath(root)
    if boundary is not None:
        if boundary.prune(top):
            return
        boundary = boundary.narrowed(top)
    stack: list[tuple[str, str, str]] = [(os.fspath(root), top, "")]
    while stack:
        if should_stop is not None and should_stop():
            return
        directory, real, prefix = stack.pop()
        try:
            fd = os.open(directory, _DIR_FLAGS | (_NOFOLLOW if prefix else 0))
        except OSError:
            continue  # unreadable directories are skipped, as ripgrep does
        try:
            opened = _real_of(fd)
            if opened is not None and opened != real:
                continue  # replaced while we walked: not the directory we meant to list
            try:
                with os.scandir(fd) as it:
                    entries = sorted(it, key=lambda e: e.name)
            except OSError:
                continue
            subdirs: list[tuple[str, str, str]] = []
            for entry in entries:
                if not include_hidden and entry.name.startswith("."):
                    continue
                relative = prefix + entry.name
                path = os.path.join(directory, entry.name)
                entry_real = os.path.join(real, entry.name)
                try:
                    is_dir = entry.is_dir(follow_symlinks=False)
                    is_link = not is_dir and entry.is_symlink()
                    # Regular files only (symlinks to them included): a FIFO would block a reader.
                    regular = not is_dir and entry.is_file()
                except OSError:
                    continue
                if is_dir:
                    if entry.name in SKIPPED_DIRS or (skip_dir and skip_dir(entry.name, relative)):
                        continue
                    if boundary is not None and boundary.prune(entry_real):
                        continue
                    subdirs.append((path, entry_real, relative + "/"))
                    continue
                if not regular:
                    continue
                if is_link:
                    # As ripgrep: a walk does not leave its root through a link (a repository
                    # can ship `k -> ~/.ssh/id_rsa`); links within the tree are fine.
                    entry_real = os.path.realpath(path)
                    if not (entry_real.startswith(top.rstrip("/") + "/")):
                        continue
                if boundary is not None and boundary.why_hidden(entry_real) is not None:
                    continue
                yield WalkedFile(relative, path, entry_real, entry)
            stack.extend(reversed(subdirs))
        finally:
            os.close(fd)
