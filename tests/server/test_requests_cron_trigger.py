"""`cron_trigger` over protocol v2 (reference §12.3, §13 "run now"): each trigger fires the task
once through the scheduler's durable path (its own `cron:<task>:manual:<id>` fire key, then the
conversation's queue, whose turn reaches the provider), the answer carries the reference's
`found` and `task`; a token that does not reach the task gets the answer a made-up id gets, and
nothing runs."""

from __future__ import annotations

import asyncio
import sqlite3
from pathlib import Path

import pytest

from tests.server.requests_client import admin_client, ask, same_answer, token
from tests.server.support import MODEL, Client, point_at
from tether.testing.fake_provider import FakeProvider


def manual_fires(home: Path, task_id: str) -> list[str]:
    db = sqlite3.connect(home / "cron.db")
    try:
        rows = db.execute("SELECT key FROM fires WHERE task_id = ? ORDER BY updated_ms",
                          (task_id,)).fetchall()
    finally:
        db.close()
    return [key for (key,) in rows]


def test_cron_trigger_fires_the_task_now_through_the_durable_path(
    tmp_path: Path, tether_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    project = tmp_path / "project"
    project.mkdir()
    with FakeProvider([{"text": "ran"}] * 2) as fake:
        point_at(fake, monkeypatch)

        async def scenario() -> None:
            async with admin_client(project) as (srv, c):
                assert srv.server is not None
                srv.server.start_scheduler()
                info = await ask(c, "app_server_info")
                assert info["capabilities"]["cron_management"] is True
                a, b = [(await ask(c, "agent_create", body={"model": MODEL}))["agent"]["id"]
                        for _ in "ab"]
                task = (await ask(c, "cron_add", agent_id=a, name="nightly", description="",
                                  cron="0 3 * * *", recurring=True, prompt="run it now"))["task"]
                other = (await ask(c, "cron_add", agent_id=b, name="theirs", description="",
                                   cron="0 3 * * *", recurring=True, prompt="not mine"))["task"]

                fired = await ask(c, "cron_trigger", task_id=task["id"])
                assert fired["success"] and fired["found"] is True, fired
                assert fired["outcome"] == "queued" and fired["reason"] == "manual_trigger"
                assert fired["task"]["id"] == task["id"] and fired["task"]["fire_count"] == 1
                for _ in range(400):
                    if fake.requests:
                        break
                    await asyncio.sleep(0.05)
                assert "Prompt: run it now" in str(fake.requests[0]["body"])
                again = await ask(c, "cron_trigger", task_id=task["id"])
                assert again["success"] and again["task"]["fire_count"] == 2
                keys = manual_fires(tether_home, task["id"])
                assert len(keys) == 2 and len(set(keys)) == 2, keys
                assert all(k.startswith(f"cron:{task['id']}:manual:") for k in keys)

                async with srv.connect(additional_headers=token(agents=[a])) as ws:
                    s = Client(ws)
                    hidden = await ask(s, "cron_trigger", task_id=other["id"])
                    absent = await ask(s, "cron_trigger", task_id="0badf00d")
                    assert hidden["success"] is False and hidden["found"] is False
                    assert hidden["task"] is None
                    assert same_answer(hidden, absent, (other["id"], "0badf00d"))
                assert manual_fires(tether_home, other["id"]) == []
                await c.send({"type": "cron_trigger", "request_id": "x", "task": "y"})
                error = await c.of_type("error", request_id="x")
                assert "'task'" in error["message"]
                for _ in range(400):  # both turns over before the server closes
                    if len(fake.requests) == 2 and not any(
                            rt.busy for rt in srv.server.runtimes.values()):
                        break
                    await asyncio.sleep(0.05)
            sent = str([r["body"] for r in fake.requests])
            assert "not mine" not in sent

        asyncio.run(scenario())
