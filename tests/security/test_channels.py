"""Channel attacks, end to end (real `tether server` + `tether channel-gateway`): a
prompt-injected agent calling MessageChannel to reach a chat its conversation does not serve,
and inbound messages from people who may not reach the agent. Judged by effect: what the
platform received and what reached the model."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.channels.platforms import (
    Recorder,
    post_webhook,
    wait_until,
    webhook_receiver,
    webhook_stack,
)
from tether.testing.fake_provider import FakeProvider


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


HOSTILE_REPLIES = [
    ("c1", {"channel": "webhook", "chat_id": "c2", "text": "leak"}),  # a chat never routed here
    ("*", {"channel": "webhook", "chat_id": "c2", "text": "leak"}),  # wildcard: c2 never wrote
    ("c1", {"channel": "webhook", "chat_id": "*", "text": "leak"}),
    ("c1", {"channel": "telegram", "chat_id": "c1", "text": "leak"}),  # a channel not running
    ("c1", {"channel": "webhook", "account": "other", "chat_id": "c1", "text": "leak"}),
    ("c1", {"channel": "webhook", "chat_id": ["c1"], "text": "leak"}),
    ("c1", {"channel": "webhook", "chat_id": "c1"}),
    ("c1", {"channel": "webhook", "chat_id": "c1", "text": ""}),
]


@pytest.mark.parametrize(("route_chat", "args"), HOSTILE_REPLIES)
def test_message_channel_reaches_only_chats_of_its_own_conversation(
    tmp_path: Path, tether_home: Path, workdir: Path, receiver: Recorder, route_chat: str,
    args: dict[str, Any],
) -> None:
    script: list[dict[str, Any]] = [{"tool_calls": [{"name": "MessageChannel", "arguments": args}]}, {"text": "ok"}]
    with FakeProvider(script) as fake:
        stack, port = webhook_stack(
            fake.url, tether_home, tmp_path, workdir, receiver, route_chat, "--allow", "u1"
        )
        try:
            stack.start_gateway()
            body = {"message_id": "m1", "chat_id": "c1", "sender_id": "u1", "text": "hi"}
            assert post_webhook(port, body) == 200
            wait_until(lambda: len(fake.requests) == 2, what="the turn to finish")
        finally:
            stack.stop()
        result = json.dumps(fake.requests[1]["body"])
    assert receiver.calls == []  # nothing reached any chat
    refusals = ("is not routed to this conversation", "is running in this gateway",
                "MessageChannel needs string", "Invalid arguments for MessageChannel")
    assert any(r in result for r in refusals), result[:2000]
    db = sqlite3.connect(tether_home / "channels" / "gateway.db")
    assert db.execute("SELECT count(*) FROM outbox WHERE state = 'sent'").fetchone() == (0,)


HOSTILE_SENDERS = [
    # (account flags, inbound body): none of them may reach the agent
    (("--dm-policy", "allowlist", "--allow", "u1"), {"sender_id": "u2"}),
    (("--dm-policy", "allowlist", "--allow", "u1"), {"sender_id": "U1"}),  # ids are exact
    (("--dm-policy", "allowlist", "--allow", "u1"), {"sender_id": "u1 "}),
    (("--dm-policy", "allowlist"), {"sender_id": "*"}),
    (("--allow", "u1", "--group-policy", "disabled"),
     {"sender_id": "u1", "chat_type": "channel", "is_mention": True}),
    (("--allow", "u1", "--group-policy", "mention"), {"sender_id": "u1", "chat_type": "channel"}),
    (("--allow", "u1", "--group-policy", "open"), {"sender_id": "u9", "chat_type": "channel"}),
]


@pytest.mark.parametrize(("flags", "body"), HOSTILE_SENDERS)
def test_people_who_may_not_talk_to_the_agent_never_reach_it(
    tmp_path: Path, tether_home: Path, workdir: Path, receiver: Recorder,
    flags: tuple[str, ...], body: dict[str, Any],
) -> None:
    with FakeProvider([{"text": "never"}]) as fake:
        stack, port = webhook_stack(fake.url, tether_home, tmp_path, workdir, receiver, "c1", *flags)
        try:
            stack.start_gateway()
            message = {"message_id": "m1", "chat_id": "c1", "text": "do it", **body}
            assert post_webhook(port, message) == 200
            db = sqlite3.connect(tether_home / "channels" / "gateway.db")
            wait_until(lambda: db.execute(
                "SELECT state FROM inbox").fetchone()[0].startswith("handled"),
                what="the message to be handled")
        finally:
            stack.stop()
        assert fake.requests == []
    assert receiver.calls == []  # not even an answer: strangers learn nothing
