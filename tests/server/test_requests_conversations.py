"""Conversation requests beyond CRUD over protocol v2: `conversation_messages_list` answers a
conversation's messages in Letta's shape after a real turn through the fake provider, pages
them and names a bad query field; `conversation_fork` copies the history into a new
conversation; `conversation_compact` summarises it through the provider and
`conversation_recompile` compiles its system prompt again; a scoped token gets the same answer
for another agent's conversation as for a made-up id."""

from __future__ import annotations

import asyncio
from pathlib import Path

import orjson
import pytest

from tests.server.requests_client import admin_client, ask, same_answer, token
from tests.server.support import MODEL, Client, point_at
from tether.backends.local.store import LocalStore
from tether.testing.fake_provider import FakeProvider


def test_messages_are_listed_in_letta_shape_within_scope(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    project = tmp_path / "project"
    project.mkdir()
    with FakeProvider([{"text": "hello back"}]) as fake:
        point_at(fake, monkeypatch)

        async def scenario() -> None:
            async with admin_client(project) as (srv, c):
                runtime = (await c.start(project))["runtime"]
                await c.say(runtime, "hello there", request_id="t1")
                await c.of_type("turn_finished", request_id="t1")
                conv, agent = runtime["conversation_id"], runtime["agent_id"]

                listed = await ask(c, "conversation_messages_list", conversation_id=conv)
                assert listed["success"], listed
                kinds = [(m["message_type"], m.get("content")) for m in listed["messages"]]
                assert kinds == [("user_message", "hello there"),
                                 ("assistant_message", "hello back")], kinds
                first, last = listed["messages"]
                newest = await ask(c, "conversation_messages_list", conversation_id=conv,
                                   query={"limit": 1, "order": "desc"})
                assert [m["id"] for m in newest["messages"]] == [last["id"]]
                older = await ask(c, "conversation_messages_list", conversation_id=conv,
                                  query={"before": last["id"]})
                assert [m["id"] for m in older["messages"]] == [first["id"]]
                bad = await ask(c, "conversation_messages_list", conversation_id=conv,
                                query={"limit": 0})
                assert bad["success"] is False and "query.limit" in bad["error"]
                assert bad["messages"] == []
                odd = await ask(c, "conversation_messages_list", conversation_id=conv,
                                query={"page": 2})
                assert odd["success"] is False and "query.page" in odd["error"]

                forked = await ask(c, "conversation_fork", conversation_id=conv,
                                   body={"hidden": True})
                assert forked["success"], forked
                fork = forked["conversation"]["id"]
                assert forked["conversation"] == {"id": fork} and fork != conv
                copy = await ask(c, "conversation_messages_list", conversation_id=fork)
                assert copy["messages"] == listed["messages"]
                record = (await ask(c, "conversation_retrieve", conversation_id=fork))
                assert record["conversation"]["agent_id"] == agent
                assert record["conversation"]["hidden"] is True
                assert record["conversation"]["forked_from"] == conv

                other = (await ask(c, "agent_create", body={"model": MODEL}))
                other_id = other["agent"]["id"]
                async with srv.connect(additional_headers=token(agents=[other_id])) as ws2:
                    s = Client(ws2)
                    hidden = await ask(s, "conversation_messages_list", conversation_id=conv)
                    guess = "local-conv-00000000-0000-0000-0000-000000000000"
                    absent = await ask(s, "conversation_messages_list", conversation_id=guess)
                    assert hidden["success"] is False and hidden["messages"] == []
                    assert same_answer(hidden, absent, (conv, guess)), (hidden, absent)
                    default = await ask(s, "conversation_messages_list",
                                        conversation_id="default", agent_id=agent)
                    made_up = "agent-local-33333333-3333-3333-3333-333333333333"
                    nobody = await ask(s, "conversation_messages_list",
                                       conversation_id="default", agent_id=made_up)
                    assert same_answer(default, nobody, (agent, made_up)), (default, nobody)
                    hidden = await ask(s, "conversation_fork", conversation_id=conv)
                    absent = await ask(s, "conversation_fork", conversation_id=guess)
                    assert hidden["success"] is False and hidden["conversation"] is None
                    assert same_answer(hidden, absent, (conv, guess)), (hidden, absent)
                async with srv.connect(additional_headers=token(conversations=[conv])) as ws3:
                    mine = await ask(Client(ws3), "conversation_messages_list",
                                     conversation_id=conv)
                    assert [m["id"] for m in mine["messages"]] == [first["id"], last["id"]]
                    no = await ask(Client(ws3), "conversation_fork", conversation_id=conv)
                    assert no["success"] is False and "scoped" in no["error"]

        asyncio.run(scenario())



def test_a_conversation_is_compacted_and_its_prompt_recompiled_within_scope(
    tmp_path: Path, tether_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    project = tmp_path / "project"
    project.mkdir()
    script = [{"text": "first answer"}, {"text": "second answer"},
              {"text": "They greeted each other twice."}]
    with FakeProvider(script) as fake:
        point_at(fake, monkeypatch)

        async def scenario() -> None:
            async with admin_client(project) as (srv, c):
                runtime = (await c.start(project))["runtime"]
                for n, text in enumerate(("hello", "hello again")):
                    await c.say(runtime, text, request_id=f"t{n}")
                    await c.of_type("turn_finished", request_id=f"t{n}")
                conv, agent = runtime["conversation_id"], runtime["agent_id"]

                other = (await ask(c, "agent_create", body={"model": MODEL}))["agent"]["id"]
                async with srv.connect(additional_headers=token(agents=[other])) as ws2:
                    s = Client(ws2)
                    guess = "local-conv-00000000-0000-0000-0000-000000000000"
                    for kind in ("conversation_compact", "conversation_recompile"):
                        hidden = await ask(s, kind, conversation_id=conv)
                        absent = await ask(s, kind, conversation_id=guess)
                        assert hidden["success"] is False, hidden
                        assert same_answer(hidden, absent, (conv, guess)), (hidden, absent)
                assert len(fake.requests) == 2  # nothing was compacted for the scoped client

                again = await ask(c, "conversation_recompile", conversation_id=conv)
                assert again["success"] and f"AGENT_ID: {agent}" in again["result"], again
                cached = LocalStore(tether_home).conversation_dir(agent, conv) / (
                    "system-prompt.json")
                assert orjson.loads(cached.read_bytes())["content"] == again["result"]
                before = cached.read_bytes()
                trial = await ask(c, "conversation_recompile", conversation_id=conv,
                                  body={"dry_run": True})
                assert trial["success"] and f"CONVERSATION_ID: {conv}" in trial["result"], trial
                assert cached.read_bytes() == before  # a dry run stores nothing
                # A conversation with no runtime on this server: one is built for the call.
                idle = await ask(c, "conversation_recompile", conversation_id="default",
                                 body={"agent_id": other})
                assert idle["success"] and f"AGENT_ID: {other}" in idle["result"], idle

                bad = await ask(c, "conversation_compact", conversation_id=conv,
                                body={"compaction_settings": {"mode": "half"}})
                assert bad["success"] is False and "mode" in bad["error"]
                assert bad["compaction"] is None
                done = await ask(c, "conversation_compact", conversation_id=conv,
                                 body={"compaction_settings": {"mode": "all"}})
                assert done["success"], done
                assert done["compaction"]["summary"] == "They greeted each other twice."
                assert done["compaction"]["num_messages_before"] == 4
                listed = await ask(c, "conversation_messages_list", conversation_id=conv)
                assert "They greeted each other twice." in str(listed["messages"])

        asyncio.run(scenario())
