"""e12: a client whose token is scoped to conversation A cannot reach conversation B, over the
websocket protocol or the OpenAI API, and cannot tell whether B exists."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import jwt
import pytest
from websockets.exceptions import InvalidStatus

from tests.server.support import MODEL, Client, InProcess, point_at, raw_http
from tether.server import auth
from tether.testing.fake_provider import FakeProvider

SECRET = b"s" * 32
POLICY = auth.AuthPolicy("signed-bearer-token", secret=SECRET)


def token(**scope: Any) -> dict[str, str]:
    claims = {"exp": time.time() + 300, **scope}
    return {"Authorization": f"Bearer {jwt.encode(claims, SECRET, algorithm='HS256')}"}


@pytest.fixture
def project(tmp_path: Path) -> Path:
    d = tmp_path / "project"
    d.mkdir()
    return d


async def start(srv: InProcess, headers: dict[str, str], **fields: Any) -> dict[str, Any]:
    async with srv.connect(additional_headers=headers) as ws:
        c = Client(ws)
        await c.send(
            {"type": "runtime_start", "request_id": "r", "cwd": str(srv.options.cwd), **fields}
        )
        return await c.of_type("runtime_start_response")


def test_conversation_scoped_token_reaches_only_its_conversation(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with FakeProvider([{"text": "hi"}]) as fake:
        point_at(fake, monkeypatch)

        async def scenario() -> None:
            async with InProcess(project, policy=POLICY) as srv:
                admin = token()
                first = await start(  # sandboxed: a scoped client may join only such a runtime
                    srv, admin, create_agent={"body": {"model": MODEL}}, create_conversation={},
                    workspace_sandbox=True,
                )
                agent, conv_a = first["runtime"]["agent_id"], first["runtime"]["conversation_id"]
                second = await start(srv, admin, agent_id=agent, create_conversation={})
                conv_b = second["runtime"]["conversation_id"]
                scoped = token(agents=[agent], conversations=[conv_a])

                ok = await start(srv, scoped, agent_id=agent, conversation_id=conv_a)
                assert ok["success"], ok
                refused = {
                    "other conversation": await start(
                        srv, scoped, agent_id=agent, conversation_id=conv_b
                    ),
                    "guessed id": await start(
                        srv, scoped, agent_id=agent, conversation_id="conv-guess"
                    ),
                    "default": await start(srv, scoped, agent_id=agent, conversation_id="default"),
                    "new conversation": await start(
                        srv, scoped, agent_id=agent, create_conversation={}
                    ),
                    "new agent": await start(srv, scoped, create_agent={"body": {"model": MODEL}}),
                }
                for why, answer in refused.items():
                    assert answer["success"] is False, why
                    assert "token" in answer["error"], (why, answer["error"])
                # Existing and made-up ids are refused in the same words: no existence oracle.
                assert refused["other conversation"]["error"].replace(conv_b, "X") == (
                    refused["guessed id"]["error"].replace("conv-guess", "X")
                )
                assert len(srv.server.ctx.store.list_agents()) == 1  # nothing was created

                # Addressing B's runtime directly on the scoped connection is refused too.
                async with srv.connect(additional_headers=scoped) as ws:
                    c = Client(ws)
                    await c.send(
                        {
                            "type": "input",
                            "request_id": "i",
                            "runtime": {"agent_id": agent, "conversation_id": conv_b},
                            "payload": {
                                "kind": "create_message",
                                "messages": [{"role": "user", "content": "x"}],
                            },
                        }
                    )
                    error = await c.of_type("error")
                    assert "not started on this connection" in json.dumps(error)

                other_agent = await start(
                    srv,
                    token(agents=["agent-someone-else"]),
                    agent_id=agent,
                    conversation_id=conv_a,
                )
                assert (
                    other_agent["success"] is False
                    and f"does not grant agent {agent}" in other_agent["error"]
                )

        asyncio.run(scenario())


@pytest.mark.parametrize("scope", [{"agents": "agent-1"}, {"conversations": [1]}, {"agents": [""]}])
def test_malformed_scope_claims_are_refused_at_the_upgrade(
    project: Path, scope: dict[str, Any]
) -> None:
    async def scenario() -> None:
        async with InProcess(project, policy=POLICY) as srv:
            with pytest.raises(InvalidStatus) as err:
                async with srv.connect(additional_headers=token(**scope)):
                    pass
            assert err.value.response.status_code == 401

    asyncio.run(scenario())


def test_openai_api_shows_and_serves_only_granted_agents(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with FakeProvider([{"text": "hi"}]) as fake:
        point_at(fake, monkeypatch)

        async def scenario() -> None:
            async with InProcess(project, policy=POLICY, openai_api=True) as srv:
                store = srv.server.ctx.store
                mine = store.create_agent(model=MODEL, system="s", name="mine").id
                theirs = store.create_agent(model=MODEL, system="s", name="theirs").id
                scoped = token(agents=[mine])
                status, body = await raw_http(srv.port, "GET /v1/models HTTP/1.1", scoped)
                assert status == 200
                assert [m["id"] for m in json.loads(body)["data"]] == [mine]
                status, body = await raw_http(srv.port, f"GET /v1/models/{theirs} HTTP/1.1", scoped)
                assert status == 403 and "does not grant agent" in body
                status, body = await raw_http(
                    srv.port, "GET /v1/models/agent-made-up HTTP/1.1", scoped
                )
                assert status == 403  # not 404: a made-up id looks the same as someone else's

        asyncio.run(scenario())
