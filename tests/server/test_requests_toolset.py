"""`update_toolset` over protocol v2 (reference `applyToolsetUpdateForRuntime`): the preference is
kept on the agent's record for that conversation, the running runtime is rebuilt, and the next
turn offers the new toolset's tools to the provider (seen in the fake's recorded request); a bad
preference is named, and a token that does not reach the conversation gets the answer a made-up
conversation gets, with nothing changed."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tests.server.requests_client import admin_client, ask, same_answer, token
from tests.server.support import Client, point_at
from tether.backends.local.store import LocalStore
from tether.testing.fake_provider import FakeProvider


def offered(request: dict) -> set[str]:
    return {tool["name"] for tool in request["body"].get("tools") or []}


def test_update_toolset_changes_the_tools_of_the_next_turn(
    tmp_path: Path, tether_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    project = tmp_path / "project"
    project.mkdir()
    with FakeProvider([{"text": "one"}, {"text": "two"}]) as fake:
        point_at(fake, monkeypatch)

        async def scenario() -> None:
            async with admin_client(project) as (srv, c):
                info = await ask(c, "app_server_info")
                assert info["capabilities"]["toolset_update"] is True
                runtime = (await c.start(project))["runtime"]
                await c.say(runtime, "hi", request_id="t0")
                await c.of_type("turn_finished", request_id="t0")
                assert "Bash" in offered(fake.requests[0])
                assert "exec_command" not in offered(fake.requests[0])

                bad = await ask(c, "update_toolset", runtime=runtime, toolset_preference="nope")
                assert bad["success"] is False and "toolset_preference" in bad["error"]
                done = await ask(c, "update_toolset", runtime=runtime,
                                 toolset_preference="codex")
                assert done["success"], done
                assert done["current_toolset"] == "codex"
                assert done["current_toolset_preference"] == "codex"
                assert done["runtime"] == runtime
                status = next(  # the rebuilt runtime's status went out before the answer
                    f for f in c.seen if f.get("type") == "update_device_status"
                    and f["device_status"]["current_toolset_preference"] == "codex")
                assert "exec_command" in status["device_status"]["current_loaded_tools"]
                agent = LocalStore(tether_home).get_agent(runtime["agent_id"])
                assert agent.extra["toolsets_by_conversation"] == {
                    runtime["conversation_id"]: "codex"}

                await c.say(runtime, "again", request_id="t1")
                await c.of_type("turn_finished", request_id="t1")
                tools = offered(fake.requests[1])
                assert "exec_command" in tools and "Bash" not in tools, tools

                other = (await ask(c, "conversation_create",
                                   body={"agent_id": runtime["agent_id"]}))["conversation"]["id"]
                theirs = {"agent_id": runtime["agent_id"], "conversation_id": other}
                made_up = {"agent_id": runtime["agent_id"], "conversation_id": "local-conv-404"}
                narrow = token(agents=[runtime["agent_id"]],
                               conversations=[runtime["conversation_id"]])
                async with srv.connect(additional_headers=narrow) as ws:
                    s = Client(ws)
                    refused = await ask(s, "update_toolset", runtime=theirs,
                                        toolset_preference="gemini")
                    absent = await ask(s, "update_toolset", runtime=made_up,
                                       toolset_preference="gemini")
                    assert refused["success"] is False
                    assert same_answer(refused, absent, (other, "local-conv-404"))
                agent = LocalStore(tether_home).get_agent(runtime["agent_id"])
                assert other not in agent.extra["toolsets_by_conversation"]

        asyncio.run(scenario())
