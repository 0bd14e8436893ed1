"""The fleet's structured logs on a real PostgreSQL: a takeover, a refused write and a fire each
log one `tether.fleet` event with its fields, rendered by `JsonLogFormatter` as a JSON line."""

from __future__ import annotations

import json
import logging
import time
from datetime import UTC, datetime

import pytest

from tests.fleet.support import CODEC, item


def test_takeover_refusal_and_fire_are_logged_as_json(
    pg_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    from tether.backends.postgres.connection import LeaseLost, PgSession
    from tether.backends.postgres.fires import ScheduleFires
    from tether.backends.postgres.input_queue import PgInputQueue
    from tether.backends.postgres.leases import ConversationLeases
    from tether.backends.postgres.logs import JsonLogFormatter

    caplog.set_level(logging.INFO, logger="tether.fleet")
    first = ConversationLeases(PgSession(pg_url, "worker-1"), ttl_s=0.2)
    second = ConversationLeases(PgSession(pg_url, "worker-2"), ttl_s=30)
    PgInputQueue(second.session, CODEC).accept(item("q-1"))
    old = first.acquire("agent-1/conv-1")
    assert old is not None
    first.mark(old, "q-1", "started")
    new = None
    while new is None:
        time.sleep(0.05)
        new = second.acquire("agent-1/conv-1")
    with pytest.raises(LeaseLost):
        first.append(old, [{"late": True}])
    due = datetime(2026, 12, 5, 9, 0, tzinfo=UTC)
    ScheduleFires(PgInputQueue(second.session, CODEC)).fire_once("nightly", due, item("f-1"))

    lines = [json.loads(JsonLogFormatter().format(r)) for r in caplog.records]
    assert [line["event"] for line in lines] == ["lease_taken", "write_refused", "schedule_fired"]
    taken, refused, fired = lines
    assert taken["level"] == "info" and taken["logger"] == "tether.fleet"
    assert (taken["worker"], taken["token"], taken["previous"], taken["interrupted"]) == (
        "worker-2", 2, "worker-1", ["q-1"])
    assert taken["message"] == "worker-2 took agent-1/conv-1 (token 2) from worker-1: its lease expired"
    assert refused["level"] == "warning" and (refused["token"], refused["current_token"]) == (1, 2)
    assert fired["schedule"] == "nightly" and fired["due_at"] == "2026-12-05T09:00:00+00:00"
    first.session.close()
    second.session.close()
