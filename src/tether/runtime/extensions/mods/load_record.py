"""What the last session's loading did with each mod (failed, and why), for `tether mods list`.

A session that loads mods writes `$TETHER_HOME/state/mod-loads.json`: one entry per mod that
failed (keyed by its location), with the phase, the message and when; a mod that loads cleanly
clears its entry. An entry older than the mod's files is stale (the mod was edited since) and
is not shown. `mods list` also compiles a file mod without running it, so a syntax error shows
even before any session tried it.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import orjson

from tether.runtime.extensions.mods.engine import Diagnostic, ModSpec


def record_path(home: Path) -> Path:
    return home / "state" / "mod-loads.json"


def read_failures(home: Path) -> dict[str, dict[str, Any]]:
    try:
        data = orjson.loads(record_path(home).read_bytes())
    except (FileNotFoundError, orjson.JSONDecodeError):
        return {}
    if not isinstance(data, dict):
        return {}
    return {k: v for k, v in data.items() if isinstance(v, dict)}


def _write(home: Path, failures: dict[str, dict[str, Any]]) -> None:
    path = record_path(home)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.tmp-{os.getpid()}")
    tmp.write_bytes(orjson.dumps(failures, option=orjson.OPT_INDENT_2 | orjson.OPT_SORT_KEYS))
    os.replace(tmp, path)


def record_load(home: Path, loaded: Iterable[ModSpec], failed: Iterable[tuple[ModSpec, Diagnostic]]) -> None:
    """After a load: the mods that failed get their entry, the ones that loaded lose theirs.
    Written only when something changed (a session start pays one small read otherwise)."""
    before = read_failures(home)
    after = dict(before)
    for spec in loaded:
        after.pop(spec.location, None)
    now = time.time()
    for spec, diagnostic in failed:
        after[spec.location] = {"name": spec.name, "phase": diagnostic.phase,
                                "message": diagnostic.message, "at": now}
    if after != before:
        try:
            _write(home, after)
        except OSError:
            pass  # the listing is a convenience; the session itself already printed the failure


def _newest_mtime(path: Path) -> float:
    if path.is_dir():
        return max((p.stat().st_mtime for p in path.rglob("*.py")), default=path.stat().st_mtime)
    return path.stat().st_mtime


def syntax_error(spec: ModSpec) -> str | None:
    """A file or package mod's first syntax error, found by compiling (nothing runs)."""
    if spec.path is None:
        return None
    files = sorted(spec.path.rglob("*.py")) if spec.path.is_dir() else [spec.path]
    for file in files:
        try:
            compile(file.read_bytes(), str(file), "exec", dont_inherit=True)
        except SyntaxError as exc:
            return f"SyntaxError: {exc.msg} ({file}, line {exc.lineno})"
        except (OSError, ValueError) as exc:
            return f"{type(exc).__name__}: {exc}"
    return None


def failure_of(spec: ModSpec, failures: dict[str, dict[str, Any]]) -> str | None:
    """Why this mod does not load, as `<phase>: <message>`, or None when nothing says so."""
    broken = syntax_error(spec)
    if broken is not None:
        return f"import: {broken}"
    entry = failures.get(spec.location)
    if entry is None or entry.get("name") != spec.name:
        return None
    if spec.path is not None:
        try:
            if _newest_mtime(spec.path) > float(entry.get("at", 0)):
                return None  # edited since that session: its next load will tell
        except OSError:
            return None
    return f"{entry.get('phase', 'import')}: {entry.get('message', '')}"
