"""Folder trust: project settings that widen permissions or run code wait until the user agrees.

Trust is keyed on the canonical folder path (symlinks resolved, so a link into a trusted folder
or `.git/commondir` games do not transfer it) and bound to what would run there, not only to
the settings bytes (issue 14): the project settings files and `.mcp.json`; every file under
`.tether/mods`, `.tether/skills`, `.tether/agents` and `.tether/hooks`, read the way the loaders
read them (symlinked files and directories followed, so a mod directory behind a symlink is
hashed where it really is); and every file inside the folder that a project hook's command
names (`./check.sh`, `python3 .tether/hooks/guard.py`, `"$TETHER_WORKING_DIR"/x.sh`). Change
any of them and the folder is untrusted again until re-trusted; `explain()` says which file.

Hashing is cheap on repeat: a file's content hash is reused while its (device, inode, size,
mtime, ctime) are unchanged (ctime moves on every write and cannot be set back by a user), in
`$TETHER_HOME/trust-cache.json`. In `__pycache__` only bytecode Python would run without
checking it against the source (unchecked hash-based pycs) is part of the digest: the pycs
Python writes when a mod is imported must not untrust the folder.

The store is `$TETHER_HOME/trusted-folders.json`:
    {"version": 1, "folders": {"/abs/path": {"digest": "sha256:…", "trusted_at": "…",
                                             "format": 2, "files": {"name": "sha256:…"}}}}
"""

from __future__ import annotations

import hashlib
import os
import re
import stat
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

import orjson

from tether.errors import UsageError

TrustState = Literal["trusted", "untrusted", "changed"]
SETTINGS_FILES = (".tether/settings.json", ".tether/settings.local.json")
PROJECT_FILES = (*SETTINGS_FILES, ".mcp.json")
# Directories whose code or instructions run once the folder is trusted: any change re-locks it.
PROJECT_DIRS = (".tether/mods", ".tether/skills", ".tether/agents", ".tether/hooks")
FORMAT = 2  # 1: settings bytes and symlink texts only
MISSING = "missing"
_MAX_CACHE_ENTRIES = 20_000
# Words of a hook command that could name a file: split on shell operators and `=`.
_WORD_SPLIT = re.compile(r"[;&|<>()`\s=]+")
_FOLDER_VARS = ("TETHER_WORKING_DIR", "USER_CWD", "CLAUDE_PROJECT_DIR", "PWD")

Manifest = dict[str, str]  # name (relative to the folder) -> "sha256:…" | "missing" | "special:…"


# --- what trust binds to --------------------------------------------------------------------


def folder_manifest(folder: Path, cache: HashCache | None = None) -> Manifest:
    """Every file trust binds to in `folder` (canonical), with its content hash."""
    cache = cache if cache is not None else HashCache(None)
    out: Manifest = {}
    for name in PROJECT_FILES:
        out[name] = cache.file_hash(folder / name)
    for directory in PROJECT_DIRS:
        for name, found in _walk(str(folder / directory), directory):
            out[name] = cache.file_hash(found)
    for script in hook_files(folder):
        out.setdefault(f"hook:{script.relative_to(folder)}", cache.file_hash(script))
    return out


def manifest_digest(manifest: Manifest) -> str:
    h = hashlib.sha256(f"format {FORMAT}\0".encode())
    for name in sorted(manifest):
        h.update(name.encode("utf-8", "surrogateescape") + b"\0" + manifest[name].encode() + b"\0")
    return "sha256:" + h.hexdigest()


def _walk(root: str, name: str) -> Iterator[tuple[str, str]]:
    """(name, path) of the files under `root` as a loader sees them: symlinked directories
    followed (each real directory once, so a link loop ends), `__pycache__` skipped, in a
    stable order. Plain strings: pathlib costs more than the hashing on a warm cache."""
    seen: set[tuple[int, int]] = set()

    def visit(directory: str, label: str) -> Iterator[tuple[str, str]]:
        try:
            info = os.stat(directory)
        except OSError:
            return
        if not stat.S_ISDIR(info.st_mode) or (info.st_dev, info.st_ino) in seen:
            return
        seen.add((info.st_dev, info.st_ino))
        try:
            entries = sorted(os.scandir(directory), key=lambda e: e.name)
        except OSError:
            return
        for entry in entries:
            try:
                is_dir = entry.is_dir(follow_symlinks=True)
            except OSError:
                is_dir = False
            child = f"{label}/{entry.name}"
            if is_dir:
                if entry.name == "__pycache__":
                    yield from _unchecked_pycs(entry.path, child)
                else:
                    yield from visit(entry.path, child)
            else:
                yield child, entry.path  # files, dangling links, special files: hashed as they are

    yield from visit(root, name)


