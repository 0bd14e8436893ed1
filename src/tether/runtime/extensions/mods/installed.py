"""The `tether.mods` entry points of installed packages, cached in `$TETHER_HOME/cache/` so a run
that finds nothing new skips importing `importlib.metadata` and scanning every distribution.

The cache is keyed by a fingerprint of `sys.path`: each existing entry with its `st_mtime_ns`.
Installing or removing a package adds or removes a `*.dist-info` directory, which changes its
site directory's mtime; a new path (a `.pth` editable install, `PYTHONPATH`) changes the list.
Not seen: a metadata file rewritten in place (a legacy `*.egg-info` regenerated without a
reinstall); deleting `$TETHER_HOME/cache/mod-entry-points.json` forces a rescan.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import orjson

ENTRY_POINT_GROUP = "tether.mods"
CACHE_VERSION = 1
# A directory changed this recently may change again within the same mtime tick (1-2 s on some
# file systems), which the fingerprint could not see; such a scan is used but not cached.
_SETTLE_NS = 2_000_000_000


def cache_path(home: Path) -> Path:
    return home / "cache" / "mod-entry-points.json"


def installed_mod_entry_points(home: Path) -> list[tuple[str, str]]:
    """(name, value) of every `tether.mods` entry point, e.g. ("mine", "mine.mod:activate")."""
    path = cache_path(home)
    started_ns = time.time_ns()
    fingerprint, newest_ns = sys_path_fingerprint()
    cached = _read_cache(path, fingerprint)
    if cached is not None:
        return cached
    found = _scan()
    if newest_ns < started_ns - _SETTLE_NS:
        _write_cache(path, fingerprint, found)
    return found


def sys_path_fingerprint() -> tuple[list[list[str | int]], int]:
    """[path, st_mtime_ns] of each `sys.path` entry that exists, and the newest of those mtimes.

    `""` is the working directory, as `importlib.metadata` reads it.
    """
    fingerprint: list[list[str | int]] = []
    newest = 0
    for entry in sys.path:
        try:
            mtime = os.stat(entry or ".").st_mtime_ns
        except (OSError, ValueError):  # absent, unreadable, or a path with a NUL byte
            continue
        fingerprint.append([os.path.abspath(entry), mtime])
        newest = max(newest, mtime)
    return fingerprint, newest


def _scan() -> list[tuple[str, str]]:
    from importlib.metadata import entry_points

    return [(ep.name, ep.value) for ep in entry_points(group=ENTRY_POINT_GROUP)]


def _read_cache(path: Path, fingerprint: list[list[str | int]]) -> list[tuple[str, str]] | None:
    """The cached pairs if the file is ours, well formed and for this fingerprint; else None."""
    try:
        doc = orjson.loads(path.read_bytes())
    except (OSError, orjson.JSONDecodeError):
        return None
    if (
        not isinstance(doc, dict)
        or doc.get("version") != CACHE_VERSION
        or doc.get("fingerprint") != fingerprint
    ):
        return None
    pairs = doc.get("entry_points")
    if not isinstance(pairs, list):
        return None
    out: list[tuple[str, str]] = []
    for pair in pairs:
        if not (
            isinstance(pair, list) and len(pair) == 2 and all(isinstance(p, str) for p in pair)
        ):
            return None
        out.append((pair[0], pair[1]))
    return out


def _write_cache(
    path: Path, fingerprint: list[list[str | int]], found: list[tuple[str, str]]
) -> None:
    from tether.backends.local.locks import write_json_atomic

    doc = {"version": CACHE_VERSION, "fingerprint": fingerprint, "entry_points": found}
    try:
        write_json_atomic(path, doc)
    except OSError:
        pass  # a read-only or full home: the scan still answers, the next run scans again
