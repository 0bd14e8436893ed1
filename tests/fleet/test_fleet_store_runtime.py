"""The runtime on the PostgreSQL store's transcripts (issue 31 item 1): a conversation pushed
past a small context window on a real `tether server --store` worker compacts through the
backend's own path (the summary call, then a compaction row), and another worker, with a
TETHER_HOME of its own, resumes from the compaction: its request carries the summary and none of
the evicted history."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from websockets.asyncio.client import connect

from tests.fleet.support import wait_until
from tests.fleet.test_pg_transcripts_e2e import _rows, _states
from tests.server.support import Client, ServerProcess, server_env
from tether.testing.fake_provider import FakeProvider

MODEL = "anthropic/claude-test"
# The server's system prompt and tools are ~5,400 tokens: one long part fits under the
# threshold of this window, a second does not.
WINDOW = {"TETHER_CONTEXT_WINDOW": "8192"}


async def _turns(url: str, project: Path, texts: list[str], first: int,
                 scope: dict[str, str] | None = None) -> dict[str, str]:
    async with connect(url) as ws:
        c = Client(ws)
        fields: dict[str, Any] = dict(scope) if scope else {
            "create_agent": {"body": {"model": MODEL, "system": "You are terse."}}}
        runtime = (await c.start(project, **fields))["runtime"]
        if scope is None:  # the compaction would start a reflection pass (its default trigger),
            # a provider call of its own in the background: not what these tests count
            from tests.server.requests_client import ask

            off = await ask(c, "set_reflection_settings", runtime=runtime,
                            settings={"trigger": "off", "step_count": 25})
            assert off["success"], off
        for n, text in enumerate(texts, first):
            await c.say(runtime, text, request_id=f"in-{n}", idempotency_key=f"k-{n}")
            await c.of_type("input_accepted", request_id=f"in-{n}")
            await c.wait_for(lambda f, n=n: f.get("type") == "turn_finished"
                             or (f.get("type") == "stream_delta"
                                 and f["delta"].get("message_type") == "stop_reason"
                                 and f.get("request_id") == f"in-{n}"), 60)
        return dict(runtime)


def test_a_compaction_on_one_worker_is_where_another_resumes(tmp_path: Path, pg_url: str) -> None:
    project = tmp_path / "project"
    project.mkdir()
    script = [{"text": "noted 0"}, {"text": "SUMMARY: the user sent long parts."},
              {"text": "second"}, {"text": "third"}]
    with FakeProvider(script) as fake:
        a = ServerProcess({**server_env(fake.url, tmp_path / "home-a", tmp_path), **WINDOW},
                          project, "--store", pg_url)
        try:
            texts = ["part 0: " + "lorem ipsum " * 150, "part 1: " + "dolor sit " * 300]
            scope = asyncio.run(_turns(a.url, project, texts, 1))
            wait_until(lambda: [s for _, s in _states(pg_url)] == ["done"] * 2, "two turns")
        finally:
            a.stop()
        b = ServerProcess({**server_env(fake.url, tmp_path / "home-b", tmp_path), **WINDOW},
                          project, "--store", pg_url)
        try:
            asyncio.run(_turns(b.url, project, ["part 3: short"], 3, scope))
            wait_until(lambda: _states(pg_url)[-1] == ("in-3", "done"), "the third turn")
        finally:
            b.stop()
        assert fake.violations == [] and len(fake.requests) == 4
        summary_call, resumed = fake.requests[1]["body"], fake.requests[3]["body"]
    assert "You are summarising" in json.dumps(summary_call["system"])
    sent = json.dumps(resumed["messages"])
    assert "SUMMARY: the user sent long parts." in sent and "part 3: short" in sent
    assert "part 0" not in sent  # evicted: the second worker read the view after the compaction
    kinds = [entry["type"] for _, _, entry in _rows(pg_url)]
    assert kinds.count("compaction") == 1


def test_a_clients_compaction_is_written_by_a_worker_only_with_the_lease(
    tmp_path: Path, pg_url: str,
) -> None:
    from tests.server.requests_client import ask

    project = tmp_path / "project"
    project.mkdir()
    # The refused compaction's summary call is made (the write is what the lease decides).
    script = [{"text": "first answer"}, {"text": "second answer"},
              {"text": "not written"}, {"text": "They greeted each other twice."}]
    with FakeProvider(script) as fake:
        env = server_env(fake.url, tmp_path / "home-a", tmp_path)
        a = ServerProcess(env, project, "--store", pg_url)
        b = ServerProcess(server_env(fake.url, tmp_path / "home-b", tmp_path), project,
                          "--store", pg_url)
        try:
            scope = asyncio.run(_turns(a.url, project, ["hello", "hello again"], 1))
            wait_until(lambda: [s for _, s in _states(pg_url)] == ["done"] * 2, "two turns")

            async def compact() -> dict[str, Any]:
                async with connect(b.url) as ws:
                    return await ask(Client(ws), "conversation_compact",
                                     conversation_id=scope["conversation_id"],
                                     body={"agent_id": scope["agent_id"],
                                           "compaction_settings": {"mode": "all"}})

            refused = asyncio.run(compact())  # the first worker holds the conversation
            assert refused["success"] is False and "lease" in refused["error"], refused
            a.stop()  # gives its lease up
            done = asyncio.run(compact())
            assert done["success"], done
            assert done["compaction"]["summary"] == "They greeted each other twice."
        finally:
            a.stop()
            b.stop()
    rows = _rows(pg_url)
    (compaction,) = [(token, entry) for _, token, entry in rows if entry["type"] == "compaction"]
    assert compaction[0] > rows[0][1]  # written under the second worker's newer token
