"""Managing chat channels from a client of the App Server: accounts (create, update, delete,
enable as start/stop, bind a whole account to an agent), their config, pending pairings and
chat routes, over the files `runtime/channel_files.py` defines, returning the reference's
snapshots (`ChannelSummary`, `ChannelAccountSnapshot`, `ChannelConfigSnapshot`,
`ChannelPendingPairing`, `ChannelRouteSnapshot`).

The channels themselves run in `tether channel-gateway`, which re-reads these files when they
change: "start" enables an account and "stop" disables it; `running` is what the gateway's
status file says a live gateway runs. A plugin's config is shown redacted
(`channel_catalog.redact`) and a secret is never sent back.
"""

from __future__ import annotations

import asyncio
import functools
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any, TypeVar

from tether.errors import UsageError
from tether.runtime import channel_catalog as catalog
from tether.runtime.channel_files import (
    DM_POLICIES,
    PAIRING_TTL,
    Account,
    AccountStore,
    GatewaySnapshot,
    GatewayStatus,
    PairingStore,
    Route,
    RouteTable,
    iso,
    locked,
    signature,
)

T = TypeVar("T")
SETTLE_TIMEOUT = 10.0  # seconds a start or stop waits for a live gateway to act on it
ACCOUNT_FIELDS = ("account_id", "display_name", "enabled", "dm_policy", "allowed_users", "config")
WHOLE_ACCOUNT = "*"  # the chat id of a route that takes every chat of its account


def _writes(fn: Callable[..., T]) -> Callable[..., T]:
    """A read-modify-write of the channel files, under their lock (`channel_files.locked`)."""

    @functools.wraps(fn)
    def run(home: Path, *args: Any, **kw: Any) -> T:
        with locked(home):
            return fn(home, *args, **kw)

    return run


# --- snapshots ----------------------------------------------------------------------------------


def protocol_schema(fields: list[dict[str, Any]] | None) -> dict[str, Any] | None:
    """A declarative schema in the reference's `ChannelConfigSchema` shape."""
    if fields is None:
        return None
    out = []
    for spec in fields:
        field = {k: v for k, v in spec.items() if k not in ("min_length", "options")}
        field["label"] = str(spec.get("label") or spec.get("key"))
        if "options" in spec:
            field["options"] = [
                o if isinstance(o, dict) else {"value": str(o), "label": str(o)}
                for o in spec["options"]
            ]
        out.append(field)
    return {"version": 1, "fields": out}


def account_snapshot(home: Path, account: Account) -> dict[str, Any]:
    _, schema = catalog.describe(home, account.channel)
    snap: dict[str, Any] = {"channel_id": account.channel, "account_id": account.account_id}
    if account.display_name:
        snap["display_name"] = account.display_name
    snap.update({
        "enabled": account.enabled,
        "configured": catalog.is_configured(schema, account.config),
        "running": (account.channel, account.account_id) in GatewayStatus(home).running(),
        "dm_policy": account.dm_policy,
        "allowed_users": list(account.allowed_users),
        "config": catalog.redact(schema, account.config),
        "created_at": iso(account.created_at),
        "updated_at": iso(account.updated_at),
    })
    return snap


def config_snapshot(home: Path, account: Account) -> dict[str, Any]:
    snap = account_snapshot(home, account)
    return {k: snap[k] for k in ("channel_id", "account_id", "display_name", "enabled",
                                 "dm_policy", "allowed_users", "config") if k in snap}


def summary(home: Path, channel: str) -> dict[str, Any]:
    name, schema = catalog.describe(home, channel)
    accounts = [a for a in AccountStore(home).load() if a.channel == channel]
    running = GatewayStatus(home).running()
    approved = {u for a in accounts for u in a.allowed_users if u != "*"}
    return {
        "channel_id": channel,
        "display_name": name,
        "configured": bool(accounts),
        "enabled": any(a.enabled for a in accounts),
        "running": any((channel, a.account_id) in running for a in accounts if a.enabled),
        "dm_policy": accounts[0].dm_policy if accounts else None,
        "pending_pairings_count": len(
            [p for p in PairingStore(home).pending() if p.channel == channel]
        ) if accounts else 0,
        "approved_users_count": len(approved),
        "routes_count": len([r for r in RouteTable(home).load() if r.channel == channel]),
        "config_schema": protocol_schema(schema),
    }


def route_snapshot(home: Path, route: Route) -> dict[str, Any]:
    table = RouteTable(home)
    since = iso(table.path.stat().st_mtime) if table.path.exists() else None
    made = route.created_at or since or ""
    return {
        "channel_id": route.channel, "account_id": route.account_id, "chat_id": route.chat_id,
        "thread_id": None, "agent_id": route.agent_id, "conversation_id": route.conversation_id,
        "enabled": True, "outbound_enabled": True,
        "created_at": made, "updated_at": route.updated_at or made,
    }


