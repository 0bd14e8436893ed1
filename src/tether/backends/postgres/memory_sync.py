"""An agent's memory repository shared by a fleet's workers (issue 31): the store's copy of each
MemFS repo, and the sync a worker runs at turn boundaries between it and its own local repo.

The store's copy is the `memory_repos` row `tether store migrate` writes (`migrate_home.py`),
keyed by the repo's path under the home (`agents/<agent_id>/memory`): `bundle` a whole `git
bundle` of `main` and the conflict branches, `refs` every ref in it plus `HEAD`, `config` the
repo's `.git/config`. A migrated home's memory is therefore served as it is, and the store's
head is one primary-key lookup (`refs->>'refs/heads/main'`). Each store also records the
repo's refs digest and folders the way `store migrate` verifies a copy back (`home_digests`),
so a home copied out of a store whose servers changed memory still verifies.

`sync` brings the two together: when the store's head is not the local one, it fetches the
store's bundle and brings it into local `main` (a fast-forward; a local repo holding only its
initial empty commit adopts the store's history; diverged histories are merged with
`MemFS.merge_branch`); when local `main` then has commits the store lacks, it stores a new
bundle with a compare-and-swap on the store's head, and on a lost race pulls the winner's
commits, merges and tries again. A true conflict drops neither side: the store's `main` wins
`main`, this worker's commits stay on a branch `memory-conflict/<worker>-<sha>` (stored with the
repo, so every worker gets it) and a `memory_conflict` warning on the fleet log names it.
Nothing is fetched or bundled when the heads are equal.
"""

from __future__ import annotations

import contextlib
import hashlib
import logging
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import orjson

from tether.backends.postgres import logs
from tether.backends.postgres.connection import PgSession
from tether.errors import StoreError

MAIN = "refs/heads/main"
CONFLICT_PREFIX = "refs/heads/memory-conflict/"
STORE_REF = "refs/tether/store-main"  # the store's main as last fetched (not a branch)
EMPTY_TREE = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"
MAX_ATTEMPTS = 5  # compare-and-swap rounds lost to other workers before giving up until next time


class MemoryRepo(Protocol):
    """What the sync uses of an agent's repo: `memory/memfs.py` `MemFS` (not imported here:
    `backends` and `memory` sit side by side in one layer). Its git failures are StoreErrors."""

    root: Path
    agent_id: str

    def ensure_created(self) -> None: ...
    def writing(self) -> contextlib.AbstractContextManager[None]: ...
    def revision(self) -> str | None: ...
    def git(self, *args: str, stdin: bytes | None = None) -> bytes: ...
    def try_git(self, *args: str) -> subprocess.CompletedProcess[bytes]: ...
    def is_ancestor(self, commit: str, of: str) -> bool: ...
    def merge_branch(self, branch: str, message: str) -> str: ...


def repo_path(agent_id: str) -> str:
    """The repo's key in `memory_repos`: its path under the home, as `store migrate` writes it."""
    return f"agents/{agent_id}/memory"


class MemoryRepos:
    """The `memory_repos` rows: a repo's head, its bundle, and a head swapped only from the
    head the writer last saw."""

    def __init__(self, session: PgSession) -> None:
        self.session = session

    def head(self, path: str) -> str | None:
        """The store's `main` for the repo at `path` (None: no row, or a repo with no commits)."""
        with self.session.statement("read a memory repository's head") as cur:
            row = cur.execute(
                "SELECT refs->>%s FROM memory_repos WHERE path = %s", (MAIN, path)
            ).fetchone()
        return row[0] if row else None

    def bundle(self, path: str) -> tuple[bytes, dict[str, str]] | None:
        with self.session.statement("read a memory repository's bundle") as cur:
            row = cur.execute(
                "SELECT bundle, refs FROM memory_repos WHERE path = %s", (path,)
            ).fetchone()
        return (bytes(row[0]), dict(row[1])) if row else None

    def swap(self, path: str, expected: str | None, bundle: bytes, refs: dict[str, str],
             config: bytes) -> bool:
        """Store `bundle` if the store's head is still `expected`; False when another worker
        stored a different head first."""
        encoded = orjson.dumps(refs).decode()
        with self.session.transaction("store a memory repository") as cur:
            cur.execute(
                "UPDATE memory_repos SET bundle = %s, refs = %s, config = %s"
                " WHERE path = %s AND (refs->>%s) IS NOT DISTINCT FROM %s",
                (bundle, encoded, config, path, MAIN, expected),
            )
            if cur.rowcount != 1:
                if expected is not None:
                    return False
                cur.execute(
                    "INSERT INTO memory_repos (path, bundle, refs, config) VALUES (%s, %s, %s, %s)"
                    " ON CONFLICT (path) DO NOTHING",
                    (path, bundle, encoded, config),
                )
                if cur.rowcount != 1:
                    return False
            _record_for_migration(cur, path, refs)
            return True


