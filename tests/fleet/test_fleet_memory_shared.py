"""An agent's memory shared by a fleet (issue 31): two real `tether server --store` workers,
each with a TETHER_HOME of its own, on one database. A memory change committed during a turn on
one worker is in the agent's memory files and system prompt on its next turn on the other, and
two turns of the same agent committing at the same time on both workers keep both changes. The
after-turn reflection commits after the turn ended: its commit is stored when it ends."""

from __future__ import annotations

import asyncio
import subprocess
from pathlib import Path
from typing import Any

from websockets.asyncio.client import connect

from tests.server.support import Client, ServerProcess, server_env
from tether.testing.fake_provider import FakeProvider

MODEL = "anthropic/claude-test"
FACT = "The user's name is Ada Lovelace."


def _memory_create(path: str, text: str) -> dict[str, Any]:
    return {"name": "memory", "arguments": {
        "command": "create", "reason": f"remember {path}", "path": path,
        "description": f"what {path} holds", "file_text": text}}


def _system(body: dict[str, Any]) -> str:
    return "".join(part["text"] for part in body["system"])


async def _turn(url: str, project: Path, text: str, **scope: Any) -> dict[str, str]:
    """One turn in a new conversation (of a new agent unless `agent_id` is given)."""
    async with connect(url) as ws:
        c = Client(ws)
        if "agent_id" in scope:
            scope.setdefault("create_conversation", {})
        runtime = (await c.start(project, **scope))["runtime"]
        await c.say(runtime, text, request_id="in-1", idempotency_key=f"k-{text}")
        await c.of_type("input_accepted", request_id="in-1")
        finished = await c.of_type("turn_finished", timeout=60)
        assert finished.get("error") is None and finished["stop_reason"] == "end_turn", finished
        return dict(runtime)


def _committed(home: Path, agent_id: str, path: str) -> str:
    root = home / "agents" / agent_id / "memory"
    return subprocess.run(["git", "show", f"HEAD:{path}"], cwd=root, capture_output=True,
                          text=True, check=True).stdout


def test_memory_committed_on_one_worker_is_in_the_next_turn_on_another(
    tmp_path: Path, pg_url: str,
) -> None:
    project = tmp_path / "project"
    project.mkdir()
    script = [{"tool_calls": [_memory_create("system/human.md", FACT)]},
              {"text": "I will remember."}, {"text": "Hello Ada."}]
    with FakeProvider(script) as fake:
        a = ServerProcess(server_env(fake.url, tmp_path / "home-a", tmp_path), project,
                          "--store", pg_url)
        b = ServerProcess(server_env(fake.url, tmp_path / "home-b", tmp_path), project,
                          "--store", pg_url)
        try:
            first = asyncio.run(_turn(a.url, project, "my name is Ada",
                                      create_agent={"body": {"model": MODEL}}))
            agent = first["agent_id"]
            asyncio.run(_turn(b.url, project, "who am I?", agent_id=agent))
        finally:
            a.stop()
            b.stop()
        assert fake.violations == [] and len(fake.requests) == 3
        on_b = _system(fake.requests[2]["body"])
    assert FACT not in _system(fake.requests[0]["body"])
    assert FACT in on_b and 'path="system/human.md"' in on_b
    assert FACT in _committed(tmp_path / "home-b", agent, "system/human.md")