def list_summaries(home: Path) -> list[dict[str, Any]]:
    return [summary(home, channel) for channel in catalog.supported(home)]


def list_accounts(home: Path, channel: str) -> list[dict[str, Any]]:
    catalog.describe(home, channel)
    return [account_snapshot(home, a) for a in AccountStore(home).load() if a.channel == channel]


# --- accounts -----------------------------------------------------------------------------------


def find_account(home: Path, channel: str, account_id: str) -> Account:
    catalog.describe(home, channel)
    account = AccountStore(home).get(channel, account_id)
    if account is None:
        raise UsageError(f'Channel account "{account_id}" was not found for {channel}.')
    return account


def _selected(home: Path, channel: str, account_id: str | None) -> Account | None:
    """The named account, or the channel's only one (None when it has none)."""
    catalog.describe(home, channel)
    if account_id:
        return AccountStore(home).get(channel, account_id)
    accounts = [a for a in AccountStore(home).load() if a.channel == channel]
    if len(accounts) > 1:
        raise UsageError(f'Channel "{channel}" has multiple accounts. Specify account_id.')
    return accounts[0] if accounts else None


def _apply(home: Path, account: Account, patch: Mapping[str, Any], what: str) -> None:
    """Apply `{display_name?, enabled?, dm_policy?, allowed_users?, config?}`, each checked;
    config keys merge into the account's (null removes one; a `has_<key>` echo of a redacted
    secret is ignored)."""
    if "display_name" in patch:
        name = patch["display_name"]
        if name is not None and not isinstance(name, str):
            raise UsageError(f"{what}.display_name must be a string")
        account.display_name = name or None
    if "enabled" in patch and patch["enabled"] is not None:
        if not isinstance(patch["enabled"], bool):
            raise UsageError(f"{what}.enabled must be true or false")
        account.enabled = patch["enabled"]
    if patch.get("dm_policy") is not None:
        if patch["dm_policy"] not in DM_POLICIES:
            raise UsageError(f"{what}.dm_policy must be one of {', '.join(DM_POLICIES)}")
        account.dm_policy = patch["dm_policy"]
    if patch.get("allowed_users") is not None:
        users = patch["allowed_users"]
        if not isinstance(users, list) or not all(isinstance(u, str) and u for u in users):
            raise UsageError(f"{what}.allowed_users must be a list of user ids")
        account.allowed_users = list(dict.fromkeys(users))
    config = patch.get("config")
    if config is None:
        return
    if not isinstance(config, dict):
        raise UsageError(f"{what}.config must be an object")
    _, schema = catalog.describe(home, account.channel)
    merged = dict(account.config)
    known = {spec.get("key") for spec in schema} if schema is not None else None
    for key, value in config.items():
        if key.startswith("has_") and (known is None or key not in known):
            continue  # the redacted view's flag, sent back with the rest
        if known is not None and key not in known:
            raise UsageError(f"{what}.config.{key}: channel {account.channel} has no such "
                             f"setting (it has {', '.join(sorted(str(k) for k in known))})")
        if value is None:
            merged.pop(key, None)
        else:
            merged[key] = value
    if schema is not None:
        catalog.check_config(account.channel, schema, merged, complete=False)
    account.config = merged


def _check_patch(patch: Any, what: str, allowed: tuple[str, ...]) -> Mapping[str, Any]:
    if not isinstance(patch, dict):
        raise UsageError(f"{what} must be an object")
    unknown = sorted(set(patch) - set(allowed))
    if unknown:
        raise UsageError(f"{what}: unknown field(s) {', '.join(unknown)} "
                         f"(known: {', '.join(allowed)})")
    return patch


@_writes
def create_account(home: Path, channel: str, fields: Any) -> dict[str, Any]:
    """A new account (disabled unless `enabled`, dmPolicy pairing unless given); its id is
    `account_id`, else `default` when the channel has none, else a fresh UUID."""
    catalog.describe(home, channel)
    patch = _check_patch(fields, "account", ACCOUNT_FIELDS)
    store = AccountStore(home)
    account_id = patch.get("account_id")
    if account_id is not None and (
        not isinstance(account_id, str) or not account_id.strip() or len(account_id) > 128
        or "/" in account_id or not account_id.isprintable()
    ):
        raise UsageError("account.account_id must be a non-empty string of at most 128 "
                         "printable characters without '/'")
    if not account_id:
        account_id = "default" if store.get(channel, "default") is None else str(uuid.uuid4())
    account_id = account_id.strip()
    if store.get(channel, account_id) is not None:
        raise UsageError(f'Channel account "{account_id}" already exists for {channel}.')
    account = Account(channel, account_id, enabled=False)
    _apply(home, account, patch, "account")
    store.upsert(account)
    return account_snapshot(home, account)