def _unchecked_pycs(directory: str, label: str) -> Iterator[tuple[str, str]]:
    """The bytecode in a `__pycache__` that Python would run without looking at the source:
    unchecked hash-based pycs (PEP 552 flags == 1). The timestamp pycs Python writes itself on
    import (checked against the source's mtime and size) and checked-hash ones are left out, so
    importing a trusted mod does not untrust its folder."""
    try:
        entries = sorted(os.scandir(directory), key=lambda e: e.name)
    except OSError:
        return
    for entry in entries:
        try:
            if not entry.is_file(follow_symlinks=True):
                yield f"{label}/{entry.name}", entry.path
                continue
            fd = os.open(entry.path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
            try:
                header = os.read(fd, 8)
            finally:
                os.close(fd)
        except OSError:
            continue
        if len(header) < 8 or int.from_bytes(header[4:8], "little") == 1:
            yield f"{label}/{entry.name}", entry.path


def hook_files(folder: Path) -> list[Path]:
    """Files inside `folder` that the project settings' hook commands name (the spelled path
    must be inside the folder; a symlink there is hashed at its target)."""
    found: dict[Path, None] = {}
    for name in SETTINGS_FILES:
        try:
            data = orjson.loads((folder / name).read_bytes())
        except (OSError, orjson.JSONDecodeError):
            continue  # missing or broken: its bytes are in the digest already
        for command in _hook_commands(data.get("hooks") if isinstance(data, dict) else None):
            for path in _named_files(command, folder):
                found[path] = None
    return list(found)


def _hook_commands(hooks: Any) -> Iterator[str]:
    if not isinstance(hooks, dict):
        return
    for groups in hooks.values():
        for group in groups if isinstance(groups, list) else ():
            entries = group.get("hooks") if isinstance(group, dict) else None
            for hook in entries if isinstance(entries, list) else ():
                if isinstance(hook, dict) and isinstance(hook.get("command"), str):
                    yield hook["command"]


def _named_files(command: str, folder: Path) -> Iterator[Path]:
    import shlex  # only folders with project hooks get here

    try:
        words = shlex.split(command, comments=True)
    except ValueError:  # unbalanced quotes: the plain words still name the files
        words = command.split()
    for word in words:
        for piece in _WORD_SPLIT.split(word):
            if not piece or piece.startswith("-"):
                continue
            for var in _FOLDER_VARS:
                piece = piece.replace("${" + var + "}", str(folder)).replace("$" + var, str(folder))
            if "$" in piece or "\0" in piece:
                continue
            path = Path(os.path.normpath(folder / os.path.expanduser(piece)))
            if path != folder and path.is_relative_to(folder) and _is_file(path):
                yield path


def _is_file(path: Path) -> bool:
    try:
        return stat.S_ISREG(path.stat().st_mode)
    except (OSError, ValueError):
        return False


class HashCache:
    """Content hashes keyed by (device, inode, size, mtime, ctime), kept in `path` (None: for
    this call only). Special files are never opened (a FIFO would hang the run)."""

    def __init__(self, path: Path | None) -> None:
        self.path = path
        self.entries: dict[str, list[Any]] = {}
        self.dirty = False
        if path is not None:
            try:
                raw = orjson.loads(path.read_bytes())
                if isinstance(raw, dict):
                    self.entries = raw
            except (OSError, orjson.JSONDecodeError):
                pass

    def file_hash(self, path: Path | str) -> str:
        try:
            info = os.stat(path)
        except FileNotFoundError:
            return "dangling-link" if os.path.islink(path) else MISSING
        except OSError as exc:
            return f"unreadable:{exc.errno}"
        if not stat.S_ISREG(info.st_mode):
            return "directory" if stat.S_ISDIR(info.st_mode) else f"special:{stat.S_IFMT(info.st_mode):o}"
        key = [info.st_dev, info.st_ino, info.st_size, info.st_mtime_ns, info.st_ctime_ns]
        name = str(path)
        cached = self.entries.get(name)
        if isinstance(cached, list) and cached[:5] == key and isinstance(cached[5], str):
            return cached[5]
        h = hashlib.sha256()
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
            with os.fdopen(fd, "rb") as f:
                if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):  # swapped since the stat
                    return "special:raced"
                for block in iter(lambda: f.read(1 << 20), b""):
                    h.update(block)
        except OSError as exc:
            return f"unreadable:{exc.errno}"
        digest = "sha256:" + h.hexdigest()
        self.entries[name] = [*key, digest]
        self.dirty = True
        return digest

    def save(self) -> None:
        if self.path is None or not self.dirty:
            return
        from tether.backends.local.locks import write_atomic

        entries = self.entries
        if len(entries) > _MAX_CACHE_ENTRIES:  # keep the newest (insertion order)
            entries = dict(list(entries.items())[-_MAX_CACHE_ENTRIES:])
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            write_atomic(self.path, orjson.dumps(entries))
        except OSError:
            pass  # a cache that cannot be written only costs time
        self.dirty = False


