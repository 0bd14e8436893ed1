"""Schedules over protocol v2 (`cron_add`, `cron_list`, `cron_get`, `cron_delete`,
`cron_delete_all`): tasks written to $TETHER_HOME/cron.db as `tether cron` writes them,
`crons_updated` to the clients that may see the agent, and a scoped token that sees only its
agent's tasks and cannot tell another agent's task from a made-up id."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tests.server.requests_client import admin_client, ask, same_answer, token
from tests.server.support import MODEL, Client, point_at
from tether.runtime.cron.store import CronStore
from tether.testing.fake_provider import FakeProvider


def stored(home: Path) -> list[str]:
    store = CronStore(home)
    try:
        return [t["id"] for t in store.tasks()]
    finally:
        store.close()


def test_schedules_are_added_listed_and_deleted_within_scope(
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
                every = {"cron": "0 9 * * 1-5", "recurring": True, "prompt": "stand-up notes",
                         "name": "standup", "description": "weekday notes", "timezone": "UTC"}
                added = await ask(c, "cron_add", agent_id=a, **every)
                assert added["success"], added
                task_a = added["task"]["id"]
                assert added["task"]["cron"] == "0 9 * * 1-5" and added["task"]["agent_id"] == a
                task_b = (await ask(c, "cron_add", agent_id=b, **every))["task"]["id"]
                once = await ask(c, "cron_add", agent_id=a, recurring=False, prompt="once",
                                 name="once", description="", cron="",
                                 scheduled_for="2999-01-01T09:00")
                assert once["success"] and once["task"]["recurring"] is False, once
                assert set(stored(tether_home)) == {task_a, task_b, once["task"]["id"]}
                bad = await ask(c, "cron_add", agent_id=a, **{**every, "cron": "not cron"})
                assert bad["success"] is False and "cron" in bad["error"]

                got = await ask(c, "cron_get", task_id=task_a)
                assert got["found"] and got["task"]["name"] == "standup"
                runs = await ask(c, "cron_runs", task_id=task_a)
                assert runs["page"] == {"entries": [], "total": 0, "offset": 0, "limit": 20,
                                        "hasMore": False, "nextOffset": None}
                listed = await ask(c, "cron_list", agent_id=a)
                assert {t["id"] for t in listed["tasks"]} == {task_a, once["task"]["id"]}

                async with srv.connect(additional_headers=token(agents=[a])) as ws2:
                    s = Client(ws2)
                    mine = await ask(s, "cron_list")
                    assert {t["id"] for t in mine["tasks"]} == {task_a, once["task"]["id"]}
                    hidden = await ask(s, "cron_runs", task_id=task_b)
                    absent = await ask(s, "cron_runs", task_id="deadbeef")
                    assert hidden["success"] is False
                    assert same_answer(hidden, absent, (task_b, "deadbeef"))
                    for kind in ("cron_get", "cron_delete"):
                        hidden = await ask(s, kind, task_id=task_b)
                        absent = await ask(s, kind, task_id="deadbeef")
                        assert hidden["found"] is False, hidden
                        assert same_answer(hidden, absent, (task_b, "deadbeef"))
                    refused = await ask(s, "cron_add", agent_id=b, **every)
                    guess = "agent-local-33333333-3333-3333-3333-333333333333"
                    made_up = await ask(s, "cron_add", agent_id=guess, **every)
                    assert same_answer(refused, made_up, (b, guess)), (refused, made_up)
                    assert task_b in stored(tether_home)

                    gone = await ask(c, "cron_delete", task_id=task_a)
                    assert gone == {**gone, "success": True, "found": True}
                    heard = await s.of_type("crons_updated")
                    assert heard["agent_id"] == a
                    cleared = await ask(c, "cron_delete_all", agent_id=b)
                    assert cleared["deleted"] == 1
                    assert stored(tether_home) == [once["task"]["id"]]

        asyncio.run(scenario())
