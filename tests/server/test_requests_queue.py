"""`remove_queue_item`: a waiting input taken out of the queue is never run (the provider is
asked once), recorded as removed, and an item that is not waiting, or a runtime this connection
did not start, is refused."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tests.server.requests_client import ask
from tests.server.support import Client, InProcess, point_at
from tether.testing.fake_provider import FakeProvider


def test_a_queued_input_is_removed_and_never_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    project = tmp_path / "project"
    project.mkdir()
    with FakeProvider([{"text": "first answer", "delay_ms": 800}, {"text": "never"}]) as fake:
        point_at(fake, monkeypatch)

        async def scenario() -> None:
            async with InProcess(project) as srv, srv.connect() as ws:
                c = Client(ws)
                runtime = (await c.start(project))["runtime"]
                await c.say(runtime, "first", request_id="q1")
                assert (await c.of_type("input_accepted", request_id="q1"))[
                    "disposition"] == "started"
                await c.say(runtime, "second", request_id="q2")
                queued = await c.of_type("input_accepted", request_id="q2")
                assert queued["disposition"] == "queued"
                item = queued["queue_item_id"]
                gone = await ask(c, "remove_queue_item", runtime=runtime, item_id=item)
                assert gone == {**gone, "success": True, "item_id": item}, gone
                removed = [f for f in c.seen  # sent as it was taken out, before the response
                           if f.get("type") == "update_queue" and item in f.get("removed", [])]
                assert removed and removed[0]["queue"] == []
                again = await ask(c, "remove_queue_item", runtime=runtime, item_id=item)
                assert again["success"] is False and "not waiting" in again["error"]
                other = {**runtime, "conversation_id": "local-conv-404"}
                no = await ask(c, "remove_queue_item", runtime=other, item_id=item)
                assert no["success"] is False and "not started" in no["error"]
                await c.of_type("turn_finished", request_id="q1")
                await asyncio.sleep(0.3)
                assert len(fake.requests) == 1  # the removed input never reached the model

        asyncio.run(scenario())