def _record_for_migration(cur: Any, path: str, refs: dict[str, str]) -> None:
    """What `tether store migrate --from` checks the copied-back repo against (`home_digests`,
    as `migrate_local.home_digests` computes it: the folders by mode, the repo by its refs),
    kept with every store, so a home copied out of a store its servers changed memory in
    verifies (a migrated repo's recorded refs move on). The folders are made by the copy with
    the default mode; no `home_files` rows are written for them (a reflection pass then starts
    differently: tests/fleet/test_fleet_store_runtime.py saw an extra request)."""
    digest = "refs:" + hashlib.sha256(orjson.dumps(refs, option=orjson.OPT_SORT_KEYS)).hexdigest()
    parts = path.split("/")  # agents, agents/<id>, agents/<id>/memory
    folders = ["/".join(parts[:n]) for n in range(1, len(parts) + 1)]
    cur.executemany(
        "INSERT INTO home_digests (path, digest) VALUES (%s, %s) ON CONFLICT (path) DO NOTHING",
        [(folder, "dir:755") for folder in folders],
    )
    cur.execute(
        "INSERT INTO home_digests (path, digest) VALUES (%s, %s)"
        " ON CONFLICT (path) DO UPDATE SET digest = EXCLUDED.digest",
        (path + "/.git", digest),
    )


@dataclass(slots=True)
class Synced:
    """What one sync did: the head both sides agree on after it (None when they could not be
    brought together this time), and what moved."""

    head: str | None
    pulled: bool = False
    pushed: bool = False
    conflict_branch: str | None = None


def sync(memfs: MemoryRepo, repos: MemoryRepos, worker: str) -> Synced:
    """Bring the agent's local repo and the store's copy to one head (pull, merge, push), under
    the repo's write lock. A StoreError (git's MemFSError, the store's) when it could not: the
    caller logs it and the next boundary tries again."""
    memfs.ensure_created()
    path = repo_path(memfs.agent_id)
    done = Synced(head=None)
    with memfs.writing():
        for _attempt in range(MAX_ATTEMPTS):
            remote = repos.head(path)
            local = memfs.revision()
            if remote == local:
                done.head = local
                return done
            if remote is not None and not _contains(memfs, local, remote):
                remote = _pull(memfs, repos, path, remote, worker, done)
                local = memfs.revision()
                if local == remote and done.conflict_branch is None:
                    done.head = local
                    return done
            if repos.swap(path, remote, *_pack(memfs)):
                done.pushed = True
                done.head = local
                logs.event("memory_pushed", f"memory of {memfs.agent_id}: stored {local}",
                           agent_id=memfs.agent_id, head=local, previous=remote)
                return done
    logs.event("memory_sync_gave_up",
               f"memory of {memfs.agent_id}: {MAX_ATTEMPTS} stores lost to other workers in a"
               " row; trying again at the next turn boundary", level=logging.WARNING,
               agent_id=memfs.agent_id)
    return done


def _contains(memfs: MemoryRepo, local: str | None, remote: str) -> bool:
    """Whether local `main` already holds the store's head (nothing to pull)."""
    if local is None:
        return False
    known = memfs.try_git("cat-file", "-e", f"{remote}^{{commit}}").returncode == 0
    return known and memfs.is_ancestor(remote, local)


