"""The channel plugin contract (reference §14, in Python) and where plugins come from.

A plugin is an object with `metadata` (id, display_name, optional declarative `config_schema`)
and `create_adapter(account) -> Adapter`. An adapter has `id, channel_id, account_id, name`,
`async start() / stop()`, `is_running()`, `async send_message(OutboundMessage) -> {message_id}`,
`async send_direct_reply(chat_id, text, **opts)`, and the host sets `on_message` (an async
callable taking an `InboundMessage`; the adapter acknowledges the platform only after it
returns, which is after the message is journaled).

Bundled plugins live in `tether.channels.bundled`; installed ones in
`$TETHER_HOME/channels/<id>/channel.json` `{id, displayName, entry}` with `entry` a Python file
in that folder exporting `channel_plugin` (or `plugin`). Installed channels are trusted code,
like mods: they run in the gateway's process with the user's rights. They are imported only
when an account for them is configured and the gateway starts.
"""

from __future__ import annotations

import importlib
import importlib.util
import shutil
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from tether.channels.config import Account, channels_dir, check_id
from tether.errors import UsageError
from tether.runtime import channel_catalog

BUNDLED = tuple(channel_catalog.BUNDLED)
FIELD_TYPES = channel_catalog.FIELD_TYPES


@dataclass(frozen=True, slots=True)
class InboundMessage:
    channel: str
    account_id: str
    chat_id: str
    sender_id: str
    text: str
    timestamp: float
    message_id: str | None = None
    sender_name: str | None = None
    thread_id: str | None = None
    chat_type: str = "direct"  # or "channel" (a group, a Slack channel)
    is_mention: bool = False
    raw: Any = None


@dataclass(frozen=True, slots=True)
class OutboundMessage:
    chat_id: str
    text: str
    thread_id: str | None = None
    reply_to_message_id: str | None = None


OnMessage = Callable[[InboundMessage], Awaitable[None]]


class Adapter(Protocol):
    id: str
    channel_id: str
    account_id: str
    name: str
    on_message: OnMessage | None

    async def start(self) -> None: ...
    async def stop(self) -> None: ...
    def is_running(self) -> bool: ...
    async def send_message(self, msg: OutboundMessage) -> dict[str, Any]: ...
    async def send_direct_reply(self, chat_id: str, text: str, **opts: Any) -> dict[str, Any]: ...


@dataclass(frozen=True)
class PluginMetadata:
    id: str
    display_name: str
    config_schema: list[dict[str, Any]] = field(default_factory=list)


class ChannelPlugin(Protocol):
    metadata: PluginMetadata

    def create_adapter(self, account: Account) -> Adapter: ...


def check_config(plugin: ChannelPlugin, config: dict[str, Any]) -> None:
    """Check `config` against the plugin's declarative schema (`[{key, type, required?,
    options?}]`): required fields present, each value of its declared type."""
    channel_catalog.check_config(plugin.metadata.id, plugin.metadata.config_schema, config)


def load_plugin(home: Path, channel: str) -> ChannelPlugin:
    """The plugin for `channel`: installed under `$TETHER_HOME/channels/<id>/` (trusted code,
    imported now), else bundled."""
    check_id(channel)
    folder = channels_dir(home) / channel
    if (folder / "channel.json").exists():
        return _load_installed(folder, channel)
    if channel in BUNDLED:
        module = importlib.import_module(f"tether.channels.bundled.{channel}")
        return module.channel_plugin
    raise UsageError(
        f"no channel {channel!r}: bundled ones are {', '.join(BUNDLED)}; install a custom one "
        "with `tether channels install <folder>`"
    )


read_manifest = channel_catalog.read_manifest


def _load_installed(folder: Path, channel: str) -> ChannelPlugin:
    manifest = read_manifest(folder)
    if manifest["id"] != channel:
        raise UsageError(f"{folder}/channel.json: id {manifest['id']!r} must equal the folder "
                         f"name {channel!r}")
    path = folder / manifest["entry"]
    spec = importlib.util.spec_from_file_location(f"tether_channel_{channel}", path)
    if spec is None or spec.loader is None:
        raise UsageError(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        raise UsageError(f"channel {channel}: importing {path} failed: "
                         f"{type(exc).__name__}: {exc}") from None
    plugin = getattr(module, "channel_plugin", None) or getattr(module, "plugin", None)
    if plugin is None or not callable(getattr(plugin, "create_adapter", None)):
        raise UsageError(f"channel {channel}: {path} must export `channel_plugin` with "
                         "`metadata` and `create_adapter(account)`")
    meta = getattr(plugin, "metadata", None)
    if not isinstance(meta, PluginMetadata):
        raw = meta if isinstance(meta, dict) else {}
        plugin.metadata = PluginMetadata(
            channel, str(raw.get("display_name") or manifest.get("displayName") or channel),
            list(raw.get("config_schema") or raw.get("configSchema") or []),
        )
    return plugin


def install(home: Path, source: Path) -> dict[str, Any]:
    """Copy a channel folder into `$TETHER_HOME/channels/<id>/` (replacing an older copy)."""
    manifest = read_manifest(source)
    if manifest["id"] in BUNDLED:
        raise UsageError(f"{manifest['id']!r} is a bundled channel; give yours another id")
    if not (source / manifest["entry"]).is_file():
        raise UsageError(f"{source}: entry {manifest['entry']!r} does not exist")
    target = channels_dir(home) / manifest["id"]
    if target.exists():
        shutil.rmtree(target)
    shutil.copytree(source, target, ignore=shutil.ignore_patterns("__pycache__"))
    return {"id": manifest["id"], "displayName": manifest.get("displayName"),
            "path": str(target), "trusted_code": True}
