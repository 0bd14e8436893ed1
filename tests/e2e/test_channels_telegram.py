"""The Telegram channel end to end: python-telegram-bot (the real SDK) against a loopback fake
of the Bot API, with real `tether server` and `tether channel-gateway` processes."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.channels.platforms import FakeTelegram, Stack, wait_until
from tether.testing.fake_provider import FakeProvider


@pytest.fixture
def telegram() -> Iterator[FakeTelegram]:
    fake = FakeTelegram()
    yield fake
    fake.close()


def configure(stack: Stack, tg: FakeTelegram, *extra: str) -> str:
    agent = stack.agent()
    stack.channels("configure", "telegram", "--set", f"token={tg.TOKEN}",
                   "--set", f"base_url={tg.base_url}", "--set", "poll_timeout=1", *extra)
    stack.channels("route", "add", "telegram", "42", "--agent", agent)
    return agent


def test_dm_from_an_allowed_user_reaches_the_agent_and_the_reply_reaches_send_message(
    tmp_path: Path, tether_home: Path, workdir: Path, telegram: FakeTelegram
) -> None:
    call = {"name": "MessageChannel",
            "arguments": {"channel": "telegram", "chat_id": "42", "text": "hi from the agent"}}
    with FakeProvider([{"tool_calls": [call]}, {"text": "done"}]) as fake:
        stack = Stack(fake.url, tether_home, tmp_path, workdir)
        try:
            configure(stack, telegram, "--allow", "42")
            telegram.dm(42, "hello bot")
            stack.start_gateway()
            wait_until(lambda: telegram.sent, what="sendMessage")
            wait_until(lambda: len(fake.requests) == 2, what="the turn to finish")
            wait_until(lambda: telegram.confirmed >= 1, what="the update to be confirmed")
        finally:
            stack.stop()
        assert "hello bot" in json.dumps(fake.requests[0]["body"])
    assert [(m["chat_id"], m["text"]) for m in telegram.sent] == [("42", "hi from the agent")]


def test_a_user_not_on_the_allowlist_gets_the_pairing_flow_and_nothing_reaches_the_agent(
    tmp_path: Path, tether_home: Path, workdir: Path, telegram: FakeTelegram
) -> None:
    with FakeProvider([{"text": "never"}]) as fake:
        stack = Stack(fake.url, tether_home, tmp_path, workdir)
        try:
            configure(stack, telegram, "--allow", "7", "--dm-policy", "pairing")
            telegram.dm(42, "let me in", name="Mallory")
            stack.start_gateway()
            wait_until(lambda: telegram.sent, what="the pairing answer")
        finally:
            stack.stop()
        assert fake.requests == []
    text = telegram.sent[0]["text"]
    assert telegram.sent[0]["chat_id"] == "42" and "pairing code" in text
    assert "tether channels pair telegram" in text
