"""`tether models`: the models each configured provider offers, with context windows where known.

Local and OpenAI-compatible servers, OpenRouter and friends are asked (`GET /models`), Gemini
through its own listing (`inputTokenLimit`), Anthropic through `/v1/models`; Bedrock, which
lists models only through a separate control-plane API, shows the Claude ids tether knows.
A provider that cannot be asked is reported with its error, and the others are still listed.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from tether.errors import ProviderError, TetherError
from tether.providers.catalog import (
    DEFAULT_ORDER,
    PRESETS,
    ProviderPreset,
    env_key,
    find_preset,
    resolve_endpoint,
)
from tether.providers.credentials import find_credential, load_credentials
from tether.providers.discovery import DiscoveryFailed, ModelInfo, get_json, list_models

# Context windows of model families whose listing does not say (prefix of the model id).
KNOWN_WINDOWS = (
    ("claude-", 200_000),
    ("anthropic.claude", 200_000),
    ("us.anthropic.claude", 200_000),
    ("eu.anthropic.claude", 200_000),
    ("gpt-5", 400_000),
    ("gpt-4.1", 1_047_576),
    ("gpt-4o", 128_000),
    ("o3", 200_000),
    ("o4", 200_000),
    ("deepseek-", 128_000),
    ("glm-4.6", 200_000),
    ("mistral-large", 128_000),
)
BEDROCK_MODELS = (
    "us.anthropic.claude-opus-4-1-20250805-v1:0",
    "us.anthropic.claude-sonnet-4-5-20250929-v1:0",
    "us.anthropic.claude-haiku-4-5-20251001-v1:0",
    "anthropic.claude-3-5-haiku-20241022-v1:0",
)


def known_window(model: str) -> int | None:
    return next((w for prefix, w in KNOWN_WINDOWS if model.startswith(prefix)), None)


def configured_providers(home: Path, env: Mapping[str, str]) -> list[str]:
    """Every provider with a record or a key (local servers: a record or a base-URL variable)."""
    records = load_credentials(home)
    out = []
    for prefix in DEFAULT_ORDER:
        preset = PRESETS[prefix]
        if find_credential(records, prefix) is not None:
            out.append(prefix)
        elif preset.adapter == "bedrock":
            if env.get("AWS_ACCESS_KEY_ID") or env.get("AWS_PROFILE"):
                out.append(prefix)
        elif env.get(preset.base_url_env) if preset.local else env_key(preset, env):
            out.append(prefix)
    customs = [r["name"] for r in records if r.get("provider_type") == "openai-compatible"]
    return out + [n for n in customs if isinstance(n, str) and n not in out]


def list_provider_models(prefix: str, home: Path, env: Mapping[str, str]) -> list[dict[str, Any]]:
    """One row per model: handle, provider, model, context_window (None when unknown)."""
    preset = find_preset(prefix, home)
    models = asyncio.run(_ask(preset, home, env))
    return [
        {
            "handle": f"{preset.prefix}/{m.id}",
            "provider": preset.prefix,
            "model": m.id,
            "context_window": m.context_window or known_window(m.id),
        }
        for m in models
    ]


async def _ask(preset: ProviderPreset, home: Path, env: Mapping[str, str]) -> list[ModelInfo]:
    if preset.adapter == "bedrock":
        return [ModelInfo(m) for m in BEDROCK_MODELS]
    endpoint = resolve_endpoint(preset.prefix, home, env)
    if preset.local or preset.adapter == "openai_chat" or preset.adapter == "openai_responses":
        return await list_models(endpoint, home, fresh=True)
    if preset.adapter == "gemini":
        data = await asyncio.to_thread(
            get_json,
            endpoint,
            f"{endpoint.base_url}/models?pageSize=1000",
            {"x-goog-api-key": endpoint.api_key or ""},
        )
        return [
            ModelInfo(str(m["name"]).removeprefix("models/"), m.get("inputTokenLimit"))
            for m in data.get("models") or []
            if isinstance(m, dict)
            and "name" in m
            and "generateContent" in (m.get("supportedGenerationMethods") or ["generateContent"])
        ]
    auth = {"x-api-key": endpoint.api_key or "", "anthropic-version": "2023-06-01"}
    data = await asyncio.to_thread(
        get_json, endpoint, f"{endpoint.base_url}/v1/models?limit=1000", auth
    )
    return [
        ModelInfo(str(m["id"])) for m in data.get("data") or [] if isinstance(m, dict) and "id" in m
    ]


def list_all(home: Path, env: Mapping[str, str], provider: str | None) -> list[dict[str, Any]]:
    """Rows for `provider`, or for every configured one; a failure becomes an `error` row."""
    prefixes = [provider] if provider else configured_providers(home, env)
    rows: list[dict[str, Any]] = []
    for prefix in prefixes:
        try:
            rows += list_provider_models(prefix, home, env)
        except (DiscoveryFailed, TetherError) as exc:
            if provider:  # the one provider asked for: its failure is the answer
                raise ProviderError(f"cannot list the models of {prefix}: {exc}") from None
            rows.append({"provider": prefix, "error": str(exc)})
    return rows
