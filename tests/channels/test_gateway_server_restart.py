"""The channel gateway across `kill -9` of the real `tether server` in the middle of a message:
the real gateway (webhook channel) reconnects to the restarted server and starts its runtime
again; a message sent while the server was down is submitted then, the one whose turn the kill
cut is not run again (the server's durable queue reports it interrupted) and the chat is told
so, and every message is answered exactly once; the journal marks none handled unanswered."""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.channels.platforms import (
    Recorder,
    Stack,
    free_port,
    post_webhook,
    wait_until,
    webhook_receiver,
    webhook_stack,
)
from tests.server.support import ServerProcess
from tether.testing.fake_provider import FakeProvider


def reply(text: str) -> dict[str, Any]:
    return {"tool_calls": [{"name": "MessageChannel",
                            "arguments": {"channel": "webhook", "chat_id": "c1", "text": text}}]}


def inbound(message_id: str, text: str) -> dict[str, Any]:
    return {"message_id": message_id, "chat_id": "c1", "sender_id": "u1", "text": text}


def ask_the_first_question(stack: Stack, port: int, fake: FakeProvider) -> None:
    """Start the gateway, send m1 and wait for its turn to start."""
    stack.start_gateway()
    assert post_webhook(port, inbound("m1", "first question")) == 200
    wait_until(lambda: fake.requests, what="m1's turn to start")


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    d = tmp_path / "project"
    d.mkdir()
    return d


@pytest.fixture
def receiver() -> Iterator[Recorder]:
    rec = webhook_receiver()
    yield rec
    rec.close()


def journal_states(home: Path) -> dict[str, str]:
    db = sqlite3.connect(home / "channels" / "gateway.db")
    try:
        return dict(db.execute("SELECT message_id, state FROM inbox ORDER BY seq").fetchall())
    finally:
        db.close()


def test_a_server_killed_mid_message_and_restarted_answers_every_message_once(
    tmp_path: Path, tether_home: Path, workdir: Path, receiver: Recorder
) -> None:
    ws_port = free_port()
    script: list[dict[str, Any]] = [
        {"text": "cut off by the kill", "delay_ms": 8000},  # m1's turn
        reply("answer queued"), {"text": "done"},  # q, queued behind m1 at the kill
        reply("answer two"), {"text": "done"},  # m2, sent while the server was down
        reply("answer three"), {"text": "done"},  # m3, after the restart
    ]
    with FakeProvider(script) as fake:
        listen = ("--listen", f"ws://127.0.0.1:{ws_port}")  # the restarted server's URL too
        stack, port = webhook_stack(
            fake.url, tether_home, tmp_path, workdir, receiver, "c1", "--allow", "u1", listen=listen
        )
        try:
            ask_the_first_question(stack, port, fake)
            assert post_webhook(port, inbound("q", "queued question")) == 200
            wait_until(
                lambda: journal_states(tether_home).get("q") == "submitted:webhook/default/c1",
                20, "q to be accepted behind m1",
            )
            assert journal_states(tether_home)["m1"] == "submitted:webhook/default/c1"
            stack.server.kill_9()  # mid-message
            assert post_webhook(port, inbound("m2", "second question")) == 200  # journaled
            stack.server = ServerProcess(stack.env, workdir, *listen)
            try:
                wait_until(lambda: len(receiver.calls) >= 3, 60, "m1, q and m2 to be answered")
            except AssertionError:
                raise AssertionError(
                    f"{''.join(stack.gateway_lines)}\n{journal_states(tether_home)}\n"
                    f"{receiver.calls}\n{len(fake.requests)}"
                ) from None
            assert post_webhook(port, inbound("m3", "third question")) == 200
            wait_until(lambda: len(receiver.calls) >= 4, 30, "m3 to be answered")
            wait_until(
                lambda: journal_states(tether_home)["m3"].startswith("answered:"),
                30, "every turn to end",
            )
        finally:
            stack.stop()
        log = "".join(stack.gateway_lines)
    texts = [c[1]["text"] for c in receiver.calls]
    notices = [t for t in texts if t.startswith("The agent was interrupted while answering")]
    assert len(notices) == 1, log  # m1's turn was cut: said once, never run again
    assert sorted(set(texts) - set(notices)) == ["answer queued", "answer three", "answer two"]
    assert len(texts) == 4, texts
    assert journal_states(tether_home) == {
        "m1": "handled:interrupted",
        "q": "answered:webhook/default/c1",
        "m2": "answered:webhook/default/c1",
        "m3": "answered:webhook/default/c1",
    }
    # What each request asked about (its last user message): m1 once, then never again.
    asked = [json.dumps(r["body"]["messages"][-1]) for r in fake.requests]
    assert len(asked) == 7, asked
    assert ["first question" in a for a in asked] == [True] + [False] * 6
    assert "queued question" in asked[1] and "second question" in asked[3]
    assert "third question" in asked[5]


def test_gateway_and_server_both_killed_mid_message_answer_each_message_once(
    tmp_path: Path, tether_home: Path, workdir: Path, receiver: Recorder
) -> None:
    """The next gateway process asks the restarted server about what the dead one had
    submitted (same keys): the cut turn is reported once; a queued one whose turn ended
    before the new gateway connected is known answered; one that replies waits for it."""
    ws_port = free_port()
    script: list[dict[str, Any]] = [
        {"text": "cut off by the kill", "delay_ms": 8000},  # m1's turn
        {"text": "noted, no reply needed"},  # q: its turn ends before a gateway is back
        reply("answer r"), {"text": "done"},  # r: its reply waits for the new gateway
    ]
    with FakeProvider(script) as fake:
        listen = ("--listen", f"ws://127.0.0.1:{ws_port}")
        stack, port = webhook_stack(
            fake.url, tether_home, tmp_path, workdir, receiver, "c1", "--allow", "u1", listen=listen
        )
        try:
            ask_the_first_question(stack, port, fake)
            for m in ("q", "r"):
                assert post_webhook(port, inbound(m, f"question {m}")) == 200
                wait_until(
                    lambda m=m: journal_states(tether_home).get(m) == "submitted:webhook/default/c1",
                    20, f"{m} to be accepted behind m1",
                )
            stack.kill_gateway()
            stack.server.kill_9()
            stack.server = ServerProcess(stack.env, workdir, *listen)
            wait_until(lambda: len(fake.requests) >= 2, 30, "q's turn, with no gateway")
            stack.start_gateway()
            wait_until(
                lambda: all(
                    not s.startswith(("submitted:", "queued"))
                    for s in journal_states(tether_home).values()
                ),
                60, "every message to be settled",
            )
            time.sleep(1.0)  # nothing more comes
        finally:
            stack.stop()
        log = "".join(stack.gateway_lines)
    texts = [c[1]["text"] for c in receiver.calls]
    assert len(texts) == 2 and "answer r" in texts, (texts, log)
    assert any(t.startswith("The agent was interrupted while answering") for t in texts), texts
    assert journal_states(tether_home) == {
        "m1": "handled:interrupted",
        "q": "answered:webhook/default/c1",
        "r": "answered:webhook/default/c1",
    }
    asked = [json.dumps(r["body"]["messages"][-1]) for r in fake.requests]
    assert ["first question" in a for a in asked] == [True, False, False, False], asked
    assert "question q" in asked[1] and "question r" in asked[2]
