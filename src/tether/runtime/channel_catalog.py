"""Which chat channels a tether home can serve, as data: the bundled channels' names and
declarative config schemas, installed channels' `channel.json` manifests, checking an account's
config against a schema, and the redacted view of a config a client is shown.

The gateway's plugins (`channels/bundled/`) take their metadata from here, and the App Server
reads it without importing any channel code: an installed channel's code is trusted and runs
only in the gateway, so what the server knows of it is its manifest (`displayName`, and a
`configSchema` when the manifest declares one).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson

from tether.errors import UsageError
from tether.runtime.channel_files import channels_dir, check_id

FIELD_TYPES = ("text", "secret", "select", "boolean", "number", "string-array", "key-value-map")

# id -> (display name, config schema): `[{key, type, required?, label?, options?, min_length?}]`
BUNDLED: dict[str, tuple[str, list[dict[str, Any]]]] = {
    "telegram": ("Telegram", [
        {"key": "token", "type": "secret", "required": True, "label": "bot token (BotFather)"},
        {"key": "mode", "type": "select", "options": ["polling", "webhook"]},
        {"key": "base_url", "type": "text", "label": "Bot API base URL"},
        {"key": "secret_token", "type": "secret", "label": "webhook secret token"},
        {"key": "host", "type": "text"},
        {"key": "port", "type": "number"},
        {"key": "poll_timeout", "type": "number"},
    ]),
    "slack": ("Slack (Socket Mode)", [
        {"key": "bot_token", "type": "secret", "required": True, "label": "xoxb- bot token"},
        {"key": "app_token", "type": "secret", "required": True,
         "label": "xapp- app-level token (connections:write)"},
        {"key": "base_url", "type": "text", "label": "Web API base URL"},
    ]),
    "webhook": ("Webhook", [
        {"key": "secret", "type": "secret", "required": True, "min_length": 16,
         "label": "HMAC secret (16+ characters)"},
        {"key": "outbound_url", "type": "text", "label": "URL replies are POSTed to"},
        {"key": "host", "type": "text", "label": "listen host (default 127.0.0.1)"},
        {"key": "port", "type": "number", "label": "listen port"},
        {"key": "path", "type": "text", "label": "inbound path (default /webhook)"},
    ]),
}


def read_manifest(folder: Path) -> dict[str, Any]:
    """An installed channel's `channel.json` `{id, displayName, entry, configSchema?}`."""
    path = folder / "channel.json"
    try:
        manifest = orjson.loads(path.read_bytes())
    except FileNotFoundError:
        raise UsageError(f"{folder} has no channel.json") from None
    except orjson.JSONDecodeError as exc:
        raise UsageError(f"{path} is not valid JSON: {exc}") from None
    if not isinstance(manifest, dict):
        raise UsageError(f"{path} must be an object {{id, displayName, entry}}")
    for key in ("id", "entry"):
        if not isinstance(manifest.get(key), str) or not manifest[key]:
            raise UsageError(f"{path}: '{key}' is required (a string)")
    check_id(manifest["id"], f"{path}: id")
    entry = Path(manifest["entry"])
    if entry.is_absolute() or ".." in entry.parts or entry.suffix != ".py":
        raise UsageError(f"{path}: 'entry' must be a .py file inside the channel's folder")
    return manifest


def installed(home: Path) -> list[str]:
    """The ids of the channels installed under `$TETHER_HOME/channels/<id>/`."""
    folder = channels_dir(home)
    if not folder.is_dir():
        return []
    return sorted(d.name for d in folder.iterdir() if (d / "channel.json").is_file())


def supported(home: Path) -> list[str]:
    """Every channel this home can run: the bundled ones, then the installed ones."""
    return list(BUNDLED) + [c for c in installed(home) if c not in BUNDLED]


def describe(home: Path, channel: str) -> tuple[str, list[dict[str, Any]] | None]:
    """(display name, config schema or None when the channel declares none) of a channel this
    home can run; an unknown channel is a `UsageError` naming the ones there are."""
    check_id(channel)
    folder = channels_dir(home) / channel
    if (folder / "channel.json").is_file():
        manifest = read_manifest(folder)
        schema = manifest.get("configSchema")
        fields = schema.get("fields") if isinstance(schema, dict) else schema
        return (str(manifest.get("displayName") or channel),
                list(fields) if isinstance(fields, list) else None)
    if channel in BUNDLED:
        name, fields = BUNDLED[channel]
        return name, fields
    there = ", ".join(supported(home))
    raise UsageError(
        f"Unsupported channel: {channel} (this tether serves {there}; install another with "
        "`tether channels install <folder>`)"
    )


def check_config(
    channel: str, schema: list[dict[str, Any]], config: dict[str, Any], *, complete: bool = True
) -> None:
    """Check `config` against a declarative schema: each value of its declared type, and (when
    `complete`) every required field present."""
    for spec in schema:
        key, kind = spec.get("key"), spec.get("type", "text")
        if kind not in FIELD_TYPES:
            raise UsageError(f"channel {channel}: config field {key!r} has unknown type {kind!r}")
        if key not in config:
            if complete and spec.get("required"):
                raise UsageError(f"channel {channel} needs config {key!r} "
                                 f"({spec.get('label') or kind})")
            continue
        value = config[key]
        ok = {
            "text": isinstance(value, str), "secret": isinstance(value, str),
            "select": value in spec.get("options", [value]),
            "boolean": isinstance(value, bool),
            "number": isinstance(value, int | float) and not isinstance(value, bool),
            "string-array": isinstance(value, list) and all(isinstance(v, str) for v in value),
            "key-value-map": isinstance(value, dict),
        }[kind]
        if not ok:
            raise UsageError(f"channel {channel}: config {key!r} must be a {kind}")
        shortest = spec.get("min_length")
        if isinstance(shortest, int) and isinstance(value, str) and len(value) < shortest:
            raise UsageError(f"channel {channel}: config {key!r} must be at least "
                             f"{shortest} characters long")


def is_configured(schema: list[dict[str, Any]] | None, config: dict[str, Any]) -> bool:
    """Whether an account can start: every required field set (without a schema: any config)."""
    if schema is None:
        return bool(config)
    return all(
        config.get(str(spec.get("key"))) not in (None, "")
        for spec in schema if spec.get("required")
    )


def redact(schema: list[dict[str, Any]] | None, config: dict[str, Any]) -> dict[str, Any]:
    """What a client is shown of a plugin-owned config: the values of fields the schema declares
    and does not mark secret; for every other key (secrets, and anything the schema does not
    describe, whose nature tether cannot know) only `has_<key>`: whether it is set."""
    shown_keys = {spec.get("key") for spec in schema or [] if spec.get("type") != "secret"}
    out: dict[str, Any] = {}
    for key, value in config.items():
        if key in shown_keys:
            out[key] = value
        else:
            out[f"has_{key}"] = value not in (None, "", [], {})
    return out
