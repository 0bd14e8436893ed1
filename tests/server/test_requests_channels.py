"""Channels over protocol v2 (reference §12.3, `protocol_v2.ts` Channel*Command): accounts
created, changed, started, stopped, bound and deleted in the files the gateway reads, configs
shown with every secret as `has_<key>` only, pairings approved into routes, routes updated and
removed, `channel_*_updated` notifications, targets refused saying why, unknown channels named;
a scoped token is refused every channel request with one answer whatever it names."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.server.requests_client import admin_client, ask, same_answer, token
from tests.server.support import MODEL, Client, point_at
from tether.runtime.channel_files import AccountStore, GatewayStatus, PairingStore, RouteTable
from tether.testing.fake_provider import FakeProvider

SECRET = "hmac-secret-0123456789"


async def changed(c: Client, kind: str = "channels_updated", **match: Any) -> dict[str, Any]:
    """A notification that follows the response just read (or one already seen)."""
    for frame in c.seen:
        if frame.get("type") == kind and all(frame.get(k) == v for k, v in match.items()):
            c.seen.remove(frame)
            return frame
    return await c.of_type(kind, timeout=5, **match)


def test_channel_accounts_configs_and_lifecycle(
    tmp_path: Path, tether_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    project = tmp_path / "project"
    project.mkdir()
    with FakeProvider([]) as fake:
        point_at(fake, monkeypatch)

        async def scenario() -> None:
            async with admin_client(project) as (_srv, c):
                info = await ask(c, "app_server_info")
                assert info["capabilities"]["channels"] is True
                listed = await ask(c, "channels_list")
                assert listed["success"], listed
                by_id = {ch["channel_id"]: ch for ch in listed["channels"]}
                assert set(by_id) == {"telegram", "slack", "webhook"}
                hook = by_id["webhook"]
                assert hook["configured"] is False and hook["dm_policy"] is None
                assert hook["pending_pairings_count"] == 0 and hook["routes_count"] == 0
                fields = {f["key"]: f for f in hook["config_schema"]["fields"]}
                assert hook["config_schema"]["version"] == 1
                assert fields["secret"]["type"] == "secret" and fields["secret"]["required"]
                assert by_id["telegram"]["config_schema"]["fields"][1]["options"][0] == {
                    "value": "polling", "label": "polling"}

                made = await ask(c, "channel_account_create", channel_id="webhook", account={
                    "account_id": "main", "dm_policy": "allowlist", "allowed_users": ["u1"],
                    "config": {"secret": SECRET, "port": 0}})
                assert made["success"] and made["channel_id"] == "webhook", made
                account = made["account"]
                assert account["account_id"] == "main" and account["enabled"] is False
                assert account["configured"] is True and account["running"] is False
                assert account["config"] == {"has_secret": True, "port": 0}
                assert account["allowed_users"] == ["u1"] and account["dm_policy"] == "allowlist"
                assert account["created_at"].endswith("Z")
                await changed(c, "channel_accounts_updated", channel_id="webhook",
                              account_id="main")
                await changed(c, channel_id="webhook")
                stored = AccountStore(tether_home).get("webhook", "main")
                assert stored is not None and stored.config["secret"] == SECRET

                again = await ask(c, "channel_account_create", channel_id="webhook",
                                  account={"account_id": "main"})
                assert again["success"] is False and "already exists" in again["error"]
                assert again["account"] is None and again["channel_id"] == "webhook"

                # The redacted view sent back with a change keeps the secret.
                upd = await ask(c, "channel_account_update", channel_id="webhook",
                                account_id="main", patch={
                                    "display_name": "Hooks",
                                    "config": {**account["config"], "port": 9}})
                assert upd["success"], upd
                assert upd["account"]["config"] == {"has_secret": True, "port": 9}
                assert upd["account"]["display_name"] == "Hooks"
                stored = AccountStore(tether_home).get("webhook", "main")
                assert stored is not None and stored.config == {"secret": SECRET, "port": 9}
                for patch, why in (({"config": {"port": "nine"}}, "'port' must be a number"),
                                   ({"config": {"nope": 1}}, "no such setting"),
                                   ({"dm_policy": "maybe"}, "dm_policy must be one of"),
                                   ({"colour": "red"}, "unknown field(s) colour")):
                    bad = await ask(c, "channel_account_update", channel_id="webhook",
                                    account_id="main", patch=patch)
                    assert bad["success"] is False and why in bad["error"], (patch, bad)
                    assert bad["account"] is None
                missing = await ask(c, "channel_account_update", channel_id="webhook",
                                    account_id="ghost", patch={})
                assert "was not found" in missing["error"]
                unknown = await ask(c, "channel_accounts_list", channel_id="discord")
                assert unknown["success"] is False and unknown["accounts"] == []
                assert "Unsupported channel: discord" in unknown["error"]
                assert unknown["channel_id"] == "discord"
                sneaky = await ask(c, "channel_accounts_list", channel_id="../secrets")
                assert sneaky["success"] is False and "a-z, 0-9" in sneaky["error"]
                slash = await ask(c, "channel_account_create", channel_id="webhook",
                                  account={"account_id": "a/b"})
                assert slash["success"] is False and "without '/'" in slash["error"]

                started = await ask(c, "channel_account_start", channel_id="webhook",
                                    account_id="main")
                assert started["success"] and started["account"]["enabled"] is True, started
                assert AccountStore(tether_home).get("webhook", "main").enabled  # type: ignore[union-attr]
                GatewayStatus(tether_home).write([("webhook", "main")])  # as a live gateway does
                seen = await ask(c, "channel_accounts_list", channel_id="webhook")
                assert [a["running"] for a in seen["accounts"]] == [True]
                (tether_home / "channels" / "gateway-status.json").write_bytes(
                    orjson.dumps({"pid": 2**22 + 7, "running": ["webhook/main"]}))  # dead pid
                seen = await ask(c, "channel_accounts_list", channel_id="webhook")
                assert [a["running"] for a in seen["accounts"]] == [False]
                stopped = await ask(c, "channel_account_stop", channel_id="webhook",
                                    account_id="main")
                assert stopped["account"]["enabled"] is False

                bare = await ask(c, "channel_account_create", channel_id="telegram",
                                 account={})
                assert bare["account"]["account_id"] == "default", bare
                assert bare["account"]["configured"] is False
                refused = await ask(c, "channel_account_start", channel_id="telegram",
                                    account_id="default")
                assert refused["success"] is False and "not configured" in refused["error"]

                got = await ask(c, "channel_get_config", channel_id="webhook")
                assert got["config"] == {
                    "channel_id": "webhook", "account_id": "main", "display_name": "Hooks",
                    "enabled": False, "dm_policy": "allowlist", "allowed_users": ["u1"],
                    "config": {"has_secret": True, "port": 9}}, got
                none = await ask(c, "channel_get_config", channel_id="slack")
                assert none["success"] is True and none["config"] is None
                put = await ask(c, "channel_set_config", channel_id="webhook", config={
                    "dm_policy": "open", "plugin_config": {"path": "/in"}})
                assert put["config"]["dm_policy"] == "open", put
                assert put["config"]["config"] == {"has_secret": True, "port": 9, "path": "/in"}
                new = await ask(c, "channel_set_config", channel_id="slack", account_id="team",
                                config={"plugin_config": {"bot_token": "xoxb-1"}})
                assert new["config"]["account_id"] == "team" and new["config"]["enabled"] is False
                assert new["config"]["config"] == {"has_bot_token": True}

                on = await ask(c, "channel_start", channel_id="webhook")
                assert on["channel"]["enabled"] is True and on["channel"]["configured"], on
                off = await ask(c, "channel_stop", channel_id="webhook", account_id="main")
                assert off["channel"]["enabled"] is False
                not_yet = await ask(c, "channel_start", channel_id="telegram")
                assert not_yet["success"] is False and not_yet["channel"] is None

                for kind, extra in (("channel_targets_list", {}),
                                    ("channel_target_bind", {"target_id": "T1", "runtime": {
                                        "agent_id": "x", "conversation_id": "default"}})):
                    no = await ask(c, kind, channel_id="webhook", **extra)
                    assert no["success"] is False and "do not discover targets" in no["error"]
                assert no["target_id"] == "T1" and no["route"] is None

                gone = await ask(c, "channel_account_delete", channel_id="webhook",
                                 account_id="main")
                assert gone["success"] and gone["deleted"] is True, gone
                await changed(c, "channel_routes_updated", channel_id="webhook")
                twice = await ask(c, "channel_account_delete", channel_id="webhook",
                                  account_id="main")
                assert twice["success"] and twice["deleted"] is False
                assert AccountStore(tether_home).get("webhook", "main") is None
                assert SECRET not in str(c.seen) and "xoxb-1" not in str(c.seen)

        asyncio.run(scenario())


def test_channel_pairings_and_routes(
    tmp_path: Path, tether_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    project = tmp_path / "project"
    project.mkdir()
    with FakeProvider([]) as fake:
        point_at(fake, monkeypatch)

        async def scenario() -> None:
            async with admin_client(project) as (_srv, c):
                a = (await ask(c, "agent_create", body={"model": MODEL}))["agent"]["id"]
                conv = (await ask(c, "conversation_create", body={"agent_id": a}))["conversation"]["id"]
                await ask(c, "channel_account_create", channel_id="webhook",
                          account={"config": {"secret": SECRET}})
                code = PairingStore(tether_home).code_for("webhook", "default", "chat-7", "u7",
                                                          "Ann")  # as the gateway does
                pending = await ask(c, "channel_pairings_list", channel_id="webhook")
                assert [p["code"] for p in pending["pending"]] == [code], pending
                item = pending["pending"][0]
                assert item["sender_id"] == "u7" and item["sender_name"] == "Ann"
                assert item["chat_id"] == "chat-7" and item["account_id"] == "default"
                assert item["expires_at"] > item["created_at"]

                wrong = await ask(c, "channel_pairing_bind", channel_id="webhook", code="NOPE",
                                  runtime={"agent_id": a, "conversation_id": "default"})
                assert wrong["success"] is False and wrong["route"] is None
                assert "no pending pairing code" in wrong["error"]
                bound = await ask(c, "channel_pairing_bind", channel_id="webhook",
                                  code=code.lower(),
                                  runtime={"agent_id": a, "conversation_id": conv})
                assert bound["success"] and bound["chat_id"] == "chat-7", bound
                route = bound["route"]
                assert route["agent_id"] == a and route["conversation_id"] == conv
                assert route["enabled"] is True and route["thread_id"] is None
                await changed(c, "channel_pairings_updated", channel_id="webhook")
                await changed(c, "channel_routes_updated", channel_id="webhook", agent_id=a)
                account = AccountStore(tether_home).get("webhook")
                assert account is not None and account.allowed_users == ["u7"]
                assert PairingStore(tether_home).pending() == []
                table = RouteTable(tether_home)
                assert table.lookup("webhook", "default", "chat-7").agent_id == a  # type: ignore[union-attr]

                bind = await ask(c, "channel_account_bind", channel_id="webhook",
                                 account_id="default",
                                 runtime={"agent_id": a, "conversation_id": "new"})
                assert bind["success"] and bind["account"]["account_id"] == "default", bind
                assert table.lookup("webhook", "default", "elsewhere").chat_id == "*"  # type: ignore[union-attr]

                upd = await ask(c, "channel_route_update", channel_id="webhook",
                                chat_id="chat-9", runtime={"agent_id": a,
                                                           "conversation_id": "default"})
                assert upd["success"] and upd["route"]["chat_id"] == "chat-9", upd
                moved = await ask(c, "channel_route_update", channel_id="webhook",
                                  chat_id="chat-7", runtime={"agent_id": a,
                                                             "conversation_id": "default"})
                assert moved["route"]["conversation_id"] == "default"
                assert moved["route"]["created_at"] == route["created_at"]
                routes = await ask(c, "channel_routes_list", channel_id="webhook",
                                   conversation_id="default")
                assert sorted(r["chat_id"] for r in routes["routes"]) == ["chat-7", "chat-9"]
                everything = await ask(c, "channel_routes_list")
                assert "channel_id" not in everything and len(everything["routes"]) == 3

                made_up = "agent-local-33333333-3333-3333-3333-333333333333"
                for runtime, why in (({"agent_id": made_up, "conversation_id": "default"},
                                      "no such agent"),
                                     ({"agent_id": a, "conversation_id": "conv-nope"},
                                      "no such conversation"),
                                     ({"agent_id": a}, "needs conversation_id")):
                    bad = await ask(c, "channel_route_update", channel_id="webhook",
                                    chat_id="chat-1", runtime=runtime)
                    assert bad["success"] is False and why in bad["error"], bad
                    assert bad["chat_id"] == "chat-1" and bad["route"] is None
                no_account = await ask(c, "channel_route_update", channel_id="slack",
                                       chat_id="C1", runtime={"agent_id": a,
                                                              "conversation_id": "default"})
                assert "not configured" in no_account["error"]

                removed = await ask(c, "channel_route_remove", channel_id="webhook",
                                    chat_id="chat-9")
                assert removed["success"] and removed["found"] is True, removed
                again = await ask(c, "channel_route_remove", channel_id="webhook",
                                  chat_id="chat-9")
                assert again["success"] and again["found"] is False
                unbind = await ask(c, "channel_account_unbind", channel_id="webhook",
                                   account_id="default")
                assert unbind["success"], unbind
                assert [r.chat_id for r in table.load()] == ["chat-7"]
                summary = {ch["channel_id"]: ch for ch in
                           (await ask(c, "channels_list"))["channels"]}["webhook"]
                assert summary["routes_count"] == 1 and summary["approved_users_count"] == 1

        asyncio.run(scenario())


def test_a_scoped_token_is_refused_every_channel_request_alike(
    tmp_path: Path, tether_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    project = tmp_path / "project"
    project.mkdir()
    with FakeProvider([]) as fake:
        point_at(fake, monkeypatch)

        async def scenario() -> None:
            async with admin_client(project) as (srv, c):
                a = (await ask(c, "agent_create", body={"model": MODEL}))["agent"]["id"]
                await ask(c, "channel_account_create", channel_id="webhook",
                          account={"account_id": "main", "config": {"secret": SECRET}})
                rt = {"agent_id": a, "conversation_id": "default"}
                await ask(c, "channel_route_update", channel_id="webhook", chat_id="c1",
                          runtime=rt)
                before = (tether_home / "channels" / "accounts.json").read_bytes()
                async with srv.connect(additional_headers=token(agents=[a])) as ws:
                    s = Client(ws)
                    info = await ask(s, "app_server_info")
                    assert info["success"], info
                    cases: list[tuple[str, dict[str, Any], dict[str, Any]]] = [
                        ("channels_list", {}, {}),
                        ("channel_accounts_list", {"channel_id": "webhook"},
                         {"channel_id": "nochannel"}),
                        ("channel_account_delete", {"channel_id": "webhook",
                                                    "account_id": "main"},
                         {"channel_id": "webhook", "account_id": "ghost"}),
                        ("channel_get_config", {"channel_id": "webhook"},
                         {"channel_id": "nochannel"}),
                        ("channel_account_start", {"channel_id": "webhook",
                                                   "account_id": "main"},
                         {"channel_id": "webhook", "account_id": "ghost"}),
                        ("channel_route_remove", {"channel_id": "webhook", "chat_id": "c1"},
                         {"channel_id": "webhook", "chat_id": "zz"}),
                        ("channel_routes_list", {"agent_id": a}, {"agent_id": "agent-x"}),
                        ("channel_route_update", {"channel_id": "webhook", "chat_id": "c2",
                                                  "runtime": rt},
                         {"channel_id": "webhook", "chat_id": "c2",
                          "runtime": {"agent_id": "agent-x", "conversation_id": "default"}}),
                    ]
                    for kind, real, fake_ in cases:
                        mine = await ask(s, kind, **real)
                        other = await ask(s, kind, **fake_)
                        assert mine["success"] is False and "unscoped" in mine["error"], mine
                        assert SECRET not in str(mine) and "has_secret" not in str(mine)
                        pairs = [(str(real[k]), str(fake_[k])) for k in real
                                 if k in fake_ and real[k] != fake_[k] and k != "runtime"]
                        assert same_answer(mine, other, *pairs), (mine, other)
                    assert (tether_home / "channels" / "accounts.json").read_bytes() == before
                    c.seen.clear()
                    renamed = await ask(c, "channel_account_update", channel_id="webhook",
                                        account_id="main", patch={"display_name": "Renamed"})
                    assert renamed["success"], renamed
                    await changed(c, channel_id="webhook")  # the admin is told
                    await ask(s, "channels_list")  # anything sent before it has arrived
                    assert not [f for f in s.seen if "channel" in str(f.get("type"))
                                and not str(f.get("type")).endswith("_response")], s.seen
                assert [r.chat_id for r in RouteTable(tether_home).load()] == ["c1"]

        asyncio.run(scenario())
