"""A memory repository's history kept whole: backups as git bundles, restores that never drop a
commit the backup lacks, and merges finished with explicit resolutions.

    $TETHER_HOME/agents/<agent_id>/memory-backups/<backup id>.bundle   every ref of the repo
                                                   <backup id>.json     {id, head, created_at, reason}

A restore refuses to move `main` off a commit the backup does not contain unless forced, and a
forced one first backs the current state up, so a committed memory change is never lost. A
merge left pending (a reflection branch that conflicted with `main`) stays a branch until it is
resolved: `resolve_merge` merges it with the caller's content for each conflicted file and
commits, or aborts leaving `main` and the working tree as they were.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson

from tether.memory.memfs import MemFS, MemFSError

PENDING_PREFIX = "tether/reflection/"  # branches a reflection pass left unmerged
_BACKUP_ID = re.compile(r"^backup-[0-9TZ]+(?:-[0-9a-f]{4})?$")
_TAKE = ("ours", "theirs")


@dataclass(frozen=True, slots=True)
class Backup:
    id: str
    path: Path  # the bundle
    head: str  # main's commit when it was taken
    created_at: str
    reason: str

    def to_dict(self) -> dict[str, Any]:
        return {"id": self.id, "head": self.head, "created_at": self.created_at,
                "reason": self.reason, "path": str(self.path)}


def backups_dir(memfs: MemFS) -> Path:
    return memfs.root.parent / "memory-backups"


def create_backup(memfs: MemFS, reason: str) -> Backup:
    """Bundle every ref of the repo (main and any pending branch) under memory-backups/."""
    head = memfs.revision()
    if head is None:
        raise MemFSError(f"{memfs.root} has no commit yet: there is nothing to back up")
    now = datetime.now(UTC)
    backup_id = f"backup-{now:%Y%m%dT%H%M%S%f}Z-{os.urandom(2).hex()}"
    directory = backups_dir(memfs)
    directory.mkdir(parents=True, exist_ok=True)
    bundle = directory / f"{backup_id}.bundle"
    partial = directory / f".{backup_id}.bundle.partial"
    try:
        memfs.git("bundle", "create", "-q", str(partial), "--all")
        with open(partial, "rb") as fh:
            os.fsync(fh.fileno())
        os.replace(partial, bundle)
    finally:
        partial.unlink(missing_ok=True)
    record = Backup(backup_id, bundle, head, now.strftime("%Y-%m-%dT%H:%M:%S.%fZ"), reason)
    meta = {k: v for k, v in record.to_dict().items() if k != "path"}
    _write_synced(directory / f"{backup_id}.json", orjson.dumps(meta, option=orjson.OPT_INDENT_2))
    return record


def _write_synced(path: Path, data: bytes) -> None:
    partial = path.with_name(f".{path.name}.partial")
    with open(partial, "wb") as fh:
        fh.write(data)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(partial, path)


def list_backups(memfs: MemFS) -> list[Backup]:
    """The backups with both their bundle and their record, oldest first."""
    found = []
    for meta in sorted(backups_dir(memfs).glob("backup-*.json")):
        bundle = meta.with_suffix(".bundle")
        try:
            data = orjson.loads(meta.read_bytes())
        except (OSError, orjson.JSONDecodeError):
            continue  # a record cut by a crash: its bundle is still there to restore by path
        if bundle.is_file() and isinstance(data, dict):
            found.append(Backup(meta.stem, bundle, str(data.get("head", "")),
                                str(data.get("created_at", "")), str(data.get("reason", ""))))
    return sorted(found, key=lambda b: (b.created_at, b.id))


def find_backup(memfs: MemFS, name: str) -> Backup:
    """A backup by id (`backup-…`), or `latest`."""
    backups = list_backups(memfs)
    if name == "latest" and backups:
        return backups[-1]
    for backup in backups:
        if backup.id == name:
            return backup
    known = ", ".join(b.id for b in backups[-5:]) or "none yet (tether memory backup)"
    if not _BACKUP_ID.match(name) and name != "latest":
        raise MemFSError(f"--from {name!r} is not a backup id (backup-…) or `latest`; "
                         f"recent backups: {known}")
    raise MemFSError(f"no backup {name!r} for agent {memfs.agent_id}; recent backups: {known}")


def restore_backup(memfs: MemFS, backup: Backup, *, force: bool) -> dict[str, Any]:
    """Move `main` to the backup's commit. Refused when the working tree has uncommitted
    changes, and (without `force`) when `main` has commits the backup lacks; a forced restore
    backs the current state up first."""
    with memfs.writing():
        if memfs.status_lines():
            raise MemFSError(
                f"{memfs.root} has uncommitted changes; commit or discard them before a "
                "restore (see `tether memory diff`)"
            )
        memfs.git("bundle", "verify", "-q", str(backup.path))
        ref = "refs/tether/restore"
        memfs.git("fetch", "-q", "--no-tags", str(backup.path), f"+refs/heads/*:{ref}/*")
        try:
            if memfs.try_git("cat-file", "-e", f"{backup.head}^{{commit}}").returncode != 0:
                raise MemFSError(f"{backup.path} does not hold its commit {backup.head}; "
                                 "the bundle is damaged")
            current = memfs.revision()
            if current == backup.head:
                return {"restored": False, "from": backup.id, "head": current,
                        "dropped_commits": [], "safety_backup": None}
            dropped = _commits(memfs, f"{backup.head}..{current}") if current else []
            if dropped and not force:
                raise MemFSError(
                    f"restoring {backup.id} would drop {len(dropped)} commit(s) the backup does "
                    f"not have (newest: {dropped[0]['sha'][:7]} {dropped[0]['subject']!r}); "
                    "pass --force to restore anyway (the current memory is backed up first)"
                )
            # nothing to keep in a repo with no commit yet (one restored after it was lost)
            safety = create_backup(memfs, f"before restoring {backup.id}") if current else None
            memfs.git("reset", "-q", "--hard", backup.head)
        finally:
            fetched = memfs.try_git("for-each-ref", "--format=%(refname)", ref + "/").stdout
            for name in fetched.decode().split():
                memfs.try_git("update-ref", "-d", name)
    return {"restored": True, "from": backup.id, "head": backup.head,
            "previous_head": current, "dropped_commits": dropped,
            "safety_backup": safety.to_dict() if safety else None}


def pending_merges(memfs: MemFS) -> list[dict[str, Any]]:
    """Branches a reflection pass could not merge, each with the files that conflict."""
    out = memfs.git("for-each-ref", "--format=%(refname:short)", f"refs/heads/{PENDING_PREFIX}")
    pending = []
    for branch in out.decode().split():
        tip = memfs.branch_revision(branch)
        if tip is None or memfs.is_ancestor(tip, "HEAD"):
            continue
        preview = memfs.try_git("merge-tree", "--write-tree", "--name-only", "--no-messages",
                                "HEAD", branch)
        lines = preview.stdout.decode("utf-8", errors="replace").splitlines()
        conflicts = sorted(set(lines[1:])) if preview.returncode == 1 else []
        pending.append({"branch": branch, "head": tip, "conflicts": conflicts,
                        "commits": _commits(memfs, f"HEAD..{branch}")})
    return pending


def resolve_merge(
    memfs: MemFS, branch: str, resolutions: Mapping[str, Any], message: str | None = None
) -> dict[str, Any]:
    """Merge `branch` into main, each conflicted path taking its resolution: the file's new
    text, None to delete it, or {"take": "ours"|"theirs"}. Every conflicted path needs one and
    no other path may have one; otherwise the merge is aborted and nothing changes."""
    if memfs.branch_revision(branch) is None:
        raise MemFSError(f"no branch {branch!r} in {memfs.root}; `tether memory resolve` "
                         "without --resolutions lists the pending merges")
    with memfs.writing():
        if memfs.status_lines():
            raise MemFSError(f"{memfs.root} has uncommitted changes; commit or discard them "
                             "before resolving a merge (see `tether memory diff`)")
        before = memfs.revision()
        proc = memfs.try_git("merge", "--no-ff", "--no-commit", branch)
        merging = (memfs.root / ".git" / "MERGE_HEAD").exists()
        if proc.returncode != 0 and not merging:
            why = proc.stderr.decode(errors="replace").strip()
            raise MemFSError(f"git merge {branch} failed in {memfs.root}: {why}")
        try:
            conflicted = memfs.git("diff", "--name-only", "-z", "--diff-filter=U")
            paths = sorted(p for p in conflicted.decode().split("\0") if p)
            missing = [p for p in paths if p not in resolutions]
            extra = sorted(p for p in resolutions if p not in paths)
            if missing or extra:
                reasons: list[str] = []
                if missing:
                    reasons.append(f"no resolution for {', '.join(missing)}")
                if extra:
                    reasons.append(f"{', '.join(extra)} did not conflict")
                raise MemFSError(f"cannot resolve {branch}: {'; '.join(reasons)}")
            for path in paths:
                _apply_resolution(memfs, path, resolutions[path])
            if merging:
                memfs.git("commit", "-q", "--no-edit", "-m", message or f"memory: merge {branch}")
        except BaseException:
            if memfs.try_git("merge", "--abort").returncode != 0 and before is not None:
                memfs.try_git("reset", "-q", "--merge", before)
            raise
        merged = memfs.revision()
        memfs.try_git("branch", "-D", branch)
    return {"resolved": True, "branch": branch, "head": merged, "previous_head": before,
            "conflicts": paths}


def _apply_resolution(memfs: MemFS, path: str, value: Any) -> None:
    if isinstance(value, dict):
        take = value.get("take")
        if set(value) != {"take"} or take not in _TAKE:
            raise MemFSError(f"resolution for {path}: expected text, null or "
                             f'{{"take": "ours"|"theirs"}}, got {value!r}')
        memfs.git("checkout", f"--{take}", "--", path)
        memfs.git("add", "--", path)
    elif value is None:
        memfs.git("rm", "-q", "--cached", "--ignore-unmatch", "--", path)
        memfs.resolve(path).unlink(missing_ok=True)
    elif isinstance(value, str):
        memfs.write_working(path, value)
        memfs.git("add", "--", path)
    else:
        raise MemFSError(f"resolution for {path}: expected the file's text, null (delete) or "
                         f'{{"take": "ours"|"theirs"}}, got {type(value).__name__}')


def _commits(memfs: MemFS, span: str) -> list[dict[str, str]]:
    out = memfs.git("log", "--format=%H%x1f%s", span).decode("utf-8", errors="replace")
    rows = []
    for line in out.splitlines():
        sha, _, subject = line.partition("\x1f")
        rows.append({"sha": sha, "subject": subject})
    return rows
