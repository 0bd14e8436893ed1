"""The OpenAI-compatible API on a fleet (issue 31): a completion sent to a worker that does not
run the agent's conversation is run once by the worker that does, and answered by the one it was
sent to, from the holder's relayed frames: the turn's text, its usage, and a tool call that
would ask denied with the headless text (nobody can answer over this API), its effect not made."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import httpx
from websockets.asyncio.client import connect

from tests.fleet.support import wait_until
from tests.fleet.test_pg_transcripts_e2e import _states
from tests.server.support import Client, ServerProcess, bash, server_env
from tether.testing.fake_provider import FakeProvider


async def _hold(url: str, project: Path) -> str:
    """An agent whose default conversation runs on the worker at `url` (its lease taken)."""
    async with connect(url) as ws:
        c = Client(ws)
        runtime = (await c.start(project, conversation_id="default"))["runtime"]
        await c.say(runtime, "hello", request_id="in-1", idempotency_key="k-1")
        await c.of_type("turn_finished", timeout=60)
        return str(runtime["agent_id"])


def test_a_completion_sent_to_a_non_holder_is_answered_from_the_holders_turn(
    tmp_path: Path, pg_url: str
) -> None:
    project = tmp_path / "project"
    project.mkdir()
    script = [
        {"text": "hi"},
        {"tool_calls": [bash("touch made-by-the-completion")]},
        {"text": "could not run it"},
        {"text": "second answer"},
    ]
    with FakeProvider(script) as fake:
        a = ServerProcess(server_env(fake.url, tmp_path / "home-a", tmp_path), project,
                          "--store", pg_url, "--openai-api")
        b = ServerProcess(server_env(fake.url, tmp_path / "home-b", tmp_path), project,
                          "--store", pg_url, "--openai-api")
        try:
            agent = asyncio.run(_hold(a.url, project))
            body = {"model": agent, "messages": [{"role": "user", "content": "make the file"}]}
            first = httpx.post(f"{b.http_base}/v1/chat/completions", json=body, timeout=60)
            body["messages"][0]["content"] = "and again"
            second = httpx.post(f"{b.http_base}/v1/chat/completions", json=body, timeout=60)
            wait_until(lambda: [s for _, s in _states(pg_url)] == ["done"] * 3, "three inputs")
        finally:
            a.stop()
            b.stop()
        assert fake.violations == [] and len(fake.requests) == 4
        asked = json.dumps(fake.requests[2]["body"])
    assert first.status_code == 200, first.text
    assert first.json()["choices"][0]["message"]["content"] == "could not run it"
    assert first.json()["usage"]["completion_tokens"] > 0
    assert second.json()["choices"][0]["message"]["content"] == "second answer"
    assert "requires approval" in asked  # the holder denied it as this API does
    assert not (project / "made-by-the-completion").exists()


def test_a_streamed_completion_on_a_non_holder_streams_the_holders_text_as_it_comes(
    tmp_path: Path, pg_url: str
) -> None:
    """The holder's text reaches the non-holder's SSE client while the turn still runs: the
    first piece (before a tool call) arrives seconds before the answer the provider gives
    late, not all at once at the turn's end."""
    import time

    project = tmp_path / "project"
    project.mkdir()
    (project / "notes.txt").write_text("the answer is 42\n")
    script = [
        {"text": "hi"},
        {"text": "looking at the notes", "tool_calls": [
            {"name": "Read", "arguments": {"file_path": str(project / "notes.txt")}}]},
        {"text": "it says 42", "delay_ms": 3000},
    ]
    with FakeProvider(script) as fake:
        a = ServerProcess(server_env(fake.url, tmp_path / "home-a", tmp_path), project,
                          "--store", pg_url, "--openai-api")
        b = ServerProcess(server_env(fake.url, tmp_path / "home-b", tmp_path), project,
                          "--store", pg_url, "--openai-api")
        pieces: list[tuple[float, str]] = []
        try:
            agent = asyncio.run(_hold(a.url, project))
            body = {"model": agent, "stream": True,
                    "messages": [{"role": "user", "content": "what do the notes say?"}]}
            with httpx.stream("POST", f"{b.http_base}/v1/chat/completions", json=body,
                              timeout=60) as response:
                assert response.status_code == 200
                for line in response.iter_lines():
                    if not line.startswith("data: {"):
                        continue
                    delta = json.loads(line[len("data: "):])["choices"][0]["delta"]
                    if delta.get("content"):
                        pieces.append((time.monotonic(), delta["content"]))
        finally:
            a.stop()
            b.stop()
        assert fake.violations == [] and len(fake.requests) == 3
    text = "".join(piece for _, piece in pieces)
    assert text == "looking at the notes\n\nit says 42", pieces
    first_seen = next(t for t, _ in pieces)
    answer_seen = next(t for t, piece in pieces if "42" in piece)
    assert answer_seen - first_seen > 2.0, pieces  # streamed, not one piece at the end
