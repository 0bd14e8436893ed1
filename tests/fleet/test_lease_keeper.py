"""`LeaseKeeper` on a real PostgreSQL: one thread per worker keeps every lease it holds past its
ttl, a lease that moved (not renewed in time) is reported lost once, within the ttl, and the
others are kept; `FleetLeases` gives them all up at once when it stops."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest


def _move(pg_url: str, conversation: str | None = None) -> None:
    """Expire leases behind their keeper's back, as if their worker had been stopped."""
    import psycopg

    where, params = ("WHERE conversation = %s", (conversation,)) if conversation else ("", ())
    with psycopg.connect(pg_url, autocommit=True) as admin:
        admin.execute(
            "UPDATE conversation_leases SET expires_at = clock_timestamp() - interval '1 s' "
            + where, params,
        )


def _keeper_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("lease-keeper")]


def test_a_kept_lease_outlives_its_ttl_and_a_moved_one_is_reported_once(pg_url: str) -> None:
    from tether.backends.postgres.connection import PgSession
    from tether.backends.postgres.keeper import LeaseKeeper
    from tether.backends.postgres.leases import ConversationLeases

    mine = ConversationLeases(PgSession(pg_url, "worker-1"), ttl_s=2.0)
    other = ConversationLeases(PgSession(pg_url, "worker-2"), ttl_s=30)
    lease = mine.acquire("a/c")
    assert lease is not None
    reasons: list[str] = []
    told = threading.Event()
    keeper = LeaseKeeper(mine).start()
    keeper.keep(lease, on_lost=lambda why: (reasons.append(why), told.set()))
    for _ in range(6):  # 6 x 0.5 s = 1.5 ttls: without renewals the lease would be free
        time.sleep(0.5)
        assert other.acquire("a/c") is None
    _move(pg_url)  # ...the lease moves
    moved = other.acquire("a/c")
    assert moved is not None and moved.token == lease.token + 1
    assert told.wait(30)  # ...and the keeper's next renewal is refused
    time.sleep(1.0)  # more rounds: reported once, no longer renewed
    assert keeper.stop() == []
    assert keeper.lost == {"a/c": reasons[0]} and len(reasons) == 1
    assert "no longer current (token 2, held by worker-2)" in reasons[0]
    mine.session.close()
    other.session.close()


def test_a_dropped_lease_is_not_renewed_and_the_interval_must_be_positive(pg_url: str) -> None:
    from tether.backends.postgres.connection import PgSession
    from tether.backends.postgres.keeper import LeaseKeeper
    from tether.backends.postgres.leases import ConversationLeases

    mine = ConversationLeases(PgSession(pg_url, "worker-1"), ttl_s=1.0)
    other = ConversationLeases(PgSession(pg_url, "worker-2"), ttl_s=30)
    with pytest.raises(ValueError, match="interval must be positive, got 0"):
        LeaseKeeper(mine, every_s=0)
    kept, dropped = mine.acquire("a/kept"), mine.acquire("a/dropped")
    assert kept is not None and dropped is not None
    keeper = LeaseKeeper(mine).start()
    keeper.keep(kept)
    keeper.keep(dropped)
    assert keeper.drop("a/dropped") == dropped
    time.sleep(1.5)  # past the ttl: only the dropped one lapsed
    assert other.acquire("a/dropped") is not None
    assert other.acquire("a/kept") is None
    assert keeper.stop() == [kept] and keeper.lost == {}
    mine.session.close()
    other.session.close()


async def _hold_fifty_then_lose_one(pg_url: str) -> None:
    from tether.backends.postgres.connection import PgSession
    from tether.backends.postgres.leases import ConversationLeases
    from tether.runtime.session.pg_store import open_pg_store
    from tether.server.fleet_leases import FleetLeases

    ttl = 2.0
    store = await asyncio.to_thread(open_pg_store, pg_url, "worker-1")
    fleet = FleetLeases(store.session, store.inputs, pg_url, ttl)
    fleet._loop = asyncio.get_running_loop()  # what `start` sets (without its listener)
    other = ConversationLeases(PgSession(pg_url, "worker-2"), ttl_s=30)
    conversations = [f"a/c{i}" for i in range(50)]
    before = len(_keeper_threads())
    for c in conversations:
        assert await fleet.holds_async(c)
    assert len(_keeper_threads()) - before == 1  # one keeper for 50 leases
    await asyncio.sleep(1.5 * ttl)  # all kept past their ttl
    assert await asyncio.to_thread(other.acquire, "a/c7") is None
    await asyncio.to_thread(_move, pg_url, "a/c7")
    taken = await asyncio.to_thread(other.acquire, "a/c7")
    assert taken is not None
    moved_at = time.monotonic()
    while "a/c7" in fleet.held:  # the loop hears of it within the ttl and stops running it
        assert time.monotonic() - moved_at < ttl, "a lease that moved was not reported in time"
        await asyncio.sleep(0.05)
    assert len(fleet.held) == 49 and fleet.keeper.lost.keys() == {"a/c7"}
    assert await asyncio.to_thread(other.acquire, "a/c8") is None  # the rest still held
    await fleet.stop_async()  # every lease given up at once: another worker takes them now
    assert len(_keeper_threads()) == before
    assert all([await asyncio.to_thread(other.acquire, c) for c in conversations if c != "a/c7"])
    await asyncio.to_thread(fleet.leases.session.close)
    await asyncio.to_thread(other.session.close)


def test_fifty_held_conversations_run_one_keeper_thread_and_a_moved_lease_is_lost_in_time(
    pg_url: str,
) -> None:
    asyncio.run(_hold_fifty_then_lose_one(pg_url))
