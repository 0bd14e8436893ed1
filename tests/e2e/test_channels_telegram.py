"""The Telegram channel end to end: python-telegram-bot (the real SDK) against a loopback fake
of the Bot API, with real `tether server` and `tether channel-gateway` processes."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

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


def _post_update(port: int, update: dict[str, object], secret: str) -> int:
    import urllib.error
    import urllib.request

    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/telegram", json.dumps(update).encode(), method="POST",
        headers={"Content-Type": "application/json",
                 "X-Telegram-Bot-Api-Secret-Token": secret},
    )
    try:
        with urllib.request.urlopen(request, timeout=20) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


def test_webhook_mode_checks_the_secret_token_and_delivers(
    tmp_path: Path, tether_home: Path, workdir: Path, telegram: FakeTelegram
) -> None:
    from tests.channels.platforms import free_port

    call = {"name": "MessageChannel",
            "arguments": {"channel": "telegram", "chat_id": "42", "text": "via webhook"}}
    update = {"update_id": 9, "message": {
        "message_id": 77, "date": 1700000000, "text": "hook hello",
        "chat": {"id": 42, "type": "private"},
        "from": {"id": 42, "is_bot": False, "first_name": "Ann"}}}
    with FakeProvider([{"tool_calls": [call]}, {"text": "done"}]) as fake:
        stack = Stack(fake.url, tether_home, tmp_path, workdir)
        try:
            port = free_port()
            configure(stack, telegram, "--allow", "42", "--set", "mode=webhook",
                      "--set", f"port={port}", "--set", "secret_token=hook-secret")
            stack.start_gateway()
            for wrong in ("", "hook-secreT", "hook-secret2", "x" * 300):
                assert _post_update(port, update, wrong) == 401
            assert fake.requests == []
            assert _post_update(port, update, "hook-secret") == 200
            assert _post_update(port, update, "hook-secret") == 200  # a redelivery: dropped
            wait_until(lambda: telegram.sent, what="sendMessage")
            wait_until(lambda: len(fake.requests) == 2, what="the turn to finish")
        finally:
            stack.stop()
        assert "hook hello" in json.dumps(fake.requests[0]["body"])
    assert [m["text"] for m in telegram.sent] == ["via webhook"]


def test_an_approval_denied_with_a_plain_no_in_the_dm_runs_nothing(
    tmp_path: Path, tether_home: Path, workdir: Path, telegram: FakeTelegram
) -> None:
    bash = {"name": "Bash", "arguments": {"command": "touch denied.txt", "description": "x"}}
    tell = {"name": "MessageChannel",
            "arguments": {"channel": "telegram", "chat_id": "42", "text": "ok, not doing it"}}
    script: list[dict[str, Any]] = [{"tool_calls": [bash]}, {"tool_calls": [tell]},
                                    {"text": "done"}]
    with FakeProvider(script) as fake:
        stack = Stack(fake.url, tether_home, tmp_path, workdir)
        try:
            configure(stack, telegram, "--allow", "42")
            telegram.dm(42, "please make denied.txt")
            stack.start_gateway()
            ask = wait_until(lambda: [m for m in telegram.sent if "Approval needed" in m["text"]],
                             what="the approval question")[0]
            assert "touch denied.txt" in ask["text"]
            telegram.dm(42, "no")
            wait_until(lambda: len(fake.requests) == 3, what="the turn to finish")
        finally:
            stack.stop()
        assert "answered by 42 in the chat" in json.dumps(fake.requests[1]["body"])
    assert not (workdir / "denied.txt").exists()
    texts = [m["text"] for m in telegram.sent]
    assert "Denied." in texts and "ok, not doing it" in texts