def _pull(memfs: MemoryRepo, repos: MemoryRepos, path: str, remote: str, worker: str,
          done: Synced) -> str:
    """The store's commits into local `main`: fetched from its bundle, then fast-forwarded,
    adopted (over a lone initial commit) or merged; a conflict keeps ours on a branch. Returns
    the store's head as fetched (newer than `remote` if another worker stored in between)."""
    _fetch(memfs, repos, path)
    local = memfs.revision()
    remote = memfs.git("rev-parse", "--verify", f"{STORE_REF}^{{commit}}").decode().strip()
    done.pulled = True
    if local is None or _only_initial(memfs, local):
        memfs.git("reset", "-q", "--keep", remote)
        return remote
    if memfs.is_ancestor(local, remote):
        memfs.git("merge", "-q", "--ff-only", STORE_REF)
        return remote
    message = f"merge the fleet's memory ({remote[:12]}) into {worker}'s"
    if not _related(memfs, local, remote):
        memfs.git("merge", "-q", "--no-edit", "--allow-unrelated-histories", "-m", message,
                  STORE_REF)
        return remote
    if memfs.merge_branch(STORE_REF, message) != "conflict":
        return remote
    branch = f"memory-conflict/{_ref_safe(worker)}-{local[:12]}"
    memfs.git("branch", "-f", branch, local)
    memfs.git("reset", "-q", "--keep", remote)
    done.conflict_branch = branch
    logs.event(
        "memory_conflict",
        f"memory of {memfs.agent_id}: this worker's commits conflict with the fleet's"
        f" ({remote[:12]}); main is the fleet's, ours ({local[:12]}) are kept on branch {branch}",
        level=logging.WARNING, agent_id=memfs.agent_id, branch=branch, ours=local,
        theirs=remote,
    )
    return remote


def _fetch(memfs: MemoryRepo, repos: MemoryRepos, path: str) -> None:
    stored = repos.bundle(path)
    if stored is None or not stored[0]:
        raise StoreError(f"the store's memory repository {path} has a head but no bundle")
    with tempfile.TemporaryDirectory(prefix="tether-memory-") as scratch:
        bundle = Path(scratch) / "store.bundle"
        bundle.write_bytes(stored[0])
        memfs.git("fetch", "-q", "--no-tags", str(bundle), f"+{MAIN}:{STORE_REF}",
                  f"+{CONFLICT_PREFIX}*:{CONFLICT_PREFIX}*")


def _pack(memfs: MemoryRepo) -> tuple[bytes, dict[str, str], bytes]:
    """The local repo as the store keeps it: a bundle of `main` and the conflict branches,
    every ref in it plus HEAD, and the config."""
    refs: dict[str, str] = {}
    listing = memfs.git("for-each-ref", "--format=%(objectname) %(refname)", MAIN,
                        CONFLICT_PREFIX.rstrip("/"))
    for line in listing.decode().splitlines():
        sha, name = line.split(" ", 1)
        refs[name] = sha
    with tempfile.TemporaryDirectory(prefix="tether-memory-") as scratch:
        out = Path(scratch) / "repo.bundle"
        memfs.git("bundle", "create", "-q", str(out), *refs)
        bundle = out.read_bytes()
    refs["HEAD"] = f"ref: {MAIN}"
    return bundle, refs, (memfs.root / ".git" / "config").read_bytes()


def _only_initial(memfs: MemoryRepo, local: str) -> bool:
    """Whether `main` is one commit of nothing: the initial commit `MemFS.ensure_created`
    made on this machine, which the store's history replaces."""
    out = memfs.git("log", "-n2", "--format=%T", local).decode().split()
    return out == [EMPTY_TREE]


def _related(memfs: MemoryRepo, local: str, remote: str) -> bool:
    return memfs.try_git("merge-base", local, remote).returncode == 0


def _ref_safe(worker: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "-" for c in worker).strip(".-") or "worker"


def sync_logged(memfs: MemoryRepo, repos: MemoryRepos, worker: str) -> Synced:
    """`sync`, its failure logged (`memory_sync_failed`) instead of raised: a turn never fails
    for its memory's sync, which the next boundary tries again."""
    try:
        return sync(memfs, repos, worker)
    except StoreError as exc:  # MemFSError, PgStoreUnavailable
        logs.event("memory_sync_failed", f"memory of {memfs.agent_id} not synced: {exc}",
                   level=logging.WARNING, agent_id=memfs.agent_id, error=str(exc))
        return Synced(head=None)