@_writes
def update_account(home: Path, channel: str, account_id: str, patch: Any) -> dict[str, Any]:
    account = find_account(home, channel, account_id)
    _apply(home, account, _check_patch(patch, "patch", ACCOUNT_FIELDS[1:]), "patch")
    AccountStore(home).upsert(account)
    return account_snapshot(home, account)


@_writes
def delete_account(home: Path, channel: str, account_id: str) -> bool:
    """Remove the account with its routes and pending pairings; False when there was none."""
    catalog.describe(home, channel)
    store = AccountStore(home)
    accounts = store.load()
    kept = [a for a in accounts if (a.channel, a.account_id) != (channel, account_id)]
    if len(kept) == len(accounts):
        return False
    store.save(kept)
    table = RouteTable(home)
    table.save([r for r in table.load() if (r.channel, r.account_id) != (channel, account_id)])
    PairingStore(home).drop_account(channel, account_id)
    return True


@_writes
def set_running(home: Path, channel: str, account_id: str, run: bool) -> dict[str, Any]:
    """Start (enable; it must be configured) or stop (disable) one account: the gateway
    starts or stops its adapter when it sees the change."""
    account = find_account(home, channel, account_id)
    if run:
        _, schema = catalog.describe(home, channel)
        if not catalog.is_configured(schema, account.config):
            raise UsageError(f'Channel "{channel}" account is not configured. Configure it '
                             "first.")
    if account.enabled != run:
        account.enabled = run
        AccountStore(home).upsert(account)
    return account_snapshot(home, account)


def accounts_version(home: Path) -> str | None:
    """Which version of accounts.json is on disk (to tell whether a request changed it)."""
    return signature(AccountStore(home).path)


async def gateway_settled(home: Path, timeout: float = SETTLE_TIMEOUT) -> GatewaySnapshot | None:
    """Once a live gateway has acted on accounts.json as it is now, its status; None at once
    when no gateway is alive (the accounts start when one starts)."""
    want = signature(AccountStore(home).path)
    deadline = time.monotonic() + timeout
    while True:
        snap = GatewayStatus(home).read()
        if snap is None or snap.seen == want:
            return snap
        if time.monotonic() > deadline:
            raise UsageError(f"the channel gateway (pid {snap.pid}) did not take the change "
                             f"within {timeout:g} s; it will when it catches up")
        await asyncio.sleep(0.1)


async def start_stop(
    home: Path, channel: str, account_ids: list[str], run: bool
) -> None:
    """Enable (start) or disable (stop) the accounts and wait for a live gateway to act: an
    account whose adapter would not start is disabled again and named with the reason (as the
    reference does for a start that fails)."""
    for account_id in account_ids:
        set_running(home, channel, account_id, run)
    snap = await gateway_settled(home)
    if not run or snap is None:
        return
    failed = {a: snap.failed[(channel, a)] for a in account_ids if (channel, a) in snap.failed}
    for account_id in failed:
        set_running(home, channel, account_id, False)
    if failed:
        raise UsageError("; ".join(
            f'{channel} account "{a}" did not start: {why}' for a, why in failed.items()
        ))


def channel_accounts(home: Path, channel: str, account_id: str | None) -> list[str]:
    """`channel_start` / `channel_stop`'s accounts: the named one, else all of the channel."""
    catalog.describe(home, channel)
    if account_id:
        return [find_account(home, channel, account_id).account_id]
    accounts = [a.account_id for a in AccountStore(home).load() if a.channel == channel]
    if not accounts:
        raise UsageError(f'Channel "{channel}" is not configured. Configure it first.')
    return accounts


@_writes
def bind_account(
    home: Path, channel: str, account_id: str, agent_id: str, conversation_id: str
) -> dict[str, Any]:
    """Route every chat of the account (a `*` route) to the agent and conversation."""
    find_account(home, channel, account_id)
    RouteTable(home).add(Route(channel, account_id, WHOLE_ACCOUNT, agent_id, conversation_id))
    return account_snapshot(home, find_account(home, channel, account_id))


@_writes
def unbind_account(home: Path, channel: str, account_id: str) -> dict[str, Any]:
    account = find_account(home, channel, account_id)
    RouteTable(home).remove(channel, account_id, WHOLE_ACCOUNT)
    return account_snapshot(home, account)


def get_config(home: Path, channel: str, account_id: str | None) -> dict[str, Any] | None:
    account = _selected(home, channel, account_id)
    return None if account is None else config_snapshot(home, account)


