"""`LeaseKeeper` on a real PostgreSQL: a kept lease outlives its ttl while its holder works, and
a lease that moved (its keeper could not renew in time) is reported lost, once."""

from __future__ import annotations

import threading
import time


def test_a_kept_lease_outlives_its_ttl_and_a_moved_one_is_reported_once(pg_url: str) -> None:
    import psycopg

    from tether.backends.postgres.connection import PgSession
    from tether.backends.postgres.keeper import LeaseKeeper
    from tether.backends.postgres.leases import ConversationLeases

    mine = ConversationLeases(PgSession(pg_url, "worker-1"), ttl_s=2.0)
    other = ConversationLeases(PgSession(pg_url, "worker-2"), ttl_s=30)
    lease = mine.acquire("a/c")
    assert lease is not None
    reasons: list[str] = []
    told = threading.Event()
    keeper = LeaseKeeper(mine, lease, on_lost=lambda why: (reasons.append(why), told.set())).start()
    for _ in range(6):  # 6 x 0.5 s = 1.5 ttls: without renewals the lease would be free
        time.sleep(0.5)
        assert other.acquire("a/c") is None
    # The lease expires behind the keeper's back (as if its worker had been stopped), moves...
    with psycopg.connect(pg_url, autocommit=True) as admin:
        admin.execute("UPDATE conversation_leases SET expires_at = clock_timestamp() - interval '1 s'")
    moved = other.acquire("a/c")
    assert moved is not None and moved.token == lease.token + 1
    assert told.wait(30)  # ...and the keeper's next renewal is refused
    keeper.stop()
    assert keeper.lost == reasons[0] and len(reasons) == 1
    assert "no longer current (token 2, held by worker-2)" in reasons[0]
    mine.session.close()
    other.session.close()
