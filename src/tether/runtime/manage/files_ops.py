"""Workspace files for a client of the App Server: list a folder, read a file, a folder's tree,
search names, and (for the server's operator) write or edit a file,
only inside the workspaces it may see, and with the line the Read tool holds
(`tools/boundary.py`: no tether state, no provider keys, no device or process secrets, no hard
link to a file of tether's state), judged on the real path (a symlink cannot lead out)."""

from __future__ import annotations

import os
import stat
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tether.errors import UsageError

MAX_READ_BYTES = 10 * 1024 * 1024


class Workspace:
    """The folders a client may read under, and the file tools' boundary for tether's home."""

    def __init__(self, roots: Sequence[Path], home: Path) -> None:
        from tether.core.tools import ToolRunContext
        from tether.tools.boundary import boundary_for

        self.roots = [os.path.realpath(r) for r in roots]
        self.home = os.path.realpath(home)
        ctx = ToolRunContext(cwd=Path(roots[0]) if roots else Path("/"),
                             tool_call_id="app-server", env={"TETHER_HOME": str(home)})
        self.boundary = boundary_for(ctx)

    def check(self, raw: object, field: str = "path") -> tuple[str, str]:
        """(the path as given, its real path) when the client may open it; UsageError naming
        why not otherwise."""
        if not isinstance(raw, str) or not raw:
            raise UsageError(f"'{field}' is required (an absolute path)")
        if not os.path.isabs(raw):
            raise UsageError(f"'{field}' must be an absolute path, not {raw!r}")
        if not self.roots:
            raise UsageError(
                "this connection has no workspace yet: start a runtime (runtime_start with a cwd)"
            )
        real = os.path.realpath(raw)
        if not any(_within(real, root) for root in self.roots):
            raise UsageError(
                f"{raw} is outside this connection's workspaces ({', '.join(self.roots)})"
            )
        if _within(real, self.home):
            raise UsageError(f"{raw} is inside tether's own state ({self.home}), which is not "
                             "served to clients")
        refusal = self.boundary.refusal("read_file", raw, real)
        if refusal is not None:
            raise UsageError(refusal)
        return raw, real


    def visible(self, full: str) -> bool:
        """Whether a walk shows `full`: its real path inside a workspace, outside tether's
        state and not hidden by the boundary (a symlink out is left out, not followed)."""
        real = os.path.realpath(full)
        return (any(_within(real, root) for root in self.roots) and not _within(real, self.home)
                and self.boundary.why_hidden(real) is None)


def list_directory(
    ws: Workspace, path: str, *, include_files: bool = False, limit: int = 1000, offset: int = 0
) -> dict[str, Any]:
    shown, real = ws.check(path)
    try:
        names = sorted(os.listdir(real))
    except NotADirectoryError:
        raise UsageError(f"{shown} is not a directory") from None
    except FileNotFoundError:
        raise UsageError(f"{shown}: no such directory") from None
    folders, files = [], []
    for name in names:
        full = os.path.join(real, name)
        if not ws.visible(full):
            continue
        if os.path.isdir(full):
            folders.append(name)
        elif include_files:
            files.append(name)
    entries = [(n, True) for n in folders] + [(n, False) for n in files]
    page = entries[offset:offset + limit]
    out: dict[str, Any] = {"path": shown, "folders": [n for n, d in page if d],
                           "hasMore": offset + limit < len(entries), "total": len(entries)}
    if include_files:
        out["files"] = [n for n, d in page if not d]
    return out


