"""The store's health probe and Prometheus gauges (what /healthz, /readyz and /metrics of a fleet
server report) against a real PostgreSQL: unmigrated, ready, and unreachable."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fleet.support import CODEC, item


def test_a_database_is_ready_once_migrated_and_its_gauges_count_the_store(pg_url: str) -> None:
    from tether.backends.postgres import health
    from tether.backends.postgres.connection import PgSession
    from tether.backends.postgres.input_queue import PgInputQueue
    from tether.backends.postgres.leases import ConversationLeases

    fresh = health.probe(pg_url)
    assert fresh.reachable and not fresh.ready
    assert fresh.reason() == f"the database has schema version 0, this tether needs {fresh.expected_version}"
    assert health.prometheus_text(pg_url).splitlines()[-1] == "tether_store_up 1"

    session = PgSession(pg_url, "worker-1")
    queue = PgInputQueue(session, CODEC)
    queue.accept_many([item("q-1"), item("q-2"), item("q-3")])
    queue.mark("agent-1/conv-1", "q-1", "done")
    assert ConversationLeases(session).acquire("agent-1/conv-1") is not None
    assert health.probe(pg_url).ready and health.probe(pg_url).reason() == "ok"
    gauges = dict(
        line.rsplit(" ", 1) for line in health.prometheus_text(pg_url).splitlines()
        if not line.startswith("#")
    )
    assert gauges["tether_store_up"] == "1" and gauges["tether_workers_alive"] == "1"
    assert gauges["tether_conversation_leases"] == "1"
    assert gauges['tether_inputs{state="queued"}'] == "2"
    assert gauges['tether_inputs{state="done"}'] == "1"
    assert gauges['tether_inputs{state="interrupted"}'] == "0"
    session.close()


def test_an_unreachable_database_is_reported_not_raised(tmp_path: Path) -> None:
    pytest.importorskip("psycopg", reason="the postgres extra: pip install -e '.[postgres]'")
    from tether.backends.postgres import health

    url = f"postgresql://u:secret@/db?host={tmp_path}"
    probed = health.probe(url)
    assert not probed.reachable and not probed.ready
    assert probed.reason().startswith("the database is unreachable: cannot connect")
    assert "secret" not in probed.reason()
    assert health.prometheus_text(url).splitlines()[-1] == "tether_store_up 0"
