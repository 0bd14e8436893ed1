"""`backends/postgres/memory_sync.py` on a real PostgreSQL: two homes (two machines) and one
store keep one agent's memory repository: a commit on one is pulled by the other, a repo with
only its initial commit adopts the store's history, concurrent commits are merged, a lost
compare-and-swap is refused, a true conflict keeps both sides (the loser's on a branch every
worker gets), equal heads cost no bundle, and a migrated home's memory is served as it is."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from tether.backends.postgres.connection import PgSession
from tether.backends.postgres.memory_sync import MemoryRepos, repo_path, sync
from tether.memory.memfs import MemFS

AGENT = "agent-mem"


@pytest.fixture
def repos(pg_url: str) -> Iterator[MemoryRepos]:
    session = PgSession(pg_url, "test-memory")
    try:
        yield MemoryRepos(session)
    finally:
        session.close()


def _repo(home: Path) -> MemFS:
    return MemFS.open(home, AGENT, agent_name="mem")


def _write(memfs: MemFS, rel: str, text: str, message: str) -> str:
    with memfs.writing():
        memfs.write_working(rel, text)
        sha = memfs.commit([rel], message)
    assert sha is not None
    return sha


def test_a_commit_on_one_home_is_pulled_by_another(tmp_path: Path, repos: MemoryRepos) -> None:
    a, b = _repo(tmp_path / "a"), _repo(tmp_path / "b")
    head = _write(a, "system/human.md", "Ada\n", "the user's name")
    pushed = sync(a, repos, "worker-a")
    assert pushed.pushed and pushed.head == head == repos.head(repo_path(AGENT))
    pulled = sync(b, repos, "worker-b")  # b has only its own initial commit: it adopts a's
    assert pulled.pulled and not pulled.pushed and b.revision() == head
    assert b.read_head("system/human.md") == "Ada\n"
    assert (b.root / "system" / "human.md").read_text() == "Ada\n"  # the working tree too
    assert b.status_lines() == []


def test_a_missing_local_repo_is_created_from_the_store(tmp_path: Path, repos: MemoryRepos) -> None:
    a = _repo(tmp_path / "a")
    head = _write(a, "notes.md", "one\n", "a note")
    sync(a, repos, "worker-a")
    fresh = MemFS((tmp_path / "c" / "agents" / AGENT / "memory"), agent_id=AGENT)
    assert not fresh.exists
    assert sync(fresh, repos, "worker-c").head == head
    assert fresh.read_head("notes.md") == "one\n"


def test_equal_heads_fetch_and_store_nothing(tmp_path: Path, repos: MemoryRepos,
                                             pg_url: str) -> None:
    a = _repo(tmp_path / "a")
    _write(a, "notes.md", "one\n", "a note")
    sync(a, repos, "worker-a")
    again = sync(a, repos, "worker-a")
    assert not again.pulled and not again.pushed and again.head == a.revision()


def test_concurrent_commits_are_merged_and_both_kept(tmp_path: Path, repos: MemoryRepos) -> None:
    a, b = _repo(tmp_path / "a"), _repo(tmp_path / "b")
    _write(a, "system/human.md", "Ada\n", "base")
    sync(a, repos, "worker-a")
    sync(b, repos, "worker-b")
    # Both start from the same head, both commit, a stores first: b's store loses the race
    # (its compare-and-swap sees a's head), pulls a's commit, merges and stores the merge.
    _write(a, "system/alpha.md", "from a\n", "a's change")
    _write(b, "system/beta.md", "from b\n", "b's change")
    stale = repos.head(repo_path(AGENT))
    assert sync(a, repos, "worker-a").pushed
    assert not repos.swap(repo_path(AGENT), stale, b"x", {}, b"")  # the race b would lose
    merged = sync(b, repos, "worker-b")
    assert merged.pulled and merged.pushed and merged.conflict_branch is None
    assert sync(a, repos, "worker-a").pulled
    for memfs in (a, b):
        files = memfs.read_head_tree()
        assert files["system/alpha.md"] == b"from a\n" and files["system/beta.md"] == b"from b\n"
        assert memfs.revision() == repos.head(repo_path(AGENT))


def test_a_true_conflict_keeps_both_sides_and_says_so(
    tmp_path: Path, repos: MemoryRepos, caplog: pytest.LogCaptureFixture,
) -> None:
    a, b = _repo(tmp_path / "a"), _repo(tmp_path / "b")
    _write(a, "system/human.md", "Ada\n", "base")
    sync(a, repos, "worker-a")
    sync(b, repos, "worker-b")
    theirs = _write(a, "system/human.md", "Ada Lovelace\n", "a's version")
    ours = _write(b, "system/human.md", "Ada Byron\n", "b's version")
    sync(a, repos, "worker-a")
    with caplog.at_level(logging.INFO, logger="tether.fleet"):
        result = sync(b, repos, "worker-b")
    assert result.conflict_branch == f"memory-conflict/worker-b-{ours[:12]}"
    assert b.revision() == theirs and b.read_head("system/human.md") == "Ada Lovelace\n"
    assert b.branch_revision(result.conflict_branch) == ours
    (warning,) = [r for r in caplog.records if r.fleet["event"] == "memory_conflict"]  # type: ignore[attr-defined]
    assert result.conflict_branch in warning.getMessage()
    # The branch is stored with the repo: the other worker gets it on its next pull.
    c = MemFS(tmp_path / "c" / "agents" / AGENT / "memory", agent_id=AGENT)
    sync(c, repos, "worker-c")
    assert c.branch_revision(result.conflict_branch) == ours
    assert c.read_head("system/human.md", ) == "Ada Lovelace\n"


def test_unrelated_histories_are_merged(tmp_path: Path, repos: MemoryRepos) -> None:
    a, b = _repo(tmp_path / "a"), _repo(tmp_path / "b")
    _write(a, "alpha.md", "a\n", "a before any sync")
    _write(b, "beta.md", "b\n", "b before any sync")
    sync(a, repos, "worker-a")
    assert sync(b, repos, "worker-b").pushed
    assert set(b.head_paths()) >= {"alpha.md", "beta.md"}


def test_a_migrated_homes_memory_is_served_as_it_is(tmp_path: Path, pg_url: str) -> None:
    from tether.backends.postgres.migrate_home import home_to_store

    home = tmp_path / "home"
    old = _repo(home)
    head = _write(old, "system/persona.md", "terse\n", "persona")
    session = PgSession(pg_url, "test-migrate")
    try:
        home_to_store(home, session)
        worker = _repo(tmp_path / "worker")
        repos = MemoryRepos(session)
        assert sync(worker, repos, "worker-w").head == head
        assert worker.read_head("system/persona.md") == "terse\n"
        _write(worker, "system/persona.md", "very terse\n", "terser")
        assert sync(worker, repos, "worker-w").pushed
    finally:
        session.close()


def test_a_home_copied_out_of_the_store_has_the_memory_its_workers_stored(
    tmp_path: Path, repos: MemoryRepos, pg_url: str,
) -> None:
    from tether.backends.postgres.migrate_home import store_to_home
    from tether.backends.postgres.migrate_local import refs_of

    a = _repo(tmp_path / "a")
    _write(a, "system/human.md", "Ada\n", "the user's name")
    sync(a, repos, "worker-a")
    session = PgSession(pg_url, "test-migrate-out")
    try:
        store_to_home(session, tmp_path / "back")  # verified against the digests, or refused
    finally:
        session.close()
    back = tmp_path / "back" / "agents" / AGENT / "memory"
    assert refs_of(back)["refs/heads/main"] == a.revision()
    assert (back / "system" / "human.md").read_text() == "Ada\n"  # the files, not only HEAD