def test_two_workers_committing_at_once_both_keep_their_change(
    tmp_path: Path, pg_url: str,
) -> None:
    project = tmp_path / "project"
    project.mkdir()
    with FakeProvider([{"text": "ready"}]) as fake:
        a = ServerProcess(server_env(fake.url, tmp_path / "home-a", tmp_path), project,
                          "--store", pg_url)
        b = ServerProcess(server_env(fake.url, tmp_path / "home-b", tmp_path), project,
                          "--store", pg_url)
        try:
            agent = asyncio.run(_turn(a.url, project, "hello",
                                      create_agent={"body": {"model": MODEL}}))["agent_id"]
            # Both turns have begun (pulled the same head) before either answer comes back,
            # so each worker commits on the same base and one of them stores second.
            fake.set_script([
                {"tool_calls": [_memory_create("system/alpha.md", "Alpha fact.")],
                 "delay_ms": 1500},
                {"tool_calls": [_memory_create("system/beta.md", "Beta fact.")],
                 "delay_ms": 1500},
                {"text": "noted"}, {"text": "noted"}, {"text": "both?"},
            ])

            async def both() -> None:
                await asyncio.gather(_turn(a.url, project, "one", agent_id=agent),
                                     _turn(b.url, project, "two", agent_id=agent))

            asyncio.run(both())
            asyncio.run(_turn(a.url, project, "three", agent_id=agent))
        finally:
            a.stop()
            b.stop()
        assert fake.violations == []
        last = _system(fake.requests[-1]["body"])
    assert "Alpha fact." in last and "Beta fact." in last
    for home in ("home-a", "home-b"):
        for path, text in (("system/alpha.md", "Alpha fact."), ("system/beta.md", "Beta fact.")):
            assert text in _committed(tmp_path / home, agent, path)


def _store_head(pg_url: str, agent_id: str) -> str | None:
    import psycopg

    with psycopg.connect(pg_url) as conn:
        row = conn.execute("SELECT refs->>'refs/heads/main' FROM memory_repos WHERE path = %s",
                           (f"agents/{agent_id}/memory",)).fetchone()
    return row[0] if row else None


def test_a_reflections_commit_is_stored_when_it_ends(tmp_path: Path, pg_url: str) -> None:
    import time

    from tests.server.requests_client import ask

    project = tmp_path / "project"
    project.mkdir()
    notes = "---\ndescription: notes\n---\nlearned X\n"
    reflect = [
        {"tool_calls": [{"name": "Write", "arguments": {"file_path": "system/notes.md",
                                                        "content": notes}}]},
        {"tool_calls": [{"name": "Bash", "arguments": {
            "command": "git add -A && git commit -q -m reflect", "description": "commit"}}]},
        {"text": "recorded X"},
    ]
    # The step-count trigger is the agent's, on the store: B's turn is followed by a pass too.
    with FakeProvider([{"text": "hi"}, *reflect, {"text": "on b"}, {"text": "nothing new"}]) as fake:
        a = ServerProcess(server_env(fake.url, tmp_path / "home-a", tmp_path), project,
                          "--store", pg_url)
        b = ServerProcess(server_env(fake.url, tmp_path / "home-b", tmp_path), project,
                          "--store", pg_url)
        try:
            async def on_a() -> str:
                async with connect(a.url) as ws:
                    c = Client(ws)
                    runtime = (await c.start(project, create_agent={"body": {"model": MODEL}}))[
                        "runtime"]
                    done = await ask(c, "set_reflection_settings", runtime=runtime,
                                     settings={"trigger": "step-count", "step_count": 1})
                    assert done["success"], done
                    await c.say(runtime, "hello", request_id="in-1", idempotency_key="k-a")
                    await c.of_type("turn_finished", timeout=60)
                    return str(runtime["agent_id"])

            agent = asyncio.run(on_a())
            root = tmp_path / "home-a" / "agents" / agent / "memory"
            deadline = time.monotonic() + 60  # a bound on a hung reflection, not a timing claim
            while True:
                local = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, text=True,
                                       capture_output=True).stdout.strip()
                merged = "learned X" in subprocess.run(
                    ["git", "show", "HEAD:system/notes.md"], cwd=root, text=True,
                    capture_output=True).stdout
                if merged and _store_head(pg_url, agent) == local:
                    break
                assert time.monotonic() < deadline, (merged, local, _store_head(pg_url, agent))
                time.sleep(0.1)
            asyncio.run(_turn(b.url, project, "and now?", agent_id=agent))
        finally:
            a.stop()
            b.stop()
        assert fake.violations == []
        turns = [r for r in fake.requests if "reflection subagent" not in _system(r["body"])]
        assert "learned X" in _system(turns[-1]["body"])
