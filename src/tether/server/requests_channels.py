"""The channel requests (reference §12.3, `src/types/protocol_v2.ts` Channel*Command): channel
summaries, accounts (list, create, update, delete, bind, unbind, start, stop), config,
pending pairings and routes, over `runtime/manage/channels_ops` — the files the gateway
(`tether channel-gateway`) re-reads when they change.

Channel accounts hold bot tokens and decide who may talk to every agent, so every request
needs an unscoped connection (a scoped one gets the same refusal whatever it names), and the
`channels_updated` / `channel_*_updated` notifications go to unscoped connections only.
Targets (channels a bot discovered it was added to) are not something tether's adapters
discover: those two requests fail, saying so.
"""

from __future__ import annotations

import asyncio
from typing import Any

from tether.runtime.manage import channels_ops as ops
from tether.server import v2_frames
from tether.server.request_kit import Call, Request, RequestFailed, Scope, request

NO_TARGETS = (
    "tether's channel adapters do not discover targets (chats a bot was added to); route a "
    "chat by its id with channel_route_update, or approve a pairing with channel_pairing_bind"
)


def _tell(call: Call, *updates: tuple[str, dict[str, Any]]) -> None:
    """Send the notifications after the response (as the reference does), to every unscoped
    connection."""
    frames = [v2_frames.state_updated(kind, **{k: v for k, v in fields.items() if v})
              for kind, fields in updates]

    def send() -> None:
        for conn in list(call.server.connections):
            if not conn.closed and not conn.grant.scoped:
                for frame in frames:
                    conn.send_frame(frame)

    asyncio.get_running_loop().call_soon(send)


def _channel(call: Call) -> str:
    return call.text("channel_id")


def _runtime(call: Call) -> tuple[str, str]:
    """The frame's `runtime{agent_id, conversation_id}`: an existing agent, and `default`,
    `new` (one fresh conversation for the route) or one of that agent's conversations."""
    runtime = call.obj("runtime")
    if not runtime:
        raise call.read.fail("runtime", "is required: {agent_id, conversation_id}")
    unknown = sorted(set(runtime) - {"agent_id", "conversation_id", "acting_user_id"})
    if unknown:
        raise call.read.fail("runtime", f"has unknown field(s) {', '.join(unknown)}")
    agent_id, conversation_id = runtime.get("agent_id"), runtime.get("conversation_id")
    if not isinstance(agent_id, str) or not agent_id:
        raise call.read.fail("runtime", "needs agent_id (a string)")
    if not isinstance(conversation_id, str) or not conversation_id:
        raise call.read.fail("runtime", "needs conversation_id (a string: default, new or an id)")
    call.agent(agent_id)
    if conversation_id not in ("default", "new"):
        call.conversation(conversation_id, agent_id)
    return agent_id, conversation_id


def channels_list(call: Call) -> dict[str, Any]:
    return {"channels": ops.list_summaries(call.home)}


def accounts_list(call: Call) -> dict[str, Any]:
    channel = _channel(call)
    return {"channel_id": channel, "accounts": ops.list_accounts(call.home, channel)}


def _account_changed(call: Call, channel: str, account: dict[str, Any]) -> dict[str, Any]:
    _tell(call, ("channel_accounts_updated", {"channel_id": channel,
                                              "account_id": account["account_id"]}),
          ("channels_updated", {"channel_id": channel}))
    return {"channel_id": channel, "account": account}


def account_create(call: Call) -> dict[str, Any]:
    channel = _channel(call)
    fields = call.frame.msg.get("account")
    if fields is None:
        raise call.read.fail("account", "is required (an object)")
    return _account_changed(call, channel, ops.create_account(call.home, channel, fields))


def account_update(call: Call) -> dict[str, Any]:
    channel = _channel(call)
    patch = call.frame.msg.get("patch")
    if patch is None:
        raise call.read.fail("patch", "is required (an object)")
    account = ops.update_account(call.home, channel, call.text("account_id"), patch)
    return _account_changed(call, channel, account)