# --- the store --------------------------------------------------------------------------------


class TrustStore:
    def __init__(self, home: Path) -> None:
        self.path = home / "trusted-folders.json"
        self.cache_path = home / "trust-cache.json"

    def _load(self) -> dict[str, dict[str, Any]]:
        try:
            raw = orjson.loads(self.path.read_bytes())
        except FileNotFoundError:
            return {}
        except orjson.JSONDecodeError as exc:
            raise UsageError(f"{self.path}: not valid JSON ({exc}); fix or delete it") from None
        folders = raw.get("folders") if isinstance(raw, dict) else None
        if not isinstance(folders, dict):
            raise UsageError(f"{self.path}: expected {{\"folders\": {{…}}}}; fix or delete it")
        return folders

    def manifest(self, folder: Path) -> Manifest:
        cache = HashCache(self.cache_path)
        try:
            return folder_manifest(folder.resolve(), cache)
        finally:
            cache.save()

    def state(self, folder: Path) -> TrustState:
        entry = self._load().get(str(folder.resolve()))
        if not isinstance(entry, dict):
            return "untrusted"
        return "trusted" if entry.get("digest") == manifest_digest(self.manifest(folder)) else "changed"

    def explain(self, folder: Path) -> list[str]:
        """Why a folder is not trusted as it is now: one line per file that changed since."""
        entry = self._load().get(str(folder.resolve()))
        if not isinstance(entry, dict):
            return ["this folder was never trusted"]
        now = self.manifest(folder)
        if entry.get("digest") == manifest_digest(now):
            return []
        then = entry.get("files")
        if entry.get("format") != FORMAT or not isinstance(then, dict):
            return ["it was trusted before tether bound trust to hooks, mods and skills; "
                    "run `tether trust` again"]
        lines = []
        for name in sorted(set(then) | set(now)):
            before, after = then.get(name, MISSING), now.get(name, MISSING)
            if before == after:
                continue
            what = "added" if before == MISSING else "removed" if after == MISSING else "changed"
            lines.append(f"{name}: {what}")
        return lines or ["the trusted files changed"]

    def trust(self, folder: Path) -> str:
        canonical = folder.resolve()
        folders = self._load()
        files = self.manifest(canonical)
        digest = manifest_digest(files)
        folders[str(canonical)] = {
            "digest": digest,
            "trusted_at": datetime.now(UTC).isoformat(timespec="seconds"),
            "format": FORMAT,
            "files": files,
        }
        self._save(folders)
        return digest

    def revoke(self, folder: Path) -> bool:
        folders = self._load()
        removed = folders.pop(str(folder.resolve()), None) is not None
        if removed:
            self._save(folders)
        return removed

    def folders(self) -> dict[str, dict[str, Any]]:
        return self._load()

    def _save(self, folders: dict[str, dict[str, Any]]) -> None:
        from tether.backends.local.locks import write_atomic

        self.path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(self.path, orjson.dumps({"version": 1, "folders": folders}, option=orjson.OPT_INDENT_2))
