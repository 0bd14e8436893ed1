"""The webhook channel end to end: real `tether server` and `tether channel-gateway`
processes, signed POSTs in, the agent's MessageChannel reply out to a loopback receiver."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.channels.platforms import (
    SECRET,
    Recorder,
    Stack,
    free_port,
    post_webhook,
    sign,
    wait_until,
    webhook_receiver,
)
from tether.testing.fake_provider import FakeProvider


def reply(chat: str, text: str) -> dict[str, Any]:
    return {"name": "MessageChannel",
            "arguments": {"channel": "webhook", "chat_id": chat, "text": text}}


def inbound(message_id: str, sender: str = "u1", text: str = "hello agent",
            chat: str = "c1") -> dict[str, Any]:
    return {"message_id": message_id, "chat_id": chat, "sender_id": sender, "text": text}


@pytest.fixture
def receiver() -> Iterator[Recorder]:
    rec = webhook_receiver()
    yield rec
    rec.close()


def configure(stack: Stack, receiver: Recorder, port: int, *extra: str) -> str:
    agent = stack.agent()
    shown = stack.channels(
        "configure", "webhook", "--set", f"secret={SECRET}",
        "--set", f"outbound_url={receiver.url}/out", "--set", f"port={port}", *extra,
    )
    assert shown["config"]["secret"] == "[redacted]"  # never shown back
    stack.channels("route", "add", "webhook", "c1", "--agent", agent)
    return agent


def test_allowed_user_reaches_the_agent_and_its_reply_goes_out(
    tmp_path: Path, tether_home: Path, workdir: Path, receiver: Recorder
) -> None:
    script: list[dict[str, Any]] = [{"tool_calls": [reply("c1", "hi back")]}, {"text": "done"}]
    with FakeProvider(script) as fake:
        stack = Stack(fake.url, tether_home, tmp_path, workdir)
        try:
            port = free_port()
            configure(stack, receiver, port, "--allow", "u1")
            stack.start_gateway()
            assert post_webhook(port, inbound("m1")) == 200
            wait_until(lambda: receiver.calls, what="the reply")
            wait_until(lambda: len(fake.requests) == 2, what="the turn to finish")
        finally:
            stack.stop()
        assert "hello agent" in json.dumps(fake.requests[0]["body"])
        assert "MessageChannel" in json.dumps(fake.requests[0]["body"])
        assert "Sent (message id out-1)" in json.dumps(fake.requests[1]["body"])
    path, body, headers = receiver.calls[0]
    assert (path, body["chat_id"], body["text"]) == ("/out", "c1", "hi back")
    raw = json.dumps(body).encode()
    assert headers["X-Tether-Signature"].startswith("sha256=") and raw  # signed outbound
    assert len(receiver.calls) == 1


BAD_SIGNATURES = ["", "sha256=" + "0" * 64, "sha256=deadbeef", sign(b"other body"),
                  sign(json.dumps(inbound("m1")).encode(), "wrong-secret")]


def test_bad_signatures_are_rejected_and_nothing_reaches_the_agent(
    tmp_path: Path, tether_home: Path, workdir: Path, receiver: Recorder
) -> None:
    with FakeProvider([{"text": "never"}]) as fake:
        stack = Stack(fake.url, tether_home, tmp_path, workdir)
        try:
            port = free_port()
            configure(stack, receiver, port, "--allow", "u1")
            stack.start_gateway()
            for signature in BAD_SIGNATURES:
                assert post_webhook(port, inbound("m1"), signature) == 401, signature
        finally:
            stack.stop()
        assert fake.requests == []
    assert receiver.calls == []
    import sqlite3

    db = sqlite3.connect(tether_home / "channels" / "gateway.db")
    assert db.execute("SELECT count(*) FROM inbox").fetchone() == (0,)


def test_unknown_user_gets_the_pairing_flow_and_nothing_reaches_the_agent(
    tmp_path: Path, tether_home: Path, workdir: Path, receiver: Recorder
) -> None:
    with FakeProvider([{"text": "never"}]) as fake:
        stack = Stack(fake.url, tether_home, tmp_path, workdir)
        try:
            port = free_port()
            configure(stack, receiver, port, "--dm-policy", "pairing")
            stack.start_gateway()
            assert post_webhook(port, inbound("m1", sender="stranger")) == 200
            wait_until(lambda: receiver.calls, what="the pairing answer")
            text = receiver.calls[0][1]["text"]
            code = text.split("pairing code is ")[1].split(".")[0]
            status = stack.channels("status")
            assert status["pending_pairings"][0]["sender"] == "stranger"
            paired = stack.channels("pair", "webhook", code)
            assert "stranger" in paired["account"]["allowedUsers"]
            with pytest.raises(AssertionError):  # a code is used once
                stack.channels("pair", "webhook", code)
        finally:
            stack.stop()
        assert fake.requests == []  # nothing reached the agent
    assert receiver.calls[0][1]["chat_id"] == "c1"


def test_gateway_kill_between_receive_and_reply_loses_and_duplicates_nothing(
    tmp_path: Path, tether_home: Path, workdir: Path, receiver: Recorder
) -> None:
    script: list[dict[str, Any]] = [{"tool_calls": [reply("c1", "once")], "delay_ms": 1500}, {"text": "done"}]
    with FakeProvider(script) as fake:
        stack = Stack(fake.url, tether_home, tmp_path, workdir)
        try:
            port = free_port()
            configure(stack, receiver, port, "--allow", "u1")
            stack.start_gateway()
            assert post_webhook(port, inbound("m1")) == 200  # acknowledged: journaled
            wait_until(lambda: fake.requests, what="the model call")
            stack.kill_gateway()  # received and submitted, the reply not sent yet
            time.sleep(2.0)  # the agent's MessageChannel call now waits for a gateway
            stack.start_gateway()
            # The platform redelivers the message it may think was lost: not a second turn.
            assert post_webhook(port, inbound("m1")) == 200
            wait_until(lambda: receiver.calls, what="the reply")
            wait_until(lambda: len(fake.requests) == 2, what="the turn to finish")
        finally:
            stack.stop()
        assert len(fake.requests) == 2, "one turn, one continuation"
    assert [c[1]["text"] for c in receiver.calls] == ["once"]


def test_gateway_kill_while_sending_never_sends_twice(
    tmp_path: Path, tether_home: Path, workdir: Path, receiver: Recorder
) -> None:
    script: list[dict[str, Any]] = [{"tool_calls": [reply("c1", "exactly once")]}, {"text": "done"}]
    with FakeProvider(script) as fake:
        stack = Stack(fake.url, tether_home, tmp_path, workdir)
        try:
            port = free_port()
            configure(stack, receiver, port, "--allow", "u1")
            receiver.hold.set()  # the platform takes the reply but has not answered yet
            stack.start_gateway()
            assert post_webhook(port, inbound("m1")) == 200
            wait_until(lambda: receiver.calls, what="the reply to reach the platform")
            stack.kill_gateway()
            receiver.hold.clear()
            receiver.release.set()
            stack.start_gateway()
            wait_until(lambda: len(fake.requests) == 2, what="the turn to finish")
        finally:
            stack.stop()
        continuation = json.dumps(fake.requests[1]["body"])
        assert "may have been delivered" in continuation
    assert [c[1]["text"] for c in receiver.calls] == ["exactly once"]


def test_channel_slash_commands(
    tmp_path: Path, tether_home: Path, workdir: Path, receiver: Recorder
) -> None:
    with FakeProvider([{"text": "only the resumed message gets here"}]) as fake:
        stack = Stack(fake.url, tether_home, tmp_path, workdir)
        try:
            port = free_port()
            agent = configure(stack, receiver, port, "--allow", "u1")
            stack.start_gateway()

            def command(n: int, text: str) -> str:
                assert post_webhook(port, inbound(f"cmd{n}", text=text)) == 200
                wait_until(lambda: len(receiver.calls) >= n, what=f"the answer to {text}")
                return str(receiver.calls[n - 1][1]["text"])

            assert "You are u1 (allowed user) in chat c1" in command(1, "/whoami")
            assert f"agent {agent}, conversation default" in command(2, "/chat")
            assert "approvals waiting: 0" in command(3, "/status")
            assert "Paused" in command(4, "/pause")
            assert post_webhook(port, inbound("while-paused", text="are you there?")) == 200
            assert "(paused)" in command(5, "/status")
            assert "Resumed" in command(6, "/resume")
            assert "Nothing was running" in command(7, "/cancel")
            assert "No such approval" in command(8, "/approve abc123")
            assert post_webhook(port, inbound("after", text="back again")) == 200
            wait_until(lambda: fake.requests, what="the resumed message")
        finally:
            stack.stop()
        sent = json.dumps([r["body"] for r in fake.requests])
    assert "back again" in sent and "are you there?" not in sent and "/whoami" not in sent


def test_a_new_conversation_route_keeps_its_conversation_across_gateway_restarts(
    tmp_path: Path, tether_home: Path, workdir: Path, receiver: Recorder
) -> None:
    with FakeProvider([{"text": "first answer"}, {"text": "second answer"}]) as fake:
        stack = Stack(fake.url, tether_home, tmp_path, workdir)
        try:
            port = free_port()
            agent = stack.agent()
            stack.channels("configure", "webhook", "--set", f"secret={SECRET}",
                           "--set", f"outbound_url={receiver.url}/out", "--set", f"port={port}",
                           "--allow", "u1")
            stack.channels("route", "add", "webhook", "c1", "--agent", agent,
                           "--conversation", "new")
            stack.start_gateway()
            assert post_webhook(port, inbound("m1", text="remember the number 7")) == 200
            wait_until(lambda: fake.requests, what="the first turn")
            stack.kill_gateway()
            stack.start_gateway()
            assert post_webhook(port, inbound("m2", text="which number?")) == 200
            wait_until(lambda: len(fake.requests) == 2, what="the second turn")
        finally:
            stack.stop()
        second = json.dumps(fake.requests[1]["body"])
    assert "remember the number 7" in second and "first answer" in second


def test_a_reply_the_platform_refused_is_retried_and_delivered_once(
    tmp_path: Path, tether_home: Path, workdir: Path
) -> None:
    flaky = Recorder(lambda srv, path, body: (503, {"error": "busy"}) if len(srv.calls) == 1
                     else (200, {"message_id": "out-ok"}))
    script: list[dict[str, Any]] = [{"tool_calls": [reply("c1", "persist")]}, {"text": "done"}]
    try:
        with FakeProvider(script) as fake:
            stack = Stack(fake.url, tether_home, tmp_path, workdir)
            try:
                port = free_port()
                configure(stack, flaky, port, "--allow", "u1")
                stack.start_gateway()
                assert post_webhook(port, inbound("m1")) == 200
                wait_until(lambda: len(fake.requests) == 2, what="the turn to finish")
            finally:
                stack.stop()
            assert "Sent (message id out-ok)" in json.dumps(fake.requests[1]["body"])
        assert [c[1]["text"] for c in flaky.calls] == ["persist", "persist"]  # refused, then sent
    finally:
        flaky.close()


def test_the_gateway_authenticates_to_a_token_protected_server(
    tmp_path: Path, tether_home: Path, workdir: Path, receiver: Recorder
) -> None:
    token = tmp_path / "token"
    token.write_text("channel-gateway-token\n")
    token.chmod(0o600)
    script: list[dict[str, Any]] = [{"tool_calls": [reply("c1", "authed")]}, {"text": "done"}]
    with FakeProvider(script) as fake:
        stack = Stack(fake.url, tether_home, tmp_path, workdir, "--ws-auth", "capability-token",
                      "--ws-token-file", str(token), gateway_args=("--token-file", str(token)))
        try:
            port = free_port()
            configure(stack, receiver, port, "--allow", "u1")
            stack.start_gateway()
            assert post_webhook(port, inbound("m1")) == 200
            wait_until(lambda: receiver.calls, what="the reply")
        finally:
            stack.stop()
    assert receiver.calls[0][1]["text"] == "authed"


def test_a_message_journaled_before_a_crash_is_submitted_by_the_next_gateway(
    tmp_path: Path, tether_home: Path, workdir: Path, receiver: Recorder
) -> None:
    from tether.channels.journal import Journal
    from tether.channels.plugins import InboundMessage

    with FakeProvider([{"text": "got it"}]) as fake:
        stack = Stack(fake.url, tether_home, tmp_path, workdir)
        try:
            port = free_port()
            configure(stack, receiver, port, "--allow", "u1")
            # What a gateway killed right after acknowledging (journaled, not yet submitted)
            # leaves behind:
            journal = Journal(tether_home / "channels" / "gateway.db")
            journal.receive(InboundMessage("webhook", "default", "c1", "u1", "left behind",
                                           time.time(), "m-crash"))
            journal.close()
            stack.start_gateway()
            wait_until(lambda: fake.requests, what="the journaled message to reach the agent")
            assert post_webhook(port, inbound("m-crash", text="left behind")) == 200  # redelivery
            time.sleep(1.0)
        finally:
            stack.stop()
        assert len(fake.requests) == 1
        assert "left behind" in json.dumps(fake.requests[0]["body"])
