"""Folder trust: project settings that widen permissions or run code wait until the user agrees.

Trust is keyed on the canonical folder path (symlinks resolved, so a link into a trusted folder
or `.git/commondir` games do not transfer it) and bound to a digest of the folder's settings
files: edit them after trusting and the folder is untrusted again until you re-trust it.

The store is `$TETHER_HOME/trusted-folders.json`:
    {"version": 1, "folders": {"/abs/path": {"digest": "sha256:…", "trusted_at": "…"}}}
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

import orjson

from tether.errors import UsageError

TrustState = Literal["trusted", "untrusted", "changed"]
PROJECT_FILES = (".tether/settings.json", ".tether/settings.local.json")


# Directories whose code or instructions run once the folder is trusted: any change re-locks it.
PROJECT_DIRS = (".tether/mods", ".tether/skills", ".tether/agents", ".tether/hooks")


def folder_digest(folder: Path, files: Iterable[str] = PROJECT_FILES) -> str:
    """sha256 over the names and bytes of the folder's project files (missing ones count too)
    and of every file under its mods, skills, agents and hooks directories."""
    h = hashlib.sha256()
    names = list(files)
    for directory in PROJECT_DIRS:
        root = folder / directory
        if root.is_dir():
            names.extend(
                str(p.relative_to(folder)) for p in sorted(root.rglob("*"))
                if p.is_file() or p.is_symlink()
            )
    for name in names:
        h.update(name.encode() + b"\0")
        path = folder / name
        try:
            h.update(os.readlink(path).encode() if path.is_symlink() else path.read_bytes())
        except FileNotFoundError:
            h.update(b"\0missing")
        h.update(b"\0")
    return "sha256:" + h.hexdigest()


class TrustStore:
    def __init__(self, home: Path) -> None:
        self.path = home / "trusted-folders.json"

    def _load(self) -> dict[str, dict[str, str]]:
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

    def state(self, folder: Path) -> TrustState:
        entry = self._load().get(str(folder.resolve()))
        if not isinstance(entry, dict):
            return "untrusted"
        return "trusted" if entry.get("digest") == folder_digest(folder.resolve()) else "changed"

    def trust(self, folder: Path) -> str:
        canonical = folder.resolve()
        folders = self._load()
        digest = folder_digest(canonical)
        folders[str(canonical)] = {
            "digest": digest,
            "trusted_at": datetime.now(UTC).isoformat(timespec="seconds"),
        }
        self._save(folders)
        return digest

    def revoke(self, folder: Path) -> bool:
        folders = self._load()
        removed = folders.pop(str(folder.resolve()), None) is not None
        if removed:
            self._save(folders)
        return removed

    def folders(self) -> dict[str, dict[str, str]]:
        return self._load()

    def _save(self, folders: dict[str, dict[str, str]]) -> None:
        from tether.backends.local.locks import write_atomic

        self.path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(self.path, orjson.dumps({"version": 1, "folders": folders}, option=orjson.OPT_INDENT_2))
