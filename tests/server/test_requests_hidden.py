"""Hidden conversations over protocol v2: `conversation_list` leaves them out, as the reference's
local backend does, unless the query says `include_hidden: true` (a created `hidden` one and a
hidden fork alike), a scoped token's list follows the same rule, and a hidden conversation is
still retrieved by its id."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tests.server.requests_client import admin_client, ask, token
from tests.server.support import MODEL, Client, point_at
from tether.backends.local.store import LocalStore
from tether.testing.fake_provider import FakeProvider


def test_hidden_conversations_are_listed_only_when_asked_for(
    tmp_path: Path, tether_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    project = tmp_path / "project"
    project.mkdir()
    with FakeProvider([]) as fake:
        point_at(fake, monkeypatch)

        async def scenario() -> None:
            async with admin_client(project) as (srv, admin):
                agent = (await ask(admin, "agent_create", body={"model": MODEL}))["agent"]["id"]
                shown = (await ask(admin, "conversation_create",
                                   body={"agent_id": agent}))["conversation"]["id"]
                made = await ask(admin, "conversation_create",
                                 body={"agent_id": agent, "hidden": True})
                hidden = made["conversation"]["id"]
                assert made["conversation"]["hidden"] is True
                assert LocalStore(tether_home).get_conversation(hidden).extra["hidden"] is True
                fork = await ask(admin, "conversation_fork", conversation_id=shown,
                                 body={"hidden": True})
                forked = fork["conversation"]["id"]

                listed = await ask(admin, "conversation_list", query={"agent_id": agent})
                assert [c["id"] for c in listed["conversations"]] == [shown]
                everything = await ask(admin, "conversation_list",
                                       query={"agent_id": agent, "include_hidden": True})
                assert {c["id"] for c in everything["conversations"]} == {shown, hidden, forked}
                bad = await ask(admin, "conversation_list", query={"include_hidden": "yes"})
                assert bad["success"] is False and "include_hidden" in bad["error"]
                bad = await ask(admin, "conversation_create",
                                body={"agent_id": agent, "hidden": 1})
                assert bad["success"] is False and "body.hidden" in bad["error"]

                async with srv.connect(additional_headers=token(agents=[agent])) as ws:
                    scoped = Client(ws)
                    own = await ask(scoped, "conversation_list")
                    assert [c["id"] for c in own["conversations"]] == [shown]
                    own_all = await ask(scoped, "conversation_list",
                                        query={"include_hidden": True})
                    assert {c["id"] for c in own_all["conversations"]} == {shown, hidden, forked}
                    got = await ask(scoped, "conversation_retrieve", conversation_id=hidden)
                    assert got["success"] and got["conversation"]["hidden"] is True
                narrow = token(agents=[agent], conversations=[hidden])
                async with srv.connect(additional_headers=narrow) as ws:
                    scoped = Client(ws)
                    assert (await ask(scoped, "conversation_list"))["conversations"] == []
                    own_all = await ask(scoped, "conversation_list",
                                        query={"include_hidden": True})
                    assert [c["id"] for c in own_all["conversations"]] == [hidden]

        asyncio.run(scenario())
