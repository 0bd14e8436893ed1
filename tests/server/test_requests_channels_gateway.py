"""Channel requests against a running gateway: the real `tether server` and
`tether channel-gateway` processes on one TETHER_HOME. An account an App Server client creates,
routes and starts is picked up by the gateway without a restart (it re-reads accounts.json when
it changes) and answers its chat; a stopped account's adapter stops; a start or stop waits
for the live gateway to act, so `running` in its answer is what the gateway did, and an
account whose adapter would not start is named with the reason and left disabled."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

from websockets.asyncio.client import connect

from tests.channels.platforms import Stack, wait_until
from tests.server.requests_client import ask
from tests.server.support import Client
from tether.testing.fake_provider import FakeProvider

PLUGIN = Path(__file__).parent.parent / "channels" / "custom_filedrop"


async def running(c: Client, account_id: str) -> bool:
    listed = await ask(c, "channel_accounts_list", channel_id="filedrop")
    return any(a["account_id"] == account_id and a["running"] for a in listed["accounts"])


async def until(c: Client, account_id: str, want: bool) -> None:
    """Poll (the gateway's first start is not a request anyone waited on)."""
    for _ in range(200):
        if await running(c, account_id) is want:
            return
        await asyncio.sleep(0.1)
    raise AssertionError(f"filedrop/{account_id} running never became {want}")


def test_an_account_made_over_the_protocol_is_served_by_the_running_gateway(
    tmp_path: Path, tether_home: Path
) -> None:
    workdir = tmp_path / "project"
    workdir.mkdir()
    drop_a, drop_b = tmp_path / "drop-a", tmp_path / "drop-b"
    drop_a.mkdir()
    drop_b.mkdir()
    call = {"name": "MessageChannel", "arguments": {
        "channel": "filedrop", "account": "b", "chat_id": "room", "text": "hello from b"}}
    with FakeProvider([{"tool_calls": [call]}, {"text": "done"}]) as fake:
        stack = Stack(fake.url, tether_home, tmp_path, workdir)
        try:
            stack.channels("install", str(PLUGIN))
            stack.channels("configure", "filedrop", "--set", f"dir={drop_a}")
            agent = stack.agent()
            stack.start_gateway()

            async def scenario() -> dict[str, Any]:
                async with connect(stack.server.url) as ws:
                    c = Client(ws)
                    listed = await ask(c, "channels_list")
                    mine = {ch["channel_id"]: ch for ch in listed["channels"]}["filedrop"]
                    assert mine["display_name"] == "File drop" and mine["config_schema"] is None
                    await until(c, "default", True)
                    made = await ask(c, "channel_account_create", channel_id="filedrop", account={
                        "account_id": "b", "allowed_users": ["ann"], "config": {"dir": str(drop_b)}})
                    assert made["success"] and made["account"]["config"] == {"has_dir": True}, made
                    assert made["account"]["running"] is False
                    routed = await ask(c, "channel_route_update", channel_id="filedrop",
                                       account_id="b", chat_id="room",
                                       runtime={"agent_id": agent, "conversation_id": "default"})
                    assert routed["success"], routed
                    started = await ask(c, "channel_account_start", channel_id="filedrop",
                                        account_id="b")
                    assert started["success"] and started["account"]["enabled"], started
                    assert started["account"]["running"] is True  # it waited for the gateway
                    (drop_b / "inbox.jsonl").write_text(json.dumps(
                        {"id": "1", "chat": "room", "user": "ann", "text": "hi b"}) + "\n")
                    outbox = drop_b / "outbox.jsonl"
                    await asyncio.to_thread(
                        wait_until, lambda: outbox.exists() and outbox.read_text(), 30, "reply")
                    stopped = await ask(c, "channel_account_stop", channel_id="filedrop",
                                        account_id="default")
                    assert stopped["account"]["enabled"] is False
                    assert stopped["account"]["running"] is False
                    assert not await running(c, "default")

                    await ask(c, "channel_account_create", channel_id="filedrop",
                              account={"account_id": "broken", "config": {"folder": "x"}})
                    failed = await ask(c, "channel_account_start", channel_id="filedrop",
                                       account_id="broken")
                    assert failed["success"] is False and failed["account"] is None, failed
                    assert 'filedrop account "broken" did not start: KeyError' in failed["error"]
                    listed = await ask(c, "channel_accounts_list", channel_id="filedrop")
                    broken = [a for a in listed["accounts"] if a["account_id"] == "broken"]
                    assert broken[0]["enabled"] is False and broken[0]["running"] is False
                    again = await ask(c, "channel_start", channel_id="filedrop", account_id="b")
                    assert again["success"] and again["channel"]["running"] is True, again
                    return (await ask(c, "channels_list"))

            summary = asyncio.run(scenario())
            wait_until(lambda: len(fake.requests) == 2, what="the turn to finish")
            lines = "".join(stack.gateway_lines)
            assert "filedrop/b started" in lines and "filedrop/default stopped" in lines, lines
        finally:
            stack.stop()
    assert [json.loads(x) for x in (drop_b / "outbox.jsonl").read_text().splitlines()] == [
        {"chat": "room", "text": "hello from b"}]
    assert not (drop_a / "outbox.jsonl").exists()
    filedrop = {ch["channel_id"]: ch for ch in summary["channels"]}["filedrop"]
    assert filedrop["running"] is True and filedrop["routes_count"] == 1
    assert not (tether_home / "channels" / "gateway-status.json").exists()  # it stopped
