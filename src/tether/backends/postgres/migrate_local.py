"""What a TETHER_HOME holds, as `tether store migrate` reads it (`migrate_home.py` copies it):
its entries walked (folders, memory repositories, SQLite databases, files; symlinks refused),
each one's digest (a file by its bytes, a SQLite database by its rows, a repository by its
refs), a transcript split into header, entries and torn tail, records parsed, SQLite snapshots."""

from __future__ import annotations

import base64
import hashlib
import os
import sqlite3
import stat
import subprocess
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import orjson

from tether.backends.postgres import migrate as rows
from tether.backends.postgres.migrate import MigrationRefused

SQLITE_MAGIC = b"SQLite format 3\x00"
# The SQLite stores copied row for row, by their path in the home, and their tables.
ROW_DBS: dict[str, tuple[rows.Table, ...]] = {}
for _table in (*rows.TABLES, *rows.STATE_TABLES):
    ROW_DBS[_table.file] = (*ROW_DBS.get(_table.file, ()), _table)


def sequences(conn: sqlite3.Connection) -> dict[str, int]:
    """A database's AUTOINCREMENT counters (a number it never hands out again)."""
    if not conn.execute(
        "SELECT 1 FROM sqlite_master WHERE name = 'sqlite_sequence'"
    ).fetchone():
        return {}
    return {str(n): int(v) for n, v in conn.execute("SELECT name, seq FROM sqlite_sequence")}


def git(*args: str, cwd: Path | None = None) -> bytes:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env["GIT_TERMINAL_PROMPT"] = "0"
    try:
        done = subprocess.run(["git", *args], cwd=cwd, env=env, capture_output=True, check=False)
    except OSError as exc:
        raise MigrationRefused(f"cannot run git to copy the memory repository {cwd}: {exc}") from None
    if done.returncode != 0:
        raise MigrationRefused(
            f"git {' '.join(args[:2])} failed in {cwd}: {done.stderr.decode(errors='replace').strip()}"
        )
    return done.stdout


def refs_of(repo: Path) -> dict[str, str]:
    """Every ref of the repository at `repo` and its sha, HEAD as `ref: <name>` or a sha."""
    out: dict[str, str] = {}
    for line in git("for-each-ref", "--format=%(objectname) %(refname)", cwd=repo).splitlines():
        sha, name = line.decode().split(" ", 1)
        out[name] = sha
    head = (repo / ".git" / "HEAD").read_text().strip()
    out["HEAD"] = head
    return out


def _is_sqlite(path: Path) -> bool:
    with path.open("rb") as f:
        return f.read(len(SQLITE_MAGIC)) == SQLITE_MAGIC


def sqlite_digest(
    path: Path, rel: str, rows_of: Callable[[rows.Table], list[tuple[Any, ...]]] | None = None
) -> str:
    """The database at `path` by its rows; with `rows_of`, its row-copied tables as `rows_of`
    gives them instead (the store's rows, for the digest a copy out of the store must match)."""
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        h = hashlib.sha256()
        known = ROW_DBS.get(rel, ())
        for table in known:  # times to the microsecond the store keeps
            found = rows_of(table) if rows_of is not None else rows._sqlite_rows(conn, table)
            h.update(table.sqlite.encode() + b"\x00")
            h.update(rows._digest(table, found).encode() + b"\x01")
        if known:
            h.update(orjson.dumps(sequences(conn), option=orjson.OPT_SORT_KEYS))
        names = [r[0] for r in conn.execute(
            "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%'"
            " ORDER BY name"
        )]
        for name in (n for n in names if n not in {t.sqlite for t in known}):
            other = sorted(repr(r).encode() for r in conn.execute(f'SELECT * FROM "{name}"'))
            h.update(name.encode() + b"\x00" + b"\x00".join(other) + b"\x01")
        return "rows:" + h.hexdigest()
    finally:
        conn.close()


def walk(home: Path) -> Iterator[tuple[str, Path, str]]:
    """(relative path, path, kind) of everything in `home` that a migration carries: kind is
    dir, repo (a folder holding `.git`: its `.git` is not walked), sqlite or file. SQLite side
    files (-wal, -shm, -journal) are part of their database; a symlink or special file is refused."""
    sqlite_side: set[str] = set()
    for top, dirs, files in os.walk(home):
        dirs.sort()
        base = Path(top)
        if (base / ".git").is_dir() and base != home:
            dirs.remove(".git")
        for name in sorted(files):
            path = base / name
            if path.is_symlink() or not path.is_file():
                raise MigrationRefused(f"{path} is not a regular file: a home to migrate holds none")
            if _is_sqlite(path):
                sqlite_side.update(str(path) + s for s in ("-wal", "-shm", "-journal"))
        for name in sorted(dirs):
            path = base / name
            if path.is_symlink():
                raise MigrationRefused(f"{path} is a symlink: a home to migrate holds none")
            rel = path.relative_to(home).as_posix()
            yield rel, path, "repo" if (path / ".git").is_dir() else "dir"
        for name in sorted(files):
            path = base / name
            if str(path) in sqlite_side:
                continue
            rel = path.relative_to(home).as_posix()
            yield rel, path, "sqlite" if _is_sqlite(path) else "file"