def account_bind(call: Call) -> dict[str, Any]:
    channel, account_id = _channel(call), call.text("account_id")
    agent_id, conversation_id = _runtime(call)
    account = ops.bind_account(call.home, channel, account_id, agent_id, conversation_id)
    _tell(call, ("channel_routes_updated", {"channel_id": channel, "agent_id": agent_id,
                                            "conversation_id": conversation_id}))
    return _account_changed(call, channel, account)


def account_unbind(call: Call) -> dict[str, Any]:
    channel = _channel(call)
    account = ops.unbind_account(call.home, channel, call.text("account_id"))
    _tell(call, ("channel_routes_updated", {"channel_id": channel}))
    return _account_changed(call, channel, account)


def account_delete(call: Call) -> dict[str, Any]:
    channel, account_id = _channel(call), call.text("account_id")
    deleted = ops.delete_account(call.home, channel, account_id)
    if deleted:
        _tell(call, *((kind, {"channel_id": channel}) for kind in (
            "channel_pairings_updated", "channel_routes_updated", "channel_targets_updated",
        )), ("channel_accounts_updated", {"channel_id": channel, "account_id": account_id}),
            ("channels_updated", {"channel_id": channel}))
    return {"channel_id": channel, "account_id": account_id, "deleted": deleted}


async def account_start(call: Call) -> dict[str, Any]:
    return await _start_stop(call, True)


async def account_stop(call: Call) -> dict[str, Any]:
    return await _start_stop(call, False)


async def _start_stop(call: Call, run: bool) -> dict[str, Any]:
    """Enable or disable the account, then wait (10 s at most) for a live gateway to start or
    stop its adapter, so `running` in the answer is what the gateway did."""
    channel, account_id = _channel(call), call.text("account_id")
    before = ops.accounts_version(call.home)
    try:
        await ops.start_stop(call.home, channel, [account_id], run)
    finally:
        if ops.accounts_version(call.home) != before:
            _tell(call, ("channel_accounts_updated", {"channel_id": channel,
                                                      "account_id": account_id}),
                  ("channels_updated", {"channel_id": channel}))
    account = ops.account_snapshot(call.home, ops.find_account(call.home, channel, account_id))
    return {"channel_id": channel, "account": account}


def get_config(call: Call) -> dict[str, Any]:
    return {"config": ops.get_config(call.home, _channel(call), call.opt_text("account_id"))}


def set_config(call: Call) -> dict[str, Any]:
    channel = _channel(call)
    config = call.frame.msg.get("config")
    if config is None:
        raise call.read.fail("config", "is required: {dm_policy?, allowed_users?, plugin_config?}")
    snapshot = ops.set_config(call.home, channel, call.opt_text("account_id"), config)
    _account_changed(call, channel, snapshot)
    return {"config": snapshot}


async def channel_start(call: Call) -> dict[str, Any]:
    return await _channel_start_stop(call, True)


async def channel_stop(call: Call) -> dict[str, Any]:
    return await _channel_start_stop(call, False)


async def _channel_start_stop(call: Call, run: bool) -> dict[str, Any]:
    channel = _channel(call)
    accounts = ops.channel_accounts(call.home, channel, call.opt_text("account_id"))
    before = ops.accounts_version(call.home)
    try:
        await ops.start_stop(call.home, channel, accounts, run)
    finally:
        if ops.accounts_version(call.home) != before:
            _tell(call, ("channels_updated", {"channel_id": channel}))
    return {"channel": ops.summary(call.home, channel)}


def pairings_list(call: Call) -> dict[str, Any]:
    channel = _channel(call)
    return {"channel_id": channel,
            "pending": ops.list_pairings(call.home, channel, call.opt_text("account_id"))}


def pairing_bind(call: Call) -> dict[str, Any]:
    channel, code = _channel(call), call.text("code")
    agent_id, conversation_id = _runtime(call)
    chat_id, route = ops.bind_pairing(call.home, channel, code, agent_id, conversation_id,
                                      call.opt_text("account_id"))
    _tell(call, ("channel_pairings_updated", {"channel_id": channel}),
          ("channel_routes_updated", {"channel_id": channel, "agent_id": agent_id,
                                      "conversation_id": conversation_id}),
          ("channel_accounts_updated", {"channel_id": channel,
                                        "account_id": route["account_id"]}),
          ("channels_updated", {"channel_id": channel}))
    return {"channel_id": channel, "chat_id": chat_id, "route": route}


