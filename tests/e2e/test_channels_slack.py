"""The Slack channel end to end: slack-sdk's Socket Mode client and WebClient (the real SDK)
against a loopback fake of Slack, with real `tether server` and `tether channel-gateway`
processes: an approval asked and answered in a thread."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.channels.platforms import FakeSlack, Stack, wait_until
from tether.testing.fake_provider import FakeProvider


@pytest.fixture
def slack() -> Iterator[FakeSlack]:
    fake = FakeSlack()
    yield fake
    fake.close()


def test_an_approval_is_asked_and_answered_in_a_slack_thread(
    tmp_path: Path, tether_home: Path, workdir: Path, slack: FakeSlack
) -> None:
    write = {"name": "Bash", "arguments": {"command": "touch approved.txt",
                                           "description": "make the file"}}
    done = {"name": "MessageChannel", "arguments": {
        "channel": "slack", "chat_id": "C1", "thread_id": "1700000000.000100", "text": "made it"}}
    script: list[dict[str, Any]] = [{"tool_calls": [write]}, {"tool_calls": [done]}, {"text": "finished"}]
    with FakeProvider(script) as fake:
        stack = Stack(fake.url, tether_home, tmp_path, workdir)
        try:
            agent = stack.agent()
            stack.channels("configure", "slack", "--set", "bot_token=xoxb-test",
                           "--set", "app_token=xapp-test", "--set", f"base_url={slack.base_url}",
                           "--allow", "U1", "--group-policy", "mention")
            stack.channels("route", "add", "slack", "C1", "--agent", agent)
            stack.start_gateway()
            first = slack.push({"type": "message", "channel": "C1", "channel_type": "channel",
                                "user": "U1", "text": f"<@{FakeSlack.BOT}> make approved.txt",
                                "ts": "1700000000.000100"})
            wait_until(lambda: first in slack.acks, what="the event's acknowledgement")
            ask = wait_until(lambda: [p for p in slack.posts if "Approval needed" in p["text"]],
                             what="the approval question")[0]
            assert ask["channel"] == "C1" and ask["thread_ts"] == "1700000000.000100"
            assert "touch approved.txt" in ask["text"]
            assert not (workdir / "approved.txt").exists()
            code = re.search(r"/approve (\w+)", ask["text"]).group(1)  # type: ignore[union-attr]
            # Someone not allowed answers first: ignored; then the allowed user, in the thread.
            stranger = slack.push({"type": "message", "channel": "C1", "channel_type": "channel",
                                   "user": "U2", "text": f"<@{FakeSlack.BOT}> /approve {code}",
                                   "ts": "1700000001.000100", "thread_ts": "1700000000.000100"})
            wait_until(lambda: stranger in slack.acks, what="the stranger's event")
            time.sleep(1.0)  # the gateway has handled it by now: nothing may have run
            assert not (workdir / "approved.txt").exists() and len(fake.requests) == 1
            slack.push({"type": "message", "channel": "C1", "channel_type": "channel",
                        "user": "U1", "text": f"/approve {code}", "ts": "1700000002.000100",
                        "thread_ts": "1700000000.000100"})
            wait_until(lambda: len(fake.requests) == 3, what="the turn to finish")
            wait_until(lambda: any(p["text"] == "made it" for p in slack.posts), what="the reply")
        finally:
            stack.stop()
        assert "make approved.txt" in json.dumps(fake.requests[0]["body"])
    assert (workdir / "approved.txt").exists()
    reply = next(p for p in slack.posts if p["text"] == "made it")
    assert reply["thread_ts"] == "1700000000.000100"