def home_digests(home: Path) -> dict[str, str]:
    """What a copy of `home` must reproduce, entry by entry."""
    out: dict[str, str] = {}
    for rel, path, kind in walk(home):
        mode = stat.S_IMODE(path.stat().st_mode)
        if kind in ("dir", "repo"):
            out[rel] = f"dir:{mode:o}"
            if kind == "repo":
                refs = orjson.dumps(refs_of(path), option=orjson.OPT_SORT_KEYS)
                out[rel + "/.git"] = "refs:" + hashlib.sha256(refs).hexdigest()
        elif kind == "sqlite":
            out[rel] = f"{mode:o}:" + sqlite_digest(path, rel)
        else:
            out[rel] = f"{mode:o}:sha256:" + hashlib.sha256(path.read_bytes()).hexdigest()
    return out


def manifest_digest(digests: dict[str, str]) -> str:
    return hashlib.sha256(
        b"".join(f"{p}\x00{d}\n".encode() for p, d in sorted(digests.items()))
    ).hexdigest()


def split_transcript(path: Path) -> tuple[bytes, list[tuple[Any, bytes]], bytes]:
    """A transcript's header line, its entries (decoded, exact line) and a torn tail."""
    data = path.read_bytes()
    cut = data.find(b"\n") + 1
    if cut == 0:
        return data, [], b""
    header, body = data[:cut], data[cut:]
    lines = body.split(b"\n")
    tail = lines.pop()  # bytes after the last LF: a torn write (usually empty)
    entries: list[tuple[Any, bytes]] = []
    for n, line in enumerate(lines):
        try:
            doc = orjson.loads(line)
            entries.append((_jsonb_safe(doc) if b"\\u0000" in line else doc, line + b"\n"))
        except orjson.JSONDecodeError:
            if n == len(lines) - 1:  # a torn last line: kept as bytes, as the reader treats it
                return header, entries, line + b"\n" + tail
            raise MigrationRefused(
                f"line {n + 2} of {path} is not JSON: the transcript is damaged; run tether on"
                " the conversation (it names the damage) before migrating"
            ) from None
    return header, entries, tail


def _jsonb_safe(value: Any) -> Any:
    """`value` as PostgreSQL's jsonb can hold it: a NUL character (tool output may carry one)
    becomes U+FFFD there. Only the `entry` column sees this; `line` keeps the exact bytes."""
    if isinstance(value, str):
        return value.replace("\x00", "\ufffd")
    if isinstance(value, dict):
        return {_jsonb_safe(k): _jsonb_safe(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_jsonb_safe(v) for v in value]
    return value


def read_record(path: Path, what: str) -> tuple[bytes, dict[str, Any]]:
    raw = path.read_bytes()
    try:
        doc = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise MigrationRefused(f"{path} is not a JSON {what} record: {exc}") from None
    if type(doc) is not dict or type(doc.get("id")) is not str:
        raise MigrationRefused(f"{path} is not a {what} record (no string id)")
    return raw, _jsonb_safe(doc) if b"\\u0000" in raw else doc  # the exact bytes go in `raw`


def conversation_of(rel: str) -> str:
    name = rel.split("/")[1]
    try:
        return base64.urlsafe_b64decode(name + "=" * (-len(name) % 4)).decode()
    except ValueError:
        raise MigrationRefused(
            f"conversations/{name} is not a conversation folder (its name is not a base64url key)"
        ) from None


def snapshot(path: Path) -> bytes:
    """A consistent copy of a live SQLite database's bytes (its WAL folded in)."""
    with tempfile.TemporaryDirectory(prefix="tether-migrate-") as scratch:
        out = Path(scratch) / "snapshot.db"
        src, dst = sqlite3.connect(f"file:{path}?mode=ro", uri=True), sqlite3.connect(out)
        try:
            src.backup(dst)
        finally:
            src.close()
            dst.close()
        return out.read_bytes()
