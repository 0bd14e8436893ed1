"""`cron_update` over protocol v2: a task's fields changed in $TETHER_HOME/cron.db as the client
asked (checked as `cron_add` checks them, a bad cron refused with the task left as it was),
`crons_updated` to the clients that see the agent, and a scoped token that cannot tell another
agent's task from a made-up id nor move its own task into a conversation it does not hold."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tests.server.requests_client import admin_client, ask, same_answer, token
from tests.server.support import MODEL, Client, point_at
from tether.runtime.cron.store import CronStore
from tether.testing.fake_provider import FakeProvider

EVERY = {"cron": "0 9 * * 1-5", "recurring": True, "prompt": "stand-up notes",
         "name": "standup", "description": "weekday notes", "timezone": "UTC"}


def stored(home: Path, task_id: str) -> dict[str, object]:
    store = CronStore(home)
    try:
        return store.get(task_id)
    finally:
        store.close()


def test_a_task_is_updated_within_scope(
    tmp_path: Path, tether_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    project = tmp_path / "project"
    project.mkdir()
    monkeypatch.setenv("TETHER_CRON", "0")
    with FakeProvider([]) as fake:
        point_at(fake, monkeypatch)

        async def scenario() -> None:
            async with admin_client(project) as (srv, c):
                a, b = [(await ask(c, "agent_create", body={"model": MODEL}))["agent"]["id"]
                        for _ in "ab"]
                task_a = (await ask(c, "cron_add", agent_id=a, **EVERY))["task"]
                task_b = (await ask(c, "cron_add", agent_id=b, **EVERY))["task"]["id"]

                changed = await ask(c, "cron_update", task_id=task_a["id"], cron="30 8 * * *",
                                    prompt="morning notes", name="morning")
                assert changed["success"], changed
                assert changed["task"] == {**task_a, "cron": "30 8 * * *",
                                           "prompt": "morning notes", "name": "morning",
                                           "jitter_offset_ms": changed["task"]["jitter_offset_ms"]}
                assert stored(tether_home, task_a["id"]) == changed["task"]
                heard = [f for f in c.seen if f.get("type") == "crons_updated"]
                assert len(heard) == 3 and heard[-1]["agent_id"] == a  # add, add, update

                bad = await ask(c, "cron_update", task_id=task_a["id"], cron="61 * * * *")
                assert bad["success"] is False and "cron" in bad["error"], bad
                empty = await ask(c, "cron_update", task_id=task_a["id"], prompt="")
                assert empty["success"] is False and "prompt" in empty["error"], empty
                once = await ask(c, "cron_update", task_id=task_a["id"], recurring=False)
                assert once["success"] is False and "scheduled_for" in once["error"], once
                assert stored(tether_home, task_a["id"]) == changed["task"]
                shot = await ask(c, "cron_update", task_id=task_a["id"], recurring=False,
                                 scheduled_for="2999-01-01T09:00")
                assert shot["success"] and shot["task"]["recurring"] is False, shot
                assert shot["task"]["scheduled_for"].startswith("2999-01-01T09:00")

                async with srv.connect(additional_headers=token(agents=[a])) as ws2:
                    s = Client(ws2)
                    hidden = await ask(s, "cron_update", task_id=task_b, prompt="mine now")
                    absent = await ask(s, "cron_update", task_id="deadbeef", prompt="mine now")
                    assert hidden["success"] is False
                    assert same_answer(hidden, absent, (task_b, "deadbeef")), (hidden, absent)
                    assert stored(tether_home, task_b)["prompt"] == "stand-up notes"
                    other = (await ask(c, "conversation_create", body={"agent_id": b}))
                    conv_b = other["conversation"]["id"]
                    moved = await ask(s, "cron_update", task_id=task_a["id"],
                                      conversation_id=conv_b)
                    made_up = await ask(s, "cron_update", task_id=task_a["id"],
                                        conversation_id="local-conv-404")
                    assert moved["success"] is False
                    assert same_answer(moved, made_up, (conv_b, "local-conv-404"))
                    assert stored(tether_home, task_a["id"])["conversation_id"] == "default"
                    mine = await ask(s, "cron_update", task_id=task_a["id"], description="d2")
                    assert mine["success"] and mine["task"]["description"] == "d2", mine

        asyncio.run(scenario())
