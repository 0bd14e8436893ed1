"""The request families on a fleet (issue 31 item 1): two real `tether server --store` workers,
each with a TETHER_HOME of its own, on one database. What one worker creates, updates, forks or
deletes through the App Server's requests the other sees at once, because both answer from the
store's rows; neither writes an agent or conversation record, or a secret, into its home."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from websockets.asyncio.client import connect

from tests.fleet.support import wait_until
from tests.fleet.test_pg_transcripts_e2e import _states
from tests.server.requests_client import ask
from tests.server.support import Client, ServerProcess, bash, server_env
from tether.testing.fake_provider import FakeProvider

MODEL = "anthropic/claude-test"


async def _ask(url: str, kind: str, **fields: Any) -> dict[str, Any]:
    async with connect(url) as ws:
        answer = await ask(Client(ws), kind, **fields)
    assert answer["success"] is True, answer
    return answer


async def _refused(url: str, kind: str, **fields: Any) -> dict[str, Any]:
    async with connect(url) as ws:
        answer = await ask(Client(ws), kind, **fields)
    assert answer["success"] is False, answer
    return answer


async def _turn(url: str, project: Path, agent_id: str, conversation_id: str, text: str) -> None:
    async with connect(url) as ws:
        c = Client(ws)
        runtime = (await c.start(project, agent_id=agent_id,
                                 conversation_id=conversation_id))["runtime"]
        await c.say(runtime, text, request_id="in-1", idempotency_key="k-1")
        await c.of_type("input_accepted", request_id="in-1")
        await c.of_type("turn_finished", timeout=60)


def _texts(page: dict[str, Any]) -> list[str]:
    out = []
    for message in page["messages"]:
        content = message.get("content")
        if isinstance(content, str):
            out.append(content)
        elif isinstance(content, list):
            out.extend(p.get("text", "") for p in content if isinstance(p, dict))
    return [t for t in out if t]


def test_what_one_worker_manages_the_other_serves(tmp_path: Path, pg_url: str) -> None:
    project = tmp_path / "project"
    project.mkdir()
    home_a, home_b = tmp_path / "home-a", tmp_path / "home-b"
    with FakeProvider([{"text": "the answer is 42"}]) as fake:
        a = ServerProcess(server_env(fake.url, home_a, tmp_path), project, "--store", pg_url)
        b = ServerProcess(server_env(fake.url, home_b, tmp_path), project, "--store", pg_url)
        try:
            asyncio.run(_managed_across_workers(a.url, b.url, project, pg_url))
        finally:
            a.stop()
            b.stop()
        assert fake.violations == [] and len(fake.requests) == 1
    for home in (home_a, home_b):  # the records are rows: no home holds a copy
        assert not list(home.glob("agents/*.json")), home
        assert not list(home.glob("conversations/*/conversation.json")), home
        assert not list(home.glob("conversations/*/messages.jsonl")), home
        assert not list(home.glob("agents/*/reflection.json")), home


async def _managed_across_workers(a: str, b: str, project: Path, pg_url: str) -> None:
    created = (await _ask(a, "agent_create", body={"model": MODEL, "name": "fleet-one",
                                                   "tags": ["team"]}))["agent"]
    agent_id = created["id"]
    listed = (await _ask(b, "agent_list", query={"tags": ["team"]}))["agents"]
    assert [row["id"] for row in listed] == [agent_id]
    await _ask(b, "agent_update", agent_id=agent_id, body={"name": "renamed on b"})
    assert (await _ask(a, "agent_retrieve", agent_id=agent_id))["agent"]["name"] == "renamed on b"

    conversation = (await _ask(b, "conversation_create",
                               body={"agent_id": agent_id, "summary": "made on b"}))["conversation"]
    conv_id = conversation["id"]
    on_a = (await _ask(a, "conversation_list", query={"agent_id": agent_id}))["conversations"]
    assert [(c["id"], c["summary"]) for c in on_a] == [(conv_id, "made on b")]
    await _ask(a, "conversation_update", conversation_id=conv_id, agent_id=agent_id,
               body={"summary": "renamed on a"})
    got = (await _ask(b, "conversation_retrieve", conversation_id=conv_id, agent_id=agent_id))
    assert got["conversation"]["summary"] == "renamed on a"

    # A turn on A; B reads its messages, forks it, and A reads the fork.
    await _turn(a, project, agent_id, conv_id, "what is six times seven?")
    wait_until(lambda: _states(pg_url)[-1:] == [("in-1", "done")], "the turn on a")
    page = await _ask(b, "conversation_messages_list", conversation_id=conv_id,
                      agent_id=agent_id)
    assert "what is six times seven?" in " ".join(_texts(page))
    assert "the answer is 42" in " ".join(_texts(page))
    fork_id = (await _ask(b, "conversation_fork", conversation_id=conv_id,
                          body={"agent_id": agent_id}))["conversation"]["id"]
    forked = await _ask(a, "conversation_messages_list", conversation_id=fork_id,
                        agent_id=agent_id)
    assert _texts(forked) == _texts(page)
    assert [m["id"] for m in forked["messages"]] == [m["id"] for m in page["messages"]]

    # Deleting on B: the fork, then the conversation A ran (A holds it idle, and is fenced out).
    await _ask(b, "conversation_delete", conversation_id=fork_id, agent_id=agent_id)
    await _ask(b, "conversation_delete", conversation_id=conv_id, agent_id=agent_id)
    assert (await _ask(a, "conversation_list", query={"agent_id": agent_id}))["conversations"] == []
    gone = await _refused(a, "conversation_retrieve", conversation_id=conv_id, agent_id=agent_id)
    assert "no such conversation" in gone["error"]

    scope = {"agent_id": agent_id, "conversation_id": "default"}
    await _ask(b, "set_reflection_settings", runtime=scope,
               settings={"trigger": "step-count", "step_count": 7})
    got_settings = await _ask(a, "get_reflection_settings", runtime=scope)
    assert got_settings["reflection_settings"] == {
        "agent_id": agent_id, "trigger": "step-count", "step_count": 7}

    task = (await _ask(b, "cron_add", agent_id=agent_id, conversation_id="default", name="tick",
                       prompt="tick once", cron="0 * * * *", recurring=True,
                       timezone="UTC"))["task"]
    assert [t["id"] for t in (await _ask(a, "cron_list", agent_id=agent_id))["tasks"]] \
        == [task["id"]]
    await _ask(a, "agent_delete", agent_id=agent_id)
    assert (await _ask(b, "agent_list", query={}))["agents"] == []
    assert (await _ask(b, "cron_list", agent_id=agent_id))["tasks"] == []  # gone with it
    await _refused(b, "agent_retrieve", agent_id=agent_id)


def test_a_secret_set_on_one_worker_reaches_a_tool_call_on_another(
    tmp_path: Path, pg_url: str
) -> None:
    project = tmp_path / "project"
    project.mkdir()
    value = "correct-horse-battery-staple"
    command = 'printf %s "$DEPLOY_WORD" > word.txt; echo "word: $DEPLOY_WORD"'
    with FakeProvider([{"tool_calls": [bash(command)]}, {"text": "done"}]) as fake:
        a = ServerProcess(server_env(fake.url, tmp_path / "home-a", tmp_path), project,
                          "--store", pg_url)
        b = ServerProcess(server_env(fake.url, tmp_path / "home-b", tmp_path), project,
                          "--store", pg_url)
        try:
            asyncio.run(_secret_across_workers(a.url, b.url, project, value))
        finally:
            a.stop()
            b.stop()
        assert fake.violations == []
        assert value not in json.dumps(fake.requests[1]["body"])  # scrubbed from the model
    assert (project / "word.txt").read_text() == value
    for home in ("home-a", "home-b"):
        assert not (tmp_path / home / "secrets.json").exists()


async def _secret_across_workers(a: str, b: str, project: Path, value: str) -> None:
    agent_id = (await _ask(a, "agent_create", body={"model": MODEL}))["agent"]["id"]
    applied = await _ask(b, "secret_apply", agent_id=agent_id, set={"deploy_word": value})
    assert applied["names"] == ["DEPLOY_WORD"]
    listed = await _ask(a, "secret_list", agent_id=agent_id)
    assert listed["secrets"] == [{"key": "DEPLOY_WORD", "value": value}]
    async with connect(a) as ws:
        c = Client(ws)
        runtime = (await c.start(project, agent_id=agent_id))["runtime"]
        await c.say(runtime, "use the secret", request_id="t1")
        request = await c.of_type("control_request", timeout=60)
        await c.answer(runtime, request["request_id"])
        assert (await c.of_type("turn_finished", request_id="t1", timeout=60))["stop_reason"] \
            == "end_turn"
