"""Agent and conversation CRUD over protocol v2 (`agent_*`, `conversation_*`): what each request
writes under TETHER_HOME, the `*_updated` notifications, a conversation with a client on it not
deleted, and a scoped token that lists only its own, creates nothing and cannot tell an
out-of-scope id from a made-up one."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tests.server.requests_client import POLICY, ask, same_answer, token
from tests.server.support import MODEL, Client, InProcess, point_at
from tether.backends.local.store import LocalStore, b64url, conversation_key
from tether.memory.memfs import memory_dir
from tether.testing.fake_provider import FakeProvider


@pytest.fixture
def project(tmp_path: Path) -> Path:
    d = tmp_path / "project"
    d.mkdir()
    return d


def test_agent_and_conversation_lifecycle(
    project: Path, tether_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with FakeProvider([]) as fake:
        point_at(fake, monkeypatch)

        async def scenario() -> None:
            async with InProcess(project) as srv, srv.connect() as ws, srv.connect() as ws2:
                c, watcher = Client(ws), Client(ws2)
                made = await ask(c, "agent_create", body={
                    "model": MODEL, "name": "alpha", "tags": ["red"],
                    "memory_blocks": [{"label": "persona", "value": "I am alpha"}],
                })
                assert made["success"], made
                agent = made["agent"]["id"]
                assert (tether_home / "agents" / f"{b64url(agent)}.json").is_file()
                assert "I am alpha" in (memory_dir(tether_home, agent) / "system" /
                                        "persona.md").read_text()
                heard = await watcher.of_type("agent_updated")
                assert heard["agent_id"] == agent and heard["agent"]["name"] == "alpha"

                listed = await ask(c, "agent_list", query={"tags": ["red"]})
                assert [a["id"] for a in listed["agents"]] == [agent]
                got = await ask(c, "agent_retrieve", agent_id=agent)
                assert got["agent"]["blocks"][0]["label"] == "persona"

                renamed = await ask(c, "agent_update", agent_id=agent, body={"name": "beta"})
                assert renamed["agent"]["name"] == "beta"
                assert LocalStore(tether_home).get_agent(agent).name == "beta"
                bad = await ask(c, "agent_update", agent_id=agent, body={"colour": "x"})
                assert bad["success"] is False and "colour" in bad["error"]
                assert bad["agent"] is None
                bad_model = await ask(c, "agent_create", body={"model": "nope"})
                assert bad_model["success"] is False and "nope" in bad_model["error"]
                assert len(LocalStore(tether_home).list_agents()) == 1

                conv = await ask(c, "conversation_create", body={"agent_id": agent})
                conv_id = conv["conversation"]["id"]
                convs = await ask(c, "conversation_list", query={"agent_id": agent})
                assert [x["id"] for x in convs["conversations"]] == [conv_id]
                summed = await ask(c, "conversation_update", conversation_id=conv_id,
                                   body={"summary": "planning"})
                assert summed["conversation"]["summary"] == "planning"
                again = await ask(c, "conversation_retrieve", conversation_id=conv_id)
                assert again["conversation"]["summary"] == "planning"
                heard = await watcher.of_type("conversation_updated",
                                              conversation_id=conv_id)
                assert heard["agent_id"] == agent

                # A client on the conversation: it is not deleted under it.
                async with srv.connect() as ws3:
                    user = Client(ws3)
                    await user.start(project, agent_id=agent, conversation_id=conv_id)
                    busy = await ask(c, "conversation_delete", conversation_id=conv_id)
                    assert busy["success"] is False and "has clients" in busy["error"]
                    assert busy["conversation_id"] == conv_id
                folder = tether_home / "conversations" / b64url(conversation_key(agent, conv_id))
                assert folder.is_dir()
                for _ in range(100):  # the server notices the client left
                    gone = await ask(c, "conversation_delete", conversation_id=conv_id)
                    if gone["success"]:
                        break
                    await asyncio.sleep(0.05)
                assert gone == {**gone, "success": True, "conversation_id": conv_id}
                assert not folder.exists()

                deleted = await ask(c, "agent_delete", agent_id=agent)
                assert deleted["success"] and deleted["agent_id"] == agent
                assert not (tether_home / "agents" / f"{b64url(agent)}.json").exists()
                assert not memory_dir(tether_home, agent).exists()
                missing = await ask(c, "agent_retrieve", agent_id=agent)
                assert missing["success"] is False and missing["agent"] is None

                await c.send({"type": "agent_list", "request_id": "x", "limt": 3})
                error = await c.of_type("error", request_id="x")
                assert "'limt'" in error["message"]

        asyncio.run(scenario())


def test_scoped_token_sees_only_its_own_and_learns_nothing_else(
    project: Path, tether_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with FakeProvider([]) as fake:
        point_at(fake, monkeypatch)

        async def scenario() -> None:
            async with (
                InProcess(project, policy=POLICY) as srv,
                srv.connect(additional_headers=token()) as ws,
            ):
                admin = Client(ws)
                a = (await ask(admin, "agent_create", body={"model": MODEL}))["agent"]["id"]
                b = (await ask(admin, "agent_create", body={"model": MODEL}))["agent"]["id"]
                conv_a = (await ask(admin, "conversation_create",
                                    body={"agent_id": a}))["conversation"]["id"]
                conv_a2 = (await ask(admin, "conversation_create",
                                     body={"agent_id": a}))["conversation"]["id"]
                conv_b = (await ask(admin, "conversation_create",
                                    body={"agent_id": b}))["conversation"]["id"]
                scoped_headers = token(agents=[a], conversations=[conv_a])
                async with srv.connect(additional_headers=scoped_headers) as ws2:
                    s = Client(ws2)
                    agents = await ask(s, "agent_list")
                    assert [x["id"] for x in agents["agents"]] == [a]
                    convs = await ask(s, "conversation_list")
                    assert [x["id"] for x in convs["conversations"]] == [conv_a]
                    assert (await ask(s, "conversation_list", query={"agent_id": b})
                            )["conversations"] == []

                    guess = "agent-local-00000000-0000-0000-0000-000000000000"
                    for kind, field, hidden, made_up in (
                        ("agent_retrieve", "agent_id", b, guess),
                        ("agent_update", "agent_id", b, guess),
                        ("agent_delete", "agent_id", b, guess),
                        ("conversation_retrieve", "conversation_id", conv_b, "local-conv-99"),
                        ("conversation_retrieve", "conversation_id", conv_a2, "local-conv-98"),
                        ("conversation_update", "conversation_id", conv_b, "local-conv-99"),
                        ("conversation_delete", "conversation_id", conv_b, "local-conv-99"),
                    ):
                        extra = {"body": {"name": "x"}} if kind == "agent_update" else {}
                        if kind == "conversation_update":
                            extra = {"body": {"summary": "x"}}
                        out = await ask(s, kind, **{field: hidden}, **extra)
                        absent = await ask(s, kind, **{field: made_up}, **extra)
                        assert out["success"] is False, (kind, out)
                        assert same_answer(out, absent, (hidden, made_up)), (out, absent)

                    refused = await ask(s, "agent_create", body={"model": MODEL})
                    assert refused["success"] is False and "scoped" in refused["error"]
                    refused = await ask(s, "conversation_create", body={"agent_id": a})
                    assert refused["success"] is False and "scoped" in refused["error"]
                    store = LocalStore(tether_home)
                    assert len(store.list_agents()) == 2 and store.get_agent(b).name == "tether"
                    assert len(store.list_conversations(a)) == 2

                    # Its own agent and conversation it may read and change.
                    mine = await ask(s, "conversation_update", conversation_id=conv_a,
                                     body={"summary": "mine"})
                    assert mine["success"], mine
                    # It hears of changes to its own agent only (B's change comes first).
                    await ask(admin, "agent_update", agent_id=b, body={"name": "bee"})
                    await ask(admin, "agent_update", agent_id=a, body={"name": "ay"})
                    heard = await s.of_type("agent_updated")
                    assert heard["agent_id"] == a

        asyncio.run(scenario())


def test_conversation_scoped_token_reaches_its_conversation_and_its_agent_read_only(
    project: Path, tether_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with FakeProvider([]) as fake:
        point_at(fake, monkeypatch)

        async def scenario() -> None:
            async with (
                InProcess(project, policy=POLICY) as srv,
                srv.connect(additional_headers=token()) as ws,
            ):
                admin = Client(ws)
                a, b = [(await ask(admin, "agent_create", body={"model": MODEL}))["agent"]["id"]
                        for _ in "ab"]
                mine = (await ask(admin, "conversation_create",
                                  body={"agent_id": a}))["conversation"]["id"]
                other = (await ask(admin, "conversation_create",
                                   body={"agent_id": a}))["conversation"]["id"]
                async with srv.connect(additional_headers=token(conversations=[mine])) as ws2:
                    s = Client(ws2)
                    assert [x["id"] for x in (await ask(s, "agent_list"))["agents"]] == [a]
                    convs = (await ask(s, "conversation_list"))["conversations"]
                    assert [x["id"] for x in convs] == [mine]
                    assert (await ask(s, "agent_retrieve", agent_id=a))["success"]
                    hidden = await ask(s, "agent_retrieve", agent_id=b)
                    guess = "agent-local-44444444-4444-4444-4444-444444444444"
                    assert same_answer(hidden, await ask(s, "agent_retrieve", agent_id=guess),
                                       (b, guess))
                    hidden = await ask(s, "conversation_retrieve", conversation_id=other)
                    made_up = await ask(s, "conversation_retrieve", conversation_id="local-conv-77")
                    assert same_answer(hidden, made_up, (other, "local-conv-77"))
                    # Changing an agent reaches past its conversations: refused whatever the id.
                    for agent_id in (a, b, guess):
                        no = await ask(s, "agent_update", agent_id=agent_id, body={"name": "x"})
                        assert no["success"] is False and "scoped to conversations" in no["error"]
                    assert LocalStore(tether_home).get_agent(a).name == "tether"

        asyncio.run(scenario())
