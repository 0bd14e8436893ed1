"""Subagents of a fleet server live in the fleet's store, and `tether -p --store` runs on it: a
Task call's new agent and its transcript are PostgreSQL rows (nothing of them in the worker's
TETHER_HOME), a Task call may target the parent agent there, and a headless run refuses a
conversation a server worker is running, with nothing written; a run's leases are never taken
back once lost. Real `tether server --store` processes, real `tether -p` children and a real
database; the model is the fake provider."""

from __future__ import annotations

import asyncio
import json
import subprocess
import time
from pathlib import Path
from typing import Any

import pytest
from websockets.asyncio.client import connect

from tests.e2e.support import TETHER
from tests.fleet.support import wait_until
from tests.server.support import MODEL, Client, ServerProcess, server_env
from tether.testing.fake_provider import FakeProvider


def agent_call(**target: str) -> dict[str, Any]:
    """A foreground Task (`Agent`) call for a general-purpose subagent."""
    return {"tool_calls": [{"name": "Agent", "arguments": {
        "description": "delegate", "prompt": "do the thing", "subagent_type": "general-purpose",
        "run_in_background": False, **target}}]}


def _query(url: str, sql: str, *args: Any) -> list[tuple[Any, ...]]:
    import psycopg

    with psycopg.connect(url) as conn:
        return [tuple(r) for r in conn.execute(sql, args).fetchall()]


def _agents(url: str) -> dict[str, list[str]]:
    """Every agent in the store: id -> its tags."""
    return {str(i): list(json.loads(bytes(raw))["tags"])
            for i, raw in _query(url, "SELECT id, raw FROM agents")}


def _entries(url: str, conversation: str) -> list[dict[str, Any]]:
    return [json.loads(bytes(line)) for (line,) in _query(
        url, "SELECT line FROM transcript WHERE conversation = %s ORDER BY seq", conversation)]


def _texts(entries: list[dict[str, Any]], role: str) -> list[str]:
    out = []
    for entry in entries:
        message = entry.get("message") or {}
        if message.get("role") == role:
            out += [p["text"] for p in message.get("content", []) if p.get("type") == "text"]
    return out


def _states(url: str) -> list[str]:
    return [str(s) for (s,) in _query(url, "SELECT state FROM inputs ORDER BY seq")]



def _no_records_in(home: Path) -> None:
    """No agent record, conversation record or transcript file under TETHER_HOME."""
    found = [str(p.relative_to(home)) for pattern in (
        "agents/*.json", "conversations/*/conversation.json", "conversations/*/messages.jsonl",
    ) for p in home.glob(pattern)]
    assert found == [], found


async def _one_turn(url: str, project: Path, text: str, **scope: Any) -> dict[str, str]:
    async with connect(url) as ws:
        c = Client(ws)
        runtime = (await c.start(project, mode="unrestricted", **scope))["runtime"]
        await c.say(runtime, text, request_id="in-1", idempotency_key="k-1")
        accepted = await c.of_type("input_accepted", request_id="in-1")
        assert accepted["accepted"], accepted
        return dict(runtime)


def _pg_agent(url: str, home: Path) -> str:
    """A parent agent made in the store through its own interface, before the fleet starts (so
    the model's script can name it)."""
    from tether.backends.postgres.agents import PgConversationStore
    from tether.backends.postgres.connection import PgSession

    session = PgSession(url, "test-setup")
    try:
        store = PgConversationStore(session, home, lambda _ref: None)
        return store.create_agent(model=MODEL, system="You are the parent.").id
    finally:
        session.close()