@_writes
def set_config(
    home: Path, channel: str, account_id: str | None, config: Any
) -> dict[str, Any]:
    """`{dm_policy?, allowed_users?, plugin_config?}` on the selected account; with none, a new
    (disabled) account holding it."""
    patch = _check_patch(config, "config", ("dm_policy", "allowed_users", "plugin_config"))
    fields = {k: v for k, v in patch.items() if k != "plugin_config"}
    if "plugin_config" in patch:
        fields["config"] = patch["plugin_config"]
    account = _selected(home, channel, account_id)
    if account is None:
        if account_id:
            fields["account_id"] = account_id
        created = create_account(home, channel, fields)
        account = find_account(home, channel, created["account_id"])
    else:
        _apply(home, account, fields, "config")
        AccountStore(home).upsert(account)
    return config_snapshot(home, account)


# --- pairing and routes -------------------------------------------------------------------------


def list_pairings(home: Path, channel: str, account_id: str | None) -> list[dict[str, Any]]:
    catalog.describe(home, channel)
    out = []
    for p in PairingStore(home).pending():
        if p.channel != channel or (account_id and p.account_id != account_id):
            continue
        item: dict[str, Any] = {"account_id": p.account_id, "code": p.code,
                                "sender_id": p.sender_id}
        if p.sender_name:
            item["sender_name"] = p.sender_name
        item.update({"chat_id": p.chat_id, "created_at": iso(p.created_at),
                     "expires_at": iso(p.created_at + PAIRING_TTL)})
        out.append(item)
    return out


@_writes
def bind_pairing(
    home: Path, channel: str, code: str, agent_id: str, conversation_id: str,
    account_id: str | None,
) -> tuple[str, dict[str, Any]]:
    """Approve a pairing code: its sender becomes an allowed user of the account and its chat
    is routed to the agent and conversation. (chat id, route snapshot)."""
    catalog.describe(home, channel)
    pending = PairingStore(home).take(channel, code, account_id or None)
    store = AccountStore(home)
    account = store.get(channel, pending.account_id)
    if account is None:
        raise UsageError(f'Channel account "{pending.account_id}" was not found for {channel}.')
    if pending.sender_id not in account.allowed_users:
        account.allowed_users.append(pending.sender_id)
    store.upsert(account)
    route = RouteTable(home).add(
        Route(channel, pending.account_id, pending.chat_id, agent_id, conversation_id)
    )
    return pending.chat_id, route_snapshot(home, route)


def list_routes(
    home: Path, channel: str | None, account_id: str | None, agent_id: str | None,
    conversation_id: str | None,
) -> list[dict[str, Any]]:
    if channel is not None:
        catalog.describe(home, channel)
    return [
        route_snapshot(home, r) for r in RouteTable(home).load()
        if (channel is None or r.channel == channel)
        and (not account_id or r.account_id == account_id)
        and (not agent_id or r.agent_id == agent_id)
        and (not conversation_id or r.conversation_id == conversation_id)
    ]


def _route_of_chat(
    home: Path, channel: str, chat_id: str, account_id: str | None
) -> Route | None:
    matches = [r for r in RouteTable(home).load()
               if r.channel == channel and r.chat_id == chat_id
               and (not account_id or r.account_id == account_id)]
    if len(matches) > 1:
        raise UsageError(f'Channel "{channel}" has multiple routes for chat "{chat_id}". '
                         "Specify account_id.")
    return matches[0] if matches else None


@_writes
def update_route(
    home: Path, channel: str, chat_id: str, agent_id: str, conversation_id: str,
    account_id: str | None,
) -> dict[str, Any]:
    """Route the chat to the agent and conversation (its existing route changed, else a new
    one on the selected account)."""
    catalog.describe(home, channel)
    if not chat_id:
        raise UsageError("chat_id must be a non-empty string")
    existing = _route_of_chat(home, channel, chat_id, account_id)
    if existing is not None:
        route = replace(existing, agent_id=agent_id, conversation_id=conversation_id)
    else:
        account = _selected(home, channel, account_id)
        if account is None:
            raise UsageError(
                f'Channel account "{account_id}" was not found for {channel}.' if account_id
                else f'Channel "{channel}" is not configured. Configure it first.'
            )
        route = Route(channel, account.account_id, chat_id, agent_id, conversation_id)
    return route_snapshot(home, RouteTable(home).add(route))


@_writes
def remove_route(home: Path, channel: str, chat_id: str, account_id: str | None) -> bool:
    catalog.describe(home, channel)
    route = _route_of_chat(home, channel, chat_id, account_id)
    return route is not None and RouteTable(home).remove(channel, route.account_id, chat_id)
