"""Transcripts, agents and conversations on the PostgreSQL store, end to end (issue 31 item 1):
real `tether server --store` workers against the fake provider and a real database. A turn
leaves its messages as transcript rows and nothing in TETHER_HOME's transcript files; a second
worker with a home of its own resumes the conversation from the rows; a worker stopped past its
lease and woken finds its transcript append refused (its rows never appear); and a home moved
with `tether store migrate --to URL` is served with its history."""

from __future__ import annotations

import asyncio
import json
import signal
from pathlib import Path
from typing import Any

from websockets.asyncio.client import connect

from tests.fleet.support import wait_until
from tests.server.support import Client, ServerProcess, server_env
from tether.testing.fake_provider import FakeProvider


def _rows(url: str) -> list[tuple[str, int, dict[str, Any]]]:
    import psycopg

    with psycopg.connect(url) as conn:
        return [(str(r[0]), int(r[1]), json.loads(bytes(r[2]))) for r in conn.execute(
            "SELECT conversation, token, line FROM transcript ORDER BY conversation, seq"
        ).fetchall()]


def _texts(url: str) -> list[tuple[str, str]]:
    """(role, text) of every message row, in order."""
    out = []
    for _conv, _token, entry in _rows(url):
        message = entry.get("message", {})
        text = " ".join(p.get("text", "") for p in message.get("content", [])
                        if p.get("type") == "text")
        out.append((message.get("role"), text))
    return out



async def _say(url: str, project: Path, text: str, n: int, **scope: Any) -> dict[str, Any]:
    async with connect(url) as ws:
        c = Client(ws)
        runtime = (await c.start(project, **scope))["runtime"]
        await c.say(runtime, text, request_id=f"in-{n}", idempotency_key=f"k-{n}")
        accepted = await c.of_type("input_accepted", request_id=f"in-{n}")
        assert accepted["accepted"], accepted
        return {"runtime": runtime, **accepted}


def _states(url: str) -> list[tuple[str, str]]:
    import psycopg

    with psycopg.connect(url) as conn:
        return [(str(r[0]), str(r[1])) for r in conn.execute(
            "SELECT request_id, state FROM inputs ORDER BY seq").fetchall()]


def _no_transcript_files(*homes: Path) -> None:
    for home in homes:
        assert not list(home.glob("conversations/*/messages.jsonl")), home
        assert not list(home.glob("agents/*.json")), home


def test_a_turn_is_rows_in_the_store_and_another_worker_with_its_own_home_resumes_it(
    tmp_path: Path, pg_url: str,
) -> None:
    project = tmp_path / "project"
    project.mkdir()
    home_a, home_b = tmp_path / "home-a", tmp_path / "home-b"
    with FakeProvider([{"text": "one done"}, {"text": "two done"}]) as fake:
        first = ServerProcess(server_env(fake.url, home_a, tmp_path), project, "--store", pg_url)
        try:
            said = asyncio.run(_say(first.url, project, "one", 1))
            wait_until(lambda: _states(pg_url) == [("in-1", "done")], "the first turn")
        finally:
            first.stop()  # gives its leases up
        scope = said["runtime"]
        second = ServerProcess(server_env(fake.url, home_b, tmp_path), project, "--store", pg_url)
        try:
            asyncio.run(_say(second.url, project, "two", 2, **scope))
            wait_until(lambda: _states(pg_url)[-1] == ("in-2", "done"), "the second turn")
        finally:
            second.stop()
        assert len(fake.requests) == 2 and fake.violations == []
        resumed = json.dumps(fake.requests[1])
    assert "one done" in resumed  # the second worker sent the history it read from the rows
    assert _texts(pg_url) == [("user", "one"), ("assistant", "one done"),
                              ("user", "two"), ("assistant", "two done")]
    key = f"{scope['agent_id']}/{scope['conversation_id']}"
    assert {conv for conv, _, _ in _rows(pg_url)} == {key}
    _no_transcript_files(home_a, home_b)
    # A store no home was migrated into gives the home its servers made.
    back = tmp_path / "back"
    moved = _server_cmd(["store", "migrate", "--from", pg_url, "--to", str(back)],
                        server_env("http://127.0.0.1:9", home_a, tmp_path), project)
    assert moved.returncode == 0, moved.stderr
    assert _local_texts(back, scope) == _texts(pg_url)


