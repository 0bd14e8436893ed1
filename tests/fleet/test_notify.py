"""`InputListener` on a real PostgreSQL: an accepted input wakes a listener with its
conversation, an input whose key was taken wakes nobody, and a listener whose connection was
cut off says so once and listens again on a new one."""

from __future__ import annotations

import pytest

from tests.fleet.support import CODEC, item


def test_a_listener_hears_accepted_inputs_and_survives_a_cut(pg_url: str) -> None:
    import psycopg

    from tether.backends.postgres.connection import PgSession, PgStoreUnavailable
    from tether.backends.postgres.input_queue import PgInputQueue
    from tether.backends.postgres.notify import InputListener

    queue = PgInputQueue(PgSession(pg_url, "sender"), CODEC)
    queue.open()
    listener = InputListener(pg_url)
    listener.start()
    queue.accept_many([item("q-1", conversation="a/one"), item("q-2", conversation="a/two")])
    assert listener.wait(30) == {"a/one", "a/two"}
    queue.accept(item("q-3", key="k", conversation="a/one"))
    assert listener.wait(30) == {"a/one"}
    assert queue.accept_many([item("q-4", key="k", conversation="a/one")]) == ["key"]
    assert listener.wait(0.2) == set()  # nothing was recorded, nobody is woken
    with psycopg.connect(pg_url, autocommit=True) as admin:
        admin.execute(
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE query LIKE 'LISTEN%'"
        )
    with pytest.raises(PgStoreUnavailable, match="failed to wait for inputs"):
        listener.wait(30)
    listener.start()
    queue.accept(item("q-5", conversation="a/two"))
    assert listener.wait(30) == {"a/two"}
    listener.close()
    queue.close()