def test_a_new_subagent_of_a_fleet_conversation_lives_in_the_store(
    tmp_path: Path, pg_url: str,
) -> None:
    project, home = tmp_path / "project", tmp_path / "tether-home"
    project.mkdir()
    script = [agent_call(), {"text": "child report"}, {"text": "parent done"}]
    with FakeProvider(script) as fake:
        server = ServerProcess(server_env(fake.url, home, tmp_path), project, "--store", pg_url)
        try:
            runtime = asyncio.run(_one_turn(server.url, project, "delegate it"))
            wait_until(lambda: _states(pg_url) == ["done"], "the parent's turn", timeout=90)
        finally:
            server.stop()
        assert fake.violations == []
    parent = runtime["agent_id"]
    children = [a for a, tags in _agents(pg_url).items() if f"parent:{parent}" in tags]
    assert len(children) == 1, _agents(pg_url)
    child = children[0]
    assert "type:general-purpose" in _agents(pg_url)[child]
    # the child's conversation and its whole turn are rows of the store
    assert _query(pg_url, "SELECT id FROM conversations WHERE agent_id = %s", child) == [
        ("default",)]
    child_rows = _entries(pg_url, f"{child}/default")
    assert _texts(child_rows, "user") == ["do the thing"]
    assert _texts(child_rows, "assistant") == ["child report"]
    # the parent got the child's report, naming the child's agent
    parent_rows = _entries(pg_url, f"{parent}/{runtime['conversation_id']}")
    returned = json.dumps(parent_rows)
    assert f"agent_id={child}" in returned and "child report" in returned
    assert _texts(parent_rows, "assistant")[-1] == "parent done"
    _no_records_in(home)
    # its memory repository is the fleet's too, stored when the child ended
    assert _query(pg_url, "SELECT path FROM memory_repos WHERE path = %s",
                  f"agents/{child}/memory") == [(f"agents/{child}/memory",)]
    # the child gave its lease up when it ended: a server worker may take it at once
    (expired,) = _query(pg_url, "SELECT expires_at < clock_timestamp() FROM conversation_leases"
                        " WHERE conversation = %s", f"{child}/default")
    assert expired == (True,)


def test_a_task_call_for_the_parent_agent_runs_in_a_new_conversation_of_it_in_the_store(
    tmp_path: Path, pg_url: str,
) -> None:
    project, home = tmp_path / "project", tmp_path / "tether-home"
    project.mkdir()
    parent = _pg_agent(pg_url, home)
    script = [agent_call(agent_id=parent), {"text": "my other self"}, {"text": "parent done"}]
    with FakeProvider(script) as fake:
        server = ServerProcess(server_env(fake.url, home, tmp_path), project, "--store", pg_url)
        try:
            runtime = asyncio.run(_one_turn(server.url, project, "ask yourself",
                                            agent_id=parent, create_conversation={}))
            wait_until(lambda: _states(pg_url) == ["done"], "the parent's turn", timeout=90)
        finally:
            server.stop()
        assert fake.violations == []
    assert list(_agents(pg_url)) == [parent]  # no child agent was made
    own = runtime["conversation_id"]
    conversations = {str(c) for (c,) in _query(
        pg_url, "SELECT id FROM conversations WHERE agent_id = %s", parent)}
    (other,) = conversations - {own}
    rows = _entries(pg_url, f"{parent}/{other}")
    assert _texts(rows, "user") == ["do the thing"]
    assert _texts(rows, "assistant") == ["my other self"]
    returned = json.dumps(_entries(pg_url, f"{parent}/{own}"))
    assert f"conversation_id={other}," in returned and "status=completed" in returned
    _no_records_in(home)


