"""Every refused fleet write is one structured event (issue 31 item 4, `--log-format json`): an
effect checkpoint written by a worker whose conversation lease moved is refused and logged as
`write_refused` on `tether.fleet`, like a refused transcript or lease write."""

from __future__ import annotations

import json
import logging
import time

import pytest

from tether.protocol.tool_calls import ToolCall, ToolReturn

CONV = "agent-1/conv-1"


def test_a_refused_checkpoint_write_is_one_json_event(
    pg_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    from tether.backends.postgres.connection import LeaseLost
    from tether.backends.postgres.leases import ConversationLeases
    from tether.backends.postgres.logs import JsonLogFormatter
    from tether.runtime.session.pg_store import open_pg_store

    old, new = open_pg_store(pg_url, "worker-old"), open_pg_store(pg_url, "worker-new")
    try:
        assert ConversationLeases(old.session, ttl_s=0.2).acquire(CONV) is not None
        cp = old.checkpoints.record_before(
            CONV, ToolCall("call-1", "Bash", {"command": "deploy"}), "worker-old")
        new_leases = ConversationLeases(new.session, ttl_s=30)
        deadline = time.monotonic() + 30  # until the old lease expires (a bound, no claim)
        while new_leases.acquire(CONV) is None and time.monotonic() < deadline:
            time.sleep(0.05)
        caplog.clear()
        caplog.set_level(logging.INFO, logger="tether.fleet")
        with pytest.raises(LeaseLost):
            old.checkpoints.record_after(cp, ToolReturn("call-1", "Bash", "deployed", False))
    finally:
        old.session.close()
        new.session.close()
    lines = [json.loads(JsonLogFormatter().format(r)) for r in caplog.records]
    assert [(e["event"], e["level"], e["what"]) for e in lines] == [
        ("write_refused", "warning", "checkpoint")]
    assert (lines[0]["worker"], lines[0]["conversation"], lines[0]["current_token"]) == (
        "worker-old", CONV, 2)
    assert "held by worker-new" in lines[0]["message"]
