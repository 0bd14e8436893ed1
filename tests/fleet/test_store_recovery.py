"""What a fleet worker finds after others died or its own session dropped, on a real
PostgreSQL: conversations left without a live owner, and a session the server cut off."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from tests.fleet.support import CODEC, item

ROOT = Path(__file__).resolve().parents[2]


def test_conversations_without_a_live_owner_are_found_oldest_first(pg_url: str) -> None:
    from tether.backends.postgres.connection import PgSession
    from tether.backends.postgres.input_queue import PgInputQueue
    from tether.backends.postgres.leases import ConversationLeases

    code = f"""
import os
from tether.backends.postgres.connection import PgSession
from tether.backends.postgres.input_queue import PgInputQueue
from tether.backends.postgres.leases import ConversationLeases
from tests.fleet.support import CODEC, item
session = PgSession({pg_url!r}, "doomed")
PgInputQueue(session, CODEC).accept(item("q-dead", conversation="a/held-by-the-dead"))
assert ConversationLeases(session, ttl_s=600).acquire("a/held-by-the-dead") is not None
os._exit(9)
"""
    dead = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert dead.returncode == 9, dead.stderr
    live = PgSession(pg_url, "live")
    queue, leases = PgInputQueue(live, CODEC), ConversationLeases(live, ttl_s=600)
    queue.accept(item("q-free", conversation="a/never-leased"))
    queue.accept(item("q-held", conversation="a/held-by-the-living"))
    assert leases.acquire("a/held-by-the-living") is not None
    queue.accept(item("q-done", conversation="a/finished"))
    queue.mark("a/finished", "q-done", "done")
    end = time.monotonic() + 30  # the killed worker's session ends a moment after it
    while "a/held-by-the-dead" not in leases.orphaned() and time.monotonic() < end:
        time.sleep(0.05)
    assert leases.orphaned() == ["a/held-by-the-dead", "a/never-leased"]
    taken = leases.acquire("a/held-by-the-dead")  # its session is gone: no waiting for 600 s
    assert taken is not None and taken.token == 2
    assert [s.item_id for s in leases.queued(taken, CODEC)] == ["q-dead"]
    assert leases.orphaned() == ["a/never-leased"]
    live.close()


def test_a_session_the_server_cut_off_is_reported_then_reopened(pg_url: str) -> None:
    import psycopg
    import pytest

    from tether.backends.postgres.connection import PgSession, PgStoreUnavailable
    from tether.backends.postgres.input_queue import PgInputQueue
    from tether.backends.postgres.presence import alive

    session = PgSession(pg_url, "worker-1")
    queue = PgInputQueue(session, CODEC)
    queue.accept(item("q-1", key="k-1"))
    with psycopg.connect(pg_url, autocommit=True) as admin:
        admin.execute(
            "SELECT pg_terminate_backend(backend_pid) FROM workers WHERE worker = 'worker-1'"
        )
        with pytest.raises(PgStoreUnavailable, match="failed to find an idempotency key"):
            queue.by_key("agent-1/conv-1", "k-1")
        found = queue.by_key("agent-1/conv-1", "k-1")  # a new session, its presence registered
        assert found is not None and found.item_id == "q-1"
        assert alive(admin, "worker-1")
    session.close()