def test_a_woken_worker_whose_lease_moved_cannot_append_to_the_transcript(
    tmp_path: Path, pg_url: str,
) -> None:
    import psycopg

    project, home = tmp_path / "project", tmp_path / "home"
    project.mkdir()
    # A long ttl: the stopped owner's keeper is nowhere near its next renewal when it wakes, so
    # what stops its late answer is the transcript append's own fence, not an aborted turn.
    script = [{"text": "late answer", "delay_ms": 1500}, {"text": "two done"}]
    with FakeProvider(script) as fake:
        env = server_env(fake.url, home, tmp_path)
        owner, other = (ServerProcess(env, project, "--store", pg_url, "--lease-ttl", "30",
                                      "--log-format", "json") for _ in range(2))
        try:
            first = asyncio.run(_say(owner.url, project, "one", 1))
            wait_until(lambda: len(fake.requests) == 1, "the owner's provider request")
            owner.proc.send_signal(signal.SIGSTOP)
            with psycopg.connect(pg_url, autocommit=True) as conn:  # as 30 s stopped would
                conn.execute("UPDATE conversation_leases SET expires_at = clock_timestamp()"
                             " - interval '1 ms'")
            wait_until(lambda: _states(pg_url) == [("in-1", "interrupted")],
                        "the other worker's sweep taking the lease")
            owner.proc.send_signal(signal.SIGCONT)  # its answer comes; it appends, refused
            wait_until(lambda: "write_refused" in _drain(owner), "the woken owner's refusal")
            asyncio.run(_say(other.url, project, "two", 2, **first["runtime"]))
            wait_until(lambda: _states(pg_url)[-1] == ("in-2", "done"), "the second turn")
        finally:
            owner.proc.send_signal(signal.SIGCONT)
            owner.stop()
            other.stop()
    rows = _rows(pg_url)
    assert "late answer" not in json.dumps(rows)  # the woken worker's append never landed
    assert _texts(pg_url) == [("user", "one"), ("user", "two"), ("assistant", "two done")]
    tokens = [token for _, token, _ in rows]
    assert tokens[0] < tokens[1] == tokens[2]  # the second holder's rows carry its newer token
    _no_transcript_files(home)


_LOGS: dict[int, list[str]] = {}


def _drain(server: ServerProcess) -> str:
    """What the server wrote to stderr so far (read without blocking)."""
    import os

    assert server.proc.stderr is not None
    fd = server.proc.stderr.fileno()
    os.set_blocking(fd, False)
    got = _LOGS.setdefault(server.proc.pid, [])
    try:
        chunk = os.read(fd, 1 << 16)
    except BlockingIOError:
        chunk = b""
    if chunk:
        got.append(chunk.decode(errors="replace"))
    return "".join(got)


def test_a_migrated_home_is_served_with_its_history(tmp_path: Path, pg_url: str) -> None:
    project, home = tmp_path / "project", tmp_path / "home"
    project.mkdir()
    with FakeProvider([{"text": "before the move"}, {"text": "after the move"}]) as fake:
        env = server_env(fake.url, home, tmp_path)
        local = ServerProcess(env, project)  # the embedded default: files under TETHER_HOME
        try:
            said = asyncio.run(_say(local.url, project, "remember 42", 1))
            scope = said["runtime"]
            wait_until(lambda: any(b"before the move" in f.read_bytes()
                                    for f in home.glob("conversations/*/messages.jsonl")),
                        "the local turn")
        finally:
            local.stop()
        moved = _server_cmd(["store", "migrate", "--to", pg_url], env, project)
        assert moved.returncode == 0, moved.stderr
        served = ServerProcess(server_env(fake.url, tmp_path / "fresh-home", tmp_path), project,
                               "--store", pg_url)
        try:
            asyncio.run(_say(served.url, project, "what was it?", 2, **scope))
            wait_until(lambda: ("in-2", "done") in _states(pg_url), "the served turn")
        finally:
            served.stop()
        assert len(fake.requests) == 2
        history = json.dumps(fake.requests[1])
    assert "remember 42" in history and "before the move" in history
    texts = _texts(pg_url)
    assert texts[:2] == [("user", "remember 42"), ("assistant", "before the move")]
    assert texts[-2:] == [("user", "what was it?"), ("assistant", "after the move")]
    # And back: the home the store holds now, served turn included, verified.
    back = tmp_path / "back"
    assert _server_cmd(["store", "migrate", "--from", pg_url, "--to", str(back)], env,
                       project).returncode == 0
    assert _local_texts(back, scope) == texts


def _local_texts(home: Path, scope: dict[str, str]) -> list[tuple[str, str]]:
    from tether.backends.local.store import LocalStore

    messages = LocalStore(home).transcript(scope["agent_id"], scope["conversation_id"]).load()
    return [(m.role, " ".join(p.text for p in m.content if getattr(p, "kind", "") == "text"))
            for m in messages]


def _server_cmd(args: list[str], env: dict[str, str], cwd: Path) -> Any:
    import subprocess

    from tests.e2e.support import TETHER

    return subprocess.run([TETHER, *args], env=env, cwd=cwd, capture_output=True, text=True,
                          timeout=120, check=False)