def read_file(ws: Workspace, path: str) -> dict[str, Any]:
    shown, real = ws.check(path)
    try:
        fd = os.open(real, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        raise UsageError(f"{shown}: no such file") from None
    except IsADirectoryError:
        raise UsageError(f"{shown} is a directory, not a file") from None
    try:
        info = os.fstat(fd)
        if stat.S_ISDIR(info.st_mode):
            raise UsageError(f"{shown} is a directory, not a file")
        if not stat.S_ISREG(info.st_mode):
            raise UsageError(f"{shown} is not a regular file")
        alias = ws.boundary.alias_refusal("read_file", shown, info, real)
        if alias is not None:
            raise UsageError(alias)
        if info.st_size > MAX_READ_BYTES:
            raise UsageError(f"{shown} is {info.st_size} bytes; read_file serves files up to "
                             f"{MAX_READ_BYTES}")
        with os.fdopen(fd, "rb") as handle:
            fd = -1
            data = handle.read(MAX_READ_BYTES + 1)
    finally:
        if fd >= 0:
            os.close(fd)
    return {"path": shown, "content": data.decode("utf-8", errors="replace")}


def tree(ws: Workspace, path: str, depth: int) -> dict[str, Any]:
    """Entries {path (relative to `path`), type: file|dir} down to `depth` levels."""
    shown, real = ws.check(path)
    if not os.path.isdir(real):
        raise UsageError(f"{shown} is not a directory")
    entries: list[dict[str, str]] = []
    deeper = False
    frontier = [("", real)]
    for level in range(depth):
        following = []
        for rel, folder in frontier:
            try:
                names = sorted(os.listdir(folder))
            except OSError:
                continue
            for name in names:
                full = os.path.join(folder, name)
                if not ws.visible(full):
                    continue
                child = f"{rel}/{name}" if rel else name
                is_dir = os.path.isdir(full) and not os.path.islink(full)
                entries.append({"path": child, "type": "dir" if is_dir else "file"})
                if is_dir:
                    following.append((child, full))
        frontier = following
        if level == depth - 1:
            deeper = bool(following)
    return {"path": shown, "entries": entries, "has_more_depth": deeper}


def _open_for_write(ws: Workspace, shown: str, real: str, *, create: bool) -> int:
    """The file opened read-write (never through a symlink, never a hard link to tether's
    state), created when `create`; nothing is truncated before those checks."""
    if not os.path.isdir(os.path.dirname(real)):
        raise UsageError(f"{shown}: its folder does not exist")
    flags = os.O_RDWR | os.O_NOFOLLOW | (os.O_CREAT if create else 0)
    try:
        fd = os.open(real, flags, 0o644)
    except FileNotFoundError:
        raise UsageError(f"{shown}: no such file") from None
    except IsADirectoryError:
        raise UsageError(f"{shown} is a directory, not a file") from None
    info = os.fstat(fd)
    problem = None
    if not stat.S_ISREG(info.st_mode):
        problem = f"{shown} is not a regular file"
    else:
        problem = ws.boundary.alias_refusal("write_file", shown, info, real)
    if problem is not None:
        os.close(fd)
        raise UsageError(problem)
    return fd


def _replace_contents(fd: int, data: bytes) -> None:
    try:
        os.ftruncate(fd, 0)
        os.lseek(fd, 0, os.SEEK_SET)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
    finally:
        os.close(fd)


def write_file(ws: Workspace, path: str, content: str) -> dict[str, Any]:
    shown, real = ws.check(path)
    _replace_contents(_open_for_write(ws, shown, real, create=True), content.encode("utf-8"))
    return {"path": shown}


def edit_file(
    ws: Workspace, path: str, old: str, new: str, *, replace_all: bool = False,
    expected: int | None = None,
) -> dict[str, Any]:
    """Replace `old` with `new` (every occurrence with `replace_all`, else exactly one)."""
    shown, real = ws.check(path, "file_path")
    if not old:
        raise UsageError("old_string must not be empty")
    fd = _open_for_write(ws, shown, real, create=False)
    try:
        with os.fdopen(os.dup(fd), "rb") as handle:
            text = handle.read(MAX_READ_BYTES + 1).decode("utf-8")
    except UnicodeDecodeError:
        os.close(fd)
        raise UsageError(f"{shown} is not UTF-8 text") from None
    count = text.count(old)
    problem = None
    if count == 0:
        problem = f"old_string was not found in {shown}"
    elif expected is not None and count != expected:
        problem = f"old_string occurs {count} times in {shown}, not {expected}"
    elif count > 1 and not replace_all and expected is None:
        problem = (f"old_string occurs {count} times in {shown}; give more context or "
                   "replace_all")
    if problem is not None:
        os.close(fd)
        raise UsageError(problem)
    start_line = text[:text.index(old)].count("\n") + 1
    done = text.replace(old, new) if (replace_all or expected) else text.replace(old, new, 1)
    _replace_contents(fd, done.encode("utf-8"))
    replaced = count if (replace_all or expected) else 1
    return {"file_path": shown, "message": f"replaced {replaced} occurrence(s) in {shown}",
            "replacements": replaced, "start_line": start_line}


SEARCH_LIMIT = 50_000  # files walked at most per search
SKIP_DIRS = frozenset({".git", "node_modules", ".venv", "__pycache__"})


def search(ws: Workspace, query: str, *, max_results: int = 5, cwd: str | None = None
           ) -> dict[str, Any]:
    """Files whose workspace-relative path holds `query` (case-insensitive), or with an empty
    query the most recently modified; paths relative to the searched folder."""
    top = cwd or (ws.roots[0] if ws.roots else None)
    shown, real = ws.check(top, "cwd")
    needle = query.lower()
    found: list[tuple[float, str]] = []
    walked = 0
    for folder, dirs, files in os.walk(real):
        dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS
                         and ws.visible(os.path.join(folder, d)))
        for name in files:
            walked += 1
            full = os.path.join(folder, name)
            rel = os.path.relpath(full, real)
            if needle and needle not in rel.lower():
                continue
            if not ws.visible(full):
                continue
            try:
                found.append((os.stat(full).st_mtime, rel))
            except OSError:
                continue
        if walked >= SEARCH_LIMIT:
            break
    if not needle:
        found.sort(reverse=True)
    else:
        found.sort(key=lambda item: (len(item[1]), item[1]))
    return {"files": [{"path": rel, "type": "file"} for _, rel in found[:max_results]]}


def _within(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")