def routes_list(call: Call) -> dict[str, Any]:
    channel = call.opt_text("channel_id")
    routes = ops.list_routes(call.home, channel, call.opt_text("account_id"),
                             call.opt_text("agent_id"), call.opt_text("conversation_id"))
    return {**({"channel_id": channel} if channel else {}), "routes": routes}


def route_update(call: Call) -> dict[str, Any]:
    channel, chat_id = _channel(call), call.text("chat_id")
    agent_id, conversation_id = _runtime(call)
    route = ops.update_route(call.home, channel, chat_id, agent_id, conversation_id,
                             call.opt_text("account_id"))
    _tell(call, ("channel_routes_updated", {"channel_id": channel, "agent_id": agent_id,
                                            "conversation_id": conversation_id}),
          ("channels_updated", {"channel_id": channel}))
    return {"channel_id": channel, "chat_id": chat_id, "route": route}


def route_remove(call: Call) -> dict[str, Any]:
    channel, chat_id = _channel(call), call.text("chat_id")
    found = ops.remove_route(call.home, channel, chat_id, call.opt_text("account_id"))
    if found:
        _tell(call, ("channel_routes_updated", {"channel_id": channel}),
              ("channels_updated", {"channel_id": channel}))
    return {"channel_id": channel, "chat_id": chat_id, "found": found}


def no_targets(call: Call) -> dict[str, Any]:
    _channel(call)
    raise RequestFailed(NO_TARGETS)


_ACCOUNT = {"account": None}
_CH = ("channel_id",)
U = Scope.UNSCOPED

FAMILY: dict[str, Request] = {
    "channels_list": request("", channels_list, U, {"channels": []}),
    "channel_accounts_list": request("channel_id", accounts_list, U, {"accounts": []}, echo=_CH),
    "channel_account_create": request("channel_id account", account_create, U, _ACCOUNT,
                                      echo=_CH),
    "channel_account_update": request("channel_id account_id patch", account_update, U,
                                      _ACCOUNT, echo=_CH),
    "channel_account_bind": request("channel_id account_id runtime", account_bind, U, _ACCOUNT,
                                    echo=_CH),
    "channel_account_unbind": request("channel_id account_id", account_unbind, U, _ACCOUNT,
                                      echo=_CH),
    "channel_account_delete": request("channel_id account_id", account_delete, U,
                                      {"deleted": False}, echo=("channel_id", "account_id")),
    "channel_account_start": request("channel_id account_id", account_start, U, _ACCOUNT,
                                     echo=_CH),
    "channel_account_stop": request("channel_id account_id", account_stop, U, _ACCOUNT,
                                    echo=_CH),
    "channel_get_config": request("channel_id account_id", get_config, U, {"config": None}),
    "channel_set_config": request("channel_id account_id config", set_config, U,
                                  {"config": None}),
    "channel_start": request("channel_id account_id", channel_start, U, {"channel": None}),
    "channel_stop": request("channel_id account_id", channel_stop, U, {"channel": None}),
    "channel_pairings_list": request("channel_id account_id", pairings_list, U,
                                     {"pending": []}, echo=_CH),
    "channel_pairing_bind": request("channel_id account_id runtime code", pairing_bind, U,
                                    {"route": None}, echo=_CH),
    "channel_routes_list": request("channel_id account_id agent_id conversation_id",
                                   routes_list, U, {"routes": []}, echo=_CH),
    "channel_route_update": request("channel_id account_id chat_id runtime", route_update, U,
                                    {"route": None}, echo=("channel_id", "chat_id")),
    "channel_route_remove": request("channel_id account_id chat_id", route_remove, U,
                                    {"found": False}, echo=("channel_id", "chat_id")),
    "channel_targets_list": request("channel_id account_id", no_targets, U, {"targets": []},
                                    echo=_CH),
    "channel_target_bind": request("channel_id account_id runtime target_id", no_targets, U,
                                   {"route": None}, echo=("channel_id", "target_id")),
}

# What `/app-server-info`'s `channels` capability names: every request above that tether does.
CAPABILITY = tuple(k for k in FAMILY if k not in ("channel_targets_list", "channel_target_bind"))
