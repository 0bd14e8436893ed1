"""`tether channels install|configure|status|pair|bind|route add|list|remove`: the channel
files under `$TETHER_HOME/channels/` (reference §14), printed as JSON with every account's
config redacted. The gateway itself is `tether channel-gateway`."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import orjson

from tether.errors import TetherError, UsageError

# The platform SDK each bundled channel imports when the gateway starts (the `channels` extra).
BUNDLED_SDKS: dict[str, tuple[str, str] | None] = {
    "telegram": ("telegram", "python-telegram-bot"),
    "slack": ("slack_sdk", "slack-sdk"),
    "webhook": None,
}
TRUST_NOTE = ("an installed channel is trusted code, like a mod: the gateway imports it and it "
              "runs with your rights")


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(f"{self.prog}: {message}")


def _parser() -> _Parser:
    p = _Parser(prog="tether channels")
    sub = p.add_subparsers(dest="action", required=True, parser_class=_Parser)
    inst = sub.add_parser(
        "install", help="check a bundled channel (telegram, slack, webhook) is ready, or install "
        "a custom channel folder (trusted code)")
    inst.add_argument("folder", metavar="CHANNEL|FOLDER")
    conf = sub.add_parser("configure", help="create or change a channel account")
    conf.add_argument("channel")
    conf.add_argument("--account", default="default")
    conf.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                      help="a config value (JSON values are parsed: 8080, true, [\"a\"])")
    conf.add_argument("--dm-policy", choices=("pairing", "allowlist", "open"))
    conf.add_argument("--group-policy", choices=("mention", "open", "disabled"))
    conf.add_argument("--allow", action="append", default=[], metavar="USER",
                      help="add an allowed user id (* = anyone)")
    conf.add_argument("--admin", action="append", default=[], metavar="USER")
    conf.add_argument("--disable", action="store_true")
    conf.add_argument("--enable", action="store_true")
    conf.add_argument("--name", help="display name")
    sub.add_parser("status", help="accounts (config redacted), routes, pending pairings")
    pair = sub.add_parser("pair", help="approve a pairing code a user got from the bot")
    pair.add_argument("channel")
    pair.add_argument("code")
    pair.add_argument("--agent", help="also route the user's chat to this agent")
    pair.add_argument("--conversation", default="default")
    bind = sub.add_parser("bind", help="route a whole account (every chat) to an agent")
    bind.add_argument("channel")
    bind.add_argument("--account", default="default")
    bind.add_argument("--agent", required=True)
    bind.add_argument("--conversation", default="default")
    route = sub.add_parser("route", help="add, list or remove chat routes")
    rsub = route.add_subparsers(dest="route_action", required=True, parser_class=_Parser)
    add = rsub.add_parser("add")
    add.add_argument("channel")
    add.add_argument("chat", help="chat id, or * for every chat of the account")
    add.add_argument("--account", default="default")
    add.add_argument("--agent", required=True)
    add.add_argument("--conversation", default="default",
                     help="default, new (one fresh conversation for the route), or an id")
    add.add_argument("--cwd", help="working directory of the route's runtime")
    rsub.add_parser("list")
    rm = rsub.add_parser("remove")
    rm.add_argument("channel")
    rm.add_argument("chat")
    rm.add_argument("--account", default="default")
    return p


def _value(text: str) -> Any:
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError:
        return text


def run_channels(argv: Sequence[str]) -> int:
    try:
        out = _run(_parser().parse_args(list(argv)))
    except TetherError as exc:
        sys.stderr.write(f"Error: {exc}\n")
        return 1
    sys.stdout.write(orjson.dumps(out, option=orjson.OPT_INDENT_2).decode() + "\n")
    return 0


def _run(ns: argparse.Namespace) -> Any:
    from tether.channels import config, plugins
    from tether.runtime.session.session import tether_home

    home = tether_home(os.environ)
    accounts, routes = config.AccountStore(home), config.RouteTable(home)
    if ns.action == "install":
        source = Path(ns.folder)
        if ns.folder in plugins.BUNDLED and not (source / "channel.json").exists():
            return _bundled(home, ns.folder)
        if not source.is_dir():
            raise UsageError(f"{ns.folder!r} is neither a bundled channel "
                             f"({', '.join(plugins.BUNDLED)}) nor a channel folder")
        installed = plugins.install(home, source)
        return {**installed, "note": TRUST_NOTE}
    if ns.action == "configure":
        plugin = plugins.load_plugin(home, ns.channel)
        account = accounts.get(ns.channel, ns.account) or config.Account(ns.channel, ns.account)
        for item in ns.set:
            key, sep, value = item.partition("=")
            if not sep or not key:
                raise UsageError(f"--set {item!r}: expected KEY=VALUE")
            account.config[key] = _value(value)
        plugins.check_config(plugin, account.config)
        if ns.dm_policy:
            account.dm_policy = ns.dm_policy
        if ns.group_policy:
            account.group_policy = ns.group_policy
        account.allowed_users += [u for u in ns.allow if u not in account.allowed_users]
        account.admin_users += [u for u in ns.admin if u not in account.admin_users]
        if ns.disable or ns.enable:
            account.enabled = ns.enable
        if ns.name:
            account.display_name = ns.name
        accounts.upsert(account)
        return account.redacted()
    if ns.action == "status":
        folder = config.channels_dir(home)
        custom = sorted(
            d.name for d in folder.iterdir() if (d / "channel.json").is_file()
        ) if folder.is_dir() else []
        return {
            "installed_channels": custom,
            "note": TRUST_NOTE if custom else None,
            "accounts": [a.redacted() for a in accounts.load()],
            "routes": [r.to_yaml() for r in routes.load()],
            "pending_pairings": [
                {"channel": r.channel, "account": r.account_id, "sender": r.sender_id,
                 "sender_name": r.sender_name, "chat": r.chat_id}
                for r in config.PairingStore(home).pending()
            ],
        }
    if ns.action == "pair":
        request = config.PairingStore(home).take(ns.channel, ns.code)
        paired = accounts.get(request.channel, request.account_id)
        if paired is None:
            raise UsageError(f"the account {request.channel}/{request.account_id} is gone")
        if request.sender_id not in paired.allowed_users:
            paired.allowed_users.append(request.sender_id)
        accounts.upsert(paired)
        routed = None
        if ns.agent:
            route = config.Route(request.channel, request.account_id, request.chat_id,
                                 _agent(home, ns.agent), ns.conversation)
            routes.add(route)
            routed = route.to_yaml()
        return {"paired": request.sender_id, "account": paired.redacted(), "route": routed}
    if ns.action == "bind":
        if accounts.get(ns.channel, ns.account) is None:
            raise UsageError(f"no account {ns.channel}/{ns.account}; configure it first")
        route = config.Route(ns.channel, ns.account, "*", _agent(home, ns.agent), ns.conversation)
        routes.add(route)
        return route.to_yaml()
    if ns.route_action == "add":
        config.check_id(ns.channel)
        route = config.Route(ns.channel, ns.account, ns.chat, _agent(home, ns.agent),
                             ns.conversation, ns.cwd)
        routes.add(route)
        return route.to_yaml()
    if ns.route_action == "list":
        return [r.to_yaml() for r in routes.load()]
    if not routes.remove(ns.channel, ns.account, ns.chat):
        raise UsageError(f"no route for {ns.channel}/{ns.account}/{ns.chat}")
    return {"removed": f"{ns.channel}/{ns.account}/{ns.chat}"}


def _bundled(home: Path, channel: str) -> dict[str, Any]:
    """A bundled channel ships with tether: installing it checks that its platform SDK is
    importable and says what to configure next."""
    import importlib.util

    from tether.channels import plugins

    sdk = BUNDLED_SDKS.get(channel)
    if sdk is not None and importlib.util.find_spec(sdk[0]) is None:
        raise TetherError(
            f"the {channel} channel needs the {sdk[1]} package, which is not installed in "
            f"tether's environment ({sys.executable}): pip install 'tether[channels]'"
        )
    plugin = plugins.load_plugin(home, channel)
    required = [f["key"] for f in plugin.metadata.config_schema if f.get("required")]
    sets = " ".join(f"--set {key}=…" for key in required)
    return {
        "id": channel,
        "displayName": plugin.metadata.display_name,
        "bundled": True,
        "sdk": sdk[1] if sdk else None,
        "config_schema": plugin.metadata.config_schema,
        "next": f"tether channels configure {channel} {sets}".rstrip(),
    }


def _agent(home: Path, agent_id: str) -> str:
    """The agent must exist, so a typo is caught now and not at the first message."""
    from tether.backends.local.store import LocalStore

    LocalStore(home).get_agent(agent_id)
    return agent_id


if __name__ == "__main__":
    sys.exit(run_channels(sys.argv[1:]))
