"""`PgSession.statement` on a real PostgreSQL: each statement commits on its own (one round
trip: another connection sees it at once), and inside the thread's open transaction it joins
that transaction (rolled back with it), on a single connection and on a pooled session."""

from __future__ import annotations

import pytest


class Rollback(Exception):
    pass


@pytest.mark.parametrize("pool_size", [1, 3])
def test_a_statement_commits_alone_or_joins_the_open_transaction(
    pg_url: str, pool_size: int,
) -> None:
    import psycopg

    from tether.backends.postgres.connection import PgSession

    session = PgSession(pg_url, "worker-1", pool_size=pool_size)
    session.open()
    with psycopg.connect(pg_url, autocommit=True) as other:
        other.execute("CREATE TABLE t (x int)")
        with session.statement("insert a row") as cur:
            cur.execute("INSERT INTO t VALUES (1)")
            assert other.execute("SELECT count(*) FROM t").fetchone() == (1,)  # committed
        with pytest.raises(Rollback), session.transaction("insert in a transaction") as cur:
            cur.execute("INSERT INTO t VALUES (2)")
            with session.statement("insert inside it") as inner:
                inner.execute("INSERT INTO t VALUES (3)")
            assert other.execute("SELECT count(*) FROM t").fetchone() == (1,)  # not yet
            raise Rollback
        assert other.execute("SELECT array_agg(x) FROM t").fetchone() == ([1],)
    session.close()
