"""Find in files for a client of the App Server (`grep_in_files`): line-level matches of a
literal or a regular expression under a workspace folder, with the line, the match's columns
and the lines around it, walking only what `files_ops.Workspace` shows (the Read tool's
boundary: no tether state, no secrets, no symlink out)."""

from __future__ import annotations

import fnmatch
import os
import re
import stat
from typing import Any

from tether.errors import UsageError
from tether.runtime.manage.files_ops import SEARCH_LIMIT, SKIP_DIRS, Workspace

MAX_GREP_BYTES = 2 * 1024 * 1024  # larger files are skipped (logs, bundles)


def grep(
    ws: Workspace, query: str, *, is_regex: bool = False, case_sensitive: bool = False,
    whole_word: bool = False, glob: str = "", cwd: str | None = None, max_results: int = 500,
    context_lines: int = 2,
) -> dict[str, Any]:
    """`{matches[{path, line, column, column_end, text, before?, after?}], total_matches,
    total_files, truncated}`: one entry per matching line (its first match), paths relative
    to the searched folder, at most `max_results` of them."""
    if not query:
        raise UsageError("'query' is required (the text or pattern to find)")
    pattern = _pattern(query, is_regex=is_regex, case_sensitive=case_sensitive,
                       whole_word=whole_word)
    top = cwd or (ws.roots[0] if ws.roots else "/")  # no root: check() says there is none
    _, real = ws.check(top, "cwd")
    matches: list[dict[str, Any]] = []
    total = files_hit = walked = 0
    for folder, dirs, files in os.walk(real):
        dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS
                         and ws.visible(os.path.join(folder, d)))
        for name in sorted(files):
            walked += 1
            full = os.path.join(folder, name)
            rel = os.path.relpath(full, real)
            if glob and not _globbed(rel, glob):
                continue
            lines = _lines(ws, full)
            if lines is None:
                continue
            hit = False
            for n, text in enumerate(lines):
                found = pattern.search(text)
                if found is None:
                    continue
                hit, total = True, total + 1
                if len(matches) >= max_results:
                    continue
                entry: dict[str, Any] = {"path": rel, "line": n + 1, "column": found.start() + 1,
                                         "column_end": found.end() + 1, "text": text}
                if context_lines:
                    entry["before"] = lines[max(0, n - context_lines):n]
                    entry["after"] = lines[n + 1:n + 1 + context_lines]
                matches.append(entry)
            files_hit += hit
        if walked >= SEARCH_LIMIT:
            break
    return {"matches": matches, "total_matches": total, "total_files": files_hit,
            "truncated": total > len(matches) or walked >= SEARCH_LIMIT}


def _pattern(query: str, *, is_regex: bool, case_sensitive: bool, whole_word: bool
             ) -> re.Pattern[str]:
    body = query if is_regex else re.escape(query)
    if whole_word:
        body = rf"\b(?:{body})\b"
    try:
        return re.compile(body, 0 if case_sensitive else re.IGNORECASE)
    except re.error as exc:
        raise UsageError(f"'query' is not a valid regular expression ({exc})") from None


def _globbed(rel: str, glob: str) -> bool:
    """`*.tsx` matches a file name anywhere; a glob with `/` matches the relative path, `**/`
    standing for any number of folders (none too)."""
    if "/" not in glob:
        return fnmatch.fnmatchcase(os.path.basename(rel), glob)
    return fnmatch.fnmatchcase(rel, glob) or fnmatch.fnmatchcase(rel, glob.replace("**/", ""))


def _lines(ws: Workspace, full: str) -> list[str] | None:
    """The file's lines when the walk shows it and it is a text file of sensible size."""
    if os.path.islink(full) or not ws.visible(full):
        return None
    try:
        fd = os.open(full, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_size > MAX_GREP_BYTES:
            return None
        # A hard link to a file of tether's state is refused as read_file refuses it.
        if ws.boundary.alias_refusal("read_file", full, info, os.path.realpath(full)):
            return None
        with os.fdopen(fd, "rb") as handle:
            fd = -1
            data = handle.read(MAX_GREP_BYTES + 1)
    except OSError:
        return None
    finally:
        if fd >= 0:
            os.close(fd)
    if b"\0" in data[:8192]:
        return None  # binary
    return data.decode("utf-8", errors="replace").splitlines()
