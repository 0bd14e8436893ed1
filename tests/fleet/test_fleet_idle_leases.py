"""A fleet worker gives a conversation's lease up once the conversation has had no runtime there
for a while (issue 31: a soak's memory follows the active conversations, not every one a worker
ever ran): the lease row expires at once instead of being renewed for the worker's life, the
next input on another worker takes it without waiting for a ttl, and the same worker taking it
again gets a new token, so a release still in flight cannot end the new hold."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from tests.fleet.support import wait_until
from tests.fleet.test_fleet_server import _start_and_say, _states, _user_texts
from tests.server.support import ServerProcess, server_env
from tether.backends.postgres.connection import PgSession
from tether.backends.postgres.keeper import LeaseKeeper
from tether.backends.postgres.leases import ConversationLeases
from tether.server.fleet_leases import UNUSED_LEASE_S
from tether.testing.fake_provider import FakeProvider


def _lease(url: str, conversation: str) -> tuple[str, int, bool]:
    """(holder, token, expired) of the conversation's lease row."""
    import psycopg

    with psycopg.connect(url) as conn:
        row = conn.execute(
            "SELECT holder, token, expires_at < clock_timestamp() FROM conversation_leases"
            " WHERE conversation = %s", (conversation,)).fetchone()
    assert row is not None, f"no lease row for {conversation}"
    return str(row[0]), int(row[1]), bool(row[2])


def test_an_idle_conversations_lease_is_given_up_and_the_next_input_elsewhere_takes_it_at_once(
    tmp_path: Path, pg_url: str,
) -> None:
    project, home = tmp_path / "project", tmp_path / "tether-home"
    project.mkdir()
    script = [{"text": "one done"}, {"text": "two done"}, {"text": "three done"}]
    with FakeProvider(script) as fake:
        env = server_env(fake.url, home, tmp_path)
        # A long ttl: without the release, the other worker could not take the lease for a
        # minute, and the first worker would run the second input (it holds the lease).
        first, second = (ServerProcess(env, project, "--store", pg_url, "--lease-ttl", "60",
                                       "--idle-release-after", "0") for _ in range(2))
        try:
            one = asyncio.run(_start_and_say(first.url, project, "one", 1))
            scope = one["runtime"]
            conversation = f"{scope['agent_id']}/{scope['conversation_id']}"
            wait_until(lambda: _states(pg_url) == [("in-1", "done")], "the first turn")
            holder, token, _ = _lease(pg_url, conversation)
            # The client left, the runtime was released (idle at once), and after
            # UNUSED_LEASE_S with no runtime the lease itself: expired, not renewed.
            began = time.monotonic()
            wait_until(lambda: _lease(pg_url, conversation)[2], "the idle lease given up")
            assert time.monotonic() - began < UNUSED_LEASE_S + 10  # not the 60 s ttl
            assert _lease(pg_url, conversation)[:2] == (holder, token)

            two = asyncio.run(_start_and_say(second.url, project, "two", 2, **scope))
            assert two["disposition"] == "started"  # this worker took the lease at once
            wait_until(lambda: _states(pg_url)[-1] == ("in-2", "done"), "the second turn")
            after_two = _lease(pg_url, conversation)
            assert after_two[1] == token + 1 and after_two[0] != holder

            # Back on the first worker once the second has given it up too: a new token.
            wait_until(lambda: _lease(pg_url, conversation)[2], "the second lease given up")
            three = asyncio.run(_start_and_say(first.url, project, "three", 3, **scope))
            assert three["disposition"] == "started"
            wait_until(lambda: _states(pg_url)[-1] == ("in-3", "done"), "the third turn")
            assert _lease(pg_url, conversation)[:2] == (holder, token + 2)
        finally:
            first.stop()
            second.stop()
    assert _states(pg_url) == [("in-1", "done"), ("in-2", "done"), ("in-3", "done")]
    assert _user_texts(pg_url, home) == ["one", "two", "three"] and len(fake.requests) == 3


def test_taking_a_lease_anew_while_its_release_is_in_flight_keeps_the_new_hold(
    pg_url: str,
) -> None:
    """The race the worker's release avoids: it forgets the lease on the event loop, then
    releases it in a thread; an input meanwhile takes it `anew` (a new token), so the late
    release and the keeper's drop of the old token leave the new hold alone."""
    session = PgSession(pg_url, "w-1")
    session.open()
    try:
        leases = ConversationLeases(session, ttl_s=30)
        keeper = LeaseKeeper(leases, every_s=0.05)
        old = leases.acquire("a/c")
        assert old is not None
        keeper.keep(old)
        again = leases.acquire("a/c")  # an unexpired lease of this worker: the same token
        assert again is not None and again.token == old.token
        new = leases.acquire("a/c", anew=True)
        assert new is not None and new.token == old.token + 1
        keeper.keep(new)
        keeper.start()
        assert keeper.drop("a/c", old.token) is None  # the old one's drop: not the new hold
        assert leases.release_all([old]) == []  # the late release: its token is not current
        time.sleep(0.2)  # keeper rounds
        assert keeper.lost == {} and [k.token for k in keeper.held()] == [new.token]
        leases.append(new, [{"n": 1}])  # the new hold writes
        assert keeper.drop("a/c", new.token) == new
        assert leases.release_all([new]) == ["a/c"]
        keeper.stop()
        assert _lease(pg_url, "a/c")[2]
    finally:
        session.close()