def _headless(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([TETHER, "-p", *args], env=env, cwd=cwd, capture_output=True,
                          text=True, timeout=90, check=False)


def test_headless_store_run_refuses_a_conversation_a_server_worker_is_running(
    tmp_path: Path, pg_url: str,
) -> None:
    project, home = tmp_path / "project", tmp_path / "tether-home"
    project.mkdir()
    with FakeProvider([{"fault": {"hang": True}}]) as fake:
        env = server_env(fake.url, home, tmp_path)
        server = ServerProcess(env, project, "--store", pg_url)
        try:
            runtime = asyncio.run(_one_turn(server.url, project, "take a while"))
            wait_until(lambda: len(fake.requests) == 1, "the server's turn reaching the model", timeout=90)
            before = _query(pg_url, "SELECT conversation, seq FROM transcript ORDER BY 1, 2")
            conversation = runtime["conversation_id"]
            refused = _headless(["--store", pg_url, "--conversation", conversation, "hello"],
                                env, project)
            assert refused.returncode == 1, refused.stderr
            assert f"conversation {conversation} " in refused.stderr
            assert "is running elsewhere" in refused.stderr and refused.stdout == ""
            # nothing written: no row, no new agent or conversation, no request to the model
            assert _query(pg_url, "SELECT conversation, seq FROM transcript ORDER BY 1, 2") == before
            assert list(_agents(pg_url)) == [runtime["agent_id"]]
            assert len(_query(pg_url, "SELECT 1 FROM conversations")) == 1
            assert len(fake.requests) == 1
        finally:
            server.stop()


def test_headless_store_run_keeps_its_run_in_the_store_and_refuses_a_bad_url(
    tmp_path: Path, pg_url: str,
) -> None:
    project, home = tmp_path / "project", tmp_path / "tether-home"
    project.mkdir()
    with FakeProvider([{"text": "stored answer"}]) as fake:
        env = server_env(fake.url, home, tmp_path)
        done = _headless(["--store", pg_url, "--model", MODEL, "--output-format", "json",
                          "hello store"], env, project)
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    agent, conversation = result["agent_id"], result["conversation_id"]
    rows = _entries(pg_url, f"{agent}/{conversation}")
    assert _texts(rows, "user") == ["hello store"] and _texts(rows, "assistant") == ["stored answer"]
    _no_records_in(home)
    (released,) = _query(pg_url, "SELECT expires_at < clock_timestamp() FROM conversation_leases"
                         " WHERE conversation = %s", f"{agent}/{conversation}")
    assert released == (True,)
    # the same errors as `tether server --store`, never showing the password
    bad = _headless(["--store", "mysql://me:s3cret@db/x", "hi"], env, project)
    assert bad.returncode == 1 and "is not a PostgreSQL URL" in bad.stderr
    assert "s3cret" not in bad.stderr and "mysql://me:***@db/x" in bad.stderr
    down = _headless(["--store", f"postgresql://me:s3cret@/x?host={tmp_path}/nothing-here", "hi"],
                     env, project)
    assert down.returncode == 1 and "cannot connect to the PostgreSQL store" in down.stderr
    assert "s3cret" not in down.stderr
    interactive = subprocess.run([TETHER, "--store", pg_url, "hi"], env=env, cwd=project,
                                 capture_output=True, text=True, timeout=60, check=False)
    assert interactive.returncode == 1 and "--store runs headless only" in interactive.stderr


def test_solo_leases_refuse_a_held_conversation_and_never_take_a_lost_one_back(
    pg_url: str,
) -> None:
    from tether.backends.postgres.connection import LeaseLost, PgSession
    from tether.backends.postgres.solo_lease import HeldElsewhere, SoloLeases

    sessions = [PgSession(pg_url, name) for name in ("run-a", "run-b", "run-c")]
    try:
        a, b, c = (SoloLeases(s, ttl_s=0.3) for s in sessions)
        ref = "agent-x/local-conv-1"
        mine = a.take(ref)
        assert a.take(ref) == mine and a.keeper.started
        with pytest.raises(HeldElsewhere, match=r"conversation local-conv-1 \(agent agent-x\) is "
                           "running elsewhere: worker run-a holds it"):
            b.take(ref)
        a.keeper.stop()  # run-a stops renewing (a stopped process) past the ttl
        time.sleep(0.5)
        theirs = b.take(ref)
        assert theirs.token > mine.token
        # run-a's writes stay fenced by its old lease: refused, never re-taken behind b's back
        assert a.lease_of(ref) == mine
        with pytest.raises(LeaseLost):
            a.leases.append(mine, [{"late": True}])
        a.close()  # releases nothing of run-b's
        assert b.leases.current(ref) == ("run-b", theirs.token)
        with pytest.raises(HeldElsewhere):
            c.take(ref)
        b.close()  # given up at once: the next run takes it without waiting for the ttl
        assert c.take(ref).token == theirs.token + 1
        c.close()
    finally:
        for s in sessions:
            s.close()



def test_a_memory_subagent_on_a_unix_socket_store_keeps_its_records_here_and_says_so(
    tmp_path: Path, pg_url: str,
) -> None:
    """Its sandbox refuses Unix sockets (the test cluster's only way in): the child runs on
    TETHER_HOME as before fleets, the run says why once, and the parent's turn completes."""
    project, home = tmp_path / "project", tmp_path / "tether-home"
    project.mkdir()
    call = agent_call()
    call["tool_calls"][0]["arguments"].update(subagent_type="memory", model=MODEL)
    script = [call, {"text": "memory tidied"}, {"text": "parent done"}]
    with FakeProvider(script) as fake:
        env = server_env(fake.url, home, tmp_path)
        done = _headless(["--store", pg_url, "--model", MODEL, "--yolo", "--output-format",
                          "json", "tidy up"], env, project)
        returned = json.dumps(fake.requests[-1]["body"]["messages"][-1])
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["result"] == "parent done"
    assert "status=completed" in returned and "memory tidied" in returned
    assert done.stderr.count("memory subagents keep their own records in this machine's "
                             "TETHER_HOME: the PostgreSQL store is reached through a Unix "
                             "socket") == 1
    assert len(_agents(pg_url)) == 1  # the parent only: the child's record is local
    assert len(list(home.glob("agents/*.json"))) == 1
