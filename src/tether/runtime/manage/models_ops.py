"""Models and providers as a client sees them: the catalog's model per provider with the
configured default marked, the handles the configured providers offer (asked as `tether models`
asks them), and each provider's connection state — never a key or a secret."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any


def list_models(home: Path, env: Mapping[str, str]) -> dict[str, Any]:
    """`entries` {id, handle, label, description, isDefault} from the catalog (one per
    provider, its preset model) and `available_handles` from the configured providers' own
    listings (None when none of them answered)."""
    from tether.providers.catalog import DEFAULT_ORDER, PRESETS, default_handle
    from tether.providers.model_list import configured_providers, list_all

    default = default_handle(home, env)
    configured = set(configured_providers(home, env))
    entries = []
    for prefix in DEFAULT_ORDER:
        preset = PRESETS[prefix]
        handle = f"{prefix}/{preset.default_model}"
        entries.append({
            "id": handle, "handle": handle, "label": f"{preset.default_model} ({prefix})",
            "description": (f"{prefix}: configured" if prefix in configured
                            else f"{prefix}: not configured (run `tether connect {prefix}`)"),
            "isDefault": handle == default, "isFeatured": prefix in configured,
        })
    if default is not None and all(e["handle"] != default for e in entries):
        entries.insert(0, {"id": default, "handle": default, "label": default,
                           "description": "the configured default", "isDefault": True,
                           "isFeatured": True})
    rows = list_all(home, env, None) if configured else []
    handles = [r["handle"] for r in rows if "handle" in r]
    answered = any("handle" in r for r in rows) or not any("error" in r for r in rows)
    return {"entries": entries, "available_handles": handles if answered else None}


def list_providers(home: Path, env: Mapping[str, str]) -> list[dict[str, Any]]:
    """The reference's ConnectProviderEntry per provider: what it is, whether it needs a key,
    and whether (and where) it is connected; the key itself is never included."""
    from tether.providers.catalog import DEFAULT_ORDER, PRESETS, env_key
    from tether.providers.credentials import find_credential, load_credentials

    records = load_credentials(home)
    out = []
    for prefix in DEFAULT_ORDER:
        preset = PRESETS[prefix]
        record = find_credential(records, prefix)
        from_env = (bool(env.get(preset.base_url_env)) if preset.local
                    else env_key(preset, env) is not None)
        connected = record is not None or from_env
        state: dict[str, Any] = {"is_connected": connected}
        if connected:
            state.update(provider_name=prefix, provider_type=preset.adapter, auth_type="api",
                         base_url=(record or {}).get("base_url") or env.get(preset.base_url_env)
                         or preset.base_url)
        out.append({
            "id": prefix, "display_name": prefix, "description": f"{preset.adapter} API",
            "provider_type": preset.adapter, "provider_name": prefix, "provider_names": [prefix],
            "requires_api_key": not preset.local, "connected": state,
            "connected_providers": [state] if connected else [],
        })
    for record in records:
        if record.get("provider_type") == "openai-compatible" and isinstance(record.get("name"), str):
            state = {"is_connected": True, "provider_name": record["name"],
                     "provider_type": "openai_chat", "auth_type": "api",
                     "base_url": record.get("base_url")}
            out.append({
                "id": record["name"], "display_name": record["name"],
                "description": "OpenAI-compatible server (tether connect NAME --base-url)",
                "provider_type": "openai_chat", "provider_name": record["name"],
                "provider_names": [record["name"]], "requires_api_key": False,
                "connected": state, "connected_providers": [state],
            })
    return out


CONNECT_FIELDS = ("api_key", "base_url", "timeout", "access_key", "region", "profile")


def connect_provider(
    home: Path, env: Mapping[str, str], provider_id: str, fields: Mapping[str, Any]
) -> list[dict[str, Any]]:
    """Store a provider's credentials as `tether connect` does (a built-in provider by its
    prefix, anything else as a named OpenAI-compatible server, which needs base_url); the
    providers after, without any key."""
    from tether.errors import UsageError
    from tether.providers.credentials import (
        RECORD_NAMES,
        canonical_prefix,
        save_credential,
        save_custom_provider,
    )

    unknown = sorted(set(fields) - set(CONNECT_FIELDS))
    if unknown:
        raise UsageError(f"fields.{unknown[0]} is not a connection field "
                         f"(known: {', '.join(CONNECT_FIELDS)})")
    given: dict[str, str | None] = {}
    for name in CONNECT_FIELDS:
        value = fields.get(name)
        if value is not None and not isinstance(value, str):
            raise UsageError(f"fields.{name} must be a string")
        given[name] = value or None
    if canonical_prefix(provider_id) in RECORD_NAMES:
        save_credential(home, provider_id, api_key=given["api_key"], base_url=given["base_url"],
                        timeout=given["timeout"], access_key=given["access_key"],
                        region=given["region"], profile=given["profile"])
    else:
        extra = [n for n in ("access_key", "region", "profile") if given[n]]
        if extra:
            raise UsageError(f"fields.{extra[0]} is for bedrock, not {provider_id!r}")
        save_custom_provider(home, provider_id, base_url=given["base_url"],
                             api_key=given["api_key"], timeout=given["timeout"])
    return list_providers(home, env)


def disconnect_provider(
    home: Path, env: Mapping[str, str], provider: str
) -> list[dict[str, Any]]:
    """Forget a provider's stored credentials (`tether disconnect`); the providers after."""
    from tether.errors import UsageError
    from tether.providers.credentials import remove_credential

    if not remove_credential(home, provider):
        raise UsageError(f"provider {provider!r} has no stored credentials (a key from the "
                         "environment is not removed here)")
    return list_providers(home, env)
