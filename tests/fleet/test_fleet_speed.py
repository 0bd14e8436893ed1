"""A worker's store session pools its connections (issue 31 item 2): a transaction held open on
one thread (a slow lease renewal, a checkpoint) does not hold up another thread's (the input
queue's writer), a thread nests on its own connection, and the pool never grows past its size."""

from __future__ import annotations

import threading

import pytest

from tether.backends.postgres.connection import PgSession


def _other_thread_commits_while_one_is_open(session: PgSession, wait_s: float) -> bool:
    inside, release, done = threading.Event(), threading.Event(), threading.Event()

    def slow() -> None:
        with session.transaction("hold a transaction open") as cur:
            cur.execute("SELECT 1")
            inside.set()
            release.wait(30)

    def quick() -> None:
        with session.transaction("commit something") as cur:
            cur.execute("SELECT 1")
        done.set()

    holder = threading.Thread(target=slow)
    holder.start()
    assert inside.wait(30)
    other = threading.Thread(target=quick)
    other.start()
    finished = done.wait(wait_s)  # a bound on a hung test, not a timing claim
    release.set()
    holder.join(30)
    other.join(30)
    return finished


def test_a_pooled_session_commits_on_another_connection_while_one_transaction_is_open(
    pg_url: str,
) -> None:
    pooled = PgSession(pg_url, "worker-pooled", pool_size=2, idle_in_transaction_ms=60_000)
    try:
        assert _other_thread_commits_while_one_is_open(pooled, 20)
        with pooled.transaction("outer") as outer:  # nested: the same connection, a savepoint
            pid = outer.execute("SELECT pg_backend_pid()").fetchone()
            with pooled.transaction("inner") as inner:
                assert inner.execute("SELECT pg_backend_pid()").fetchone() == pid
        assert pooled._pooled <= 2
    finally:
        pooled.close()


def test_a_single_connection_session_serialises_its_transactions(pg_url: str) -> None:
    single = PgSession(pg_url, "worker-single", idle_in_transaction_ms=60_000)
    try:
        # it waits for the open one (given 2 s to show otherwise)
        assert not _other_thread_commits_while_one_is_open(single, 2)
    finally:
        single.close()


def test_a_pool_size_below_one_is_refused(pg_url: str) -> None:
    with pytest.raises(ValueError, match="pool_size must be at least 1"):
        PgSession(pg_url, "w", pool_size=0)
