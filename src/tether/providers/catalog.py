"""Model handles to providers: the prefix table, local endpoint presets and credential lookup.

Imported on the CLI start path, so it stays cheap: adapters (and the HTTP transport) are imported only
inside `resolve_provider`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from tether.errors import UsageError
from tether.providers.base import Endpoint, Provider
from tether.providers.credentials import LOCAL_KEY, find_credential, load_credentials, record_key
from tether.providers.timeouts import resolve_timeout_s


@dataclass(frozen=True, slots=True)
class ProviderPreset:
    prefix: str
    adapter: str  # anthropic | openai_responses | openai_chat
    base_url: str | None  # None: the user must give one
    base_url_env: str
    key_env: str
    local: bool  # no key needed: defaults to "not-needed"
    default_model: str


_OPENAI = "https://api.openai.com/v1"
PRESETS: dict[str, ProviderPreset] = {
    p.prefix: p
    for p in (
        ProviderPreset(
            "anthropic", "anthropic", "https://api.anthropic.com", "ANTHROPIC_BASE_URL",
            "ANTHROPIC_API_KEY", False, "claude-opus-4-8",
        ),
        ProviderPreset(
            "openai", "openai_responses", _OPENAI, "OPENAI_BASE_URL", "OPENAI_API_KEY", False, "gpt-5.5"
        ),
        ProviderPreset(
            "openai-chat", "openai_chat", _OPENAI, "OPENAI_BASE_URL", "OPENAI_API_KEY", False, "gpt-5.5"
        ),
        ProviderPreset(
            "openai-compatible", "openai_chat", None, "OPENAI_COMPATIBLE_BASE_URL",
            "OPENAI_COMPATIBLE_API_KEY", True, "default",
        ),
        ProviderPreset(
            "ollama", "openai_chat", "http://localhost:11434/v1", "OLLAMA_BASE_URL",
            "OLLAMA_API_KEY", True, "default",
        ),
        ProviderPreset(
            "lmstudio", "openai_chat", "http://127.0.0.1:1234/v1", "LMSTUDIO_BASE_URL",
            "LMSTUDIO_API_KEY", True, "default",
        ),
        ProviderPreset(
            "llama.cpp", "openai_chat", "http://localhost:8080/v1", "LLAMA_CPP_BASE_URL",
            "LLAMA_CPP_API_KEY", True, "default",
        ),
    )
}  # fmt: skip
ALIASES = {"llama-cpp": "llama.cpp"}
# The order `default_handle` tries providers in (the reference's registry order).
DEFAULT_ORDER = (
    "anthropic",
    "openai",
    "openai-chat",
    "openai-compatible",
    "ollama",
    "lmstudio",
    "llama.cpp",
)


def valid_prefixes() -> str:
    return ", ".join(f"{p}/" for p in [*PRESETS, *ALIASES])


def parse_handle(handle: str) -> tuple[str, str]:
    """`llama-cpp/qwen3` -> (`llama.cpp`, `qwen3`); the model id may itself contain `/`."""
    prefix, sep, model = handle.partition("/")
    prefix = ALIASES.get(prefix, prefix)
    if not sep or prefix not in PRESETS:
        raise UsageError(
            f"model handle {handle!r} is not <provider>/<model>; valid providers: {valid_prefixes()} "
            "(e.g. anthropic/claude-opus-4-8, openai/gpt-5.5, ollama/qwen3)"
        )
    if not model.strip():
        raise UsageError(f"model handle {handle!r} names no model after {prefix}/")
    return prefix, model


def resolve_endpoint(prefix: str, home: Path, env: Mapping[str, str]) -> Endpoint:
    """Base URL and key from the stored credential, else the environment, else the preset."""
    preset = PRESETS[ALIASES.get(prefix, prefix)]
    record = find_credential(load_credentials(home), preset.prefix)
    base_url = (record or {}).get("base_url") or env.get(preset.base_url_env) or preset.base_url
    if not base_url:
        raise UsageError(
            f"{preset.prefix} needs a base URL: set {preset.base_url_env} or run "
            f"`tether connect {preset.prefix} --base-url URL`"
        )
    base_url = base_url.rstrip("/")
    if preset.prefix == "ollama" and not base_url.endswith("/v1"):
        base_url += "/v1"  # OLLAMA_BASE_URL is usually the native root; tether speaks its /v1
    key = record_key(record) or env.get(preset.key_env) or (LOCAL_KEY if preset.local else None)
    if not key:
        raise UsageError(
            f"no API key for {preset.prefix}: set {preset.key_env} or run "
            f"`tether connect {preset.prefix} --api-key K`"
        )
    timeout = (record or {}).get("timeout")
    return Endpoint(preset.prefix, base_url, key, resolve_timeout_s(preset.prefix, env, timeout))


def resolve_provider(handle: str, home: Path, env: Mapping[str, str]) -> Provider:
    """The streaming adapter for `handle`; pass `parse_handle(handle)[1]` as the request's model."""
    prefix, _model = parse_handle(handle)
    endpoint = resolve_endpoint(prefix, home, env)
    adapter = PRESETS[prefix].adapter
    if adapter == "anthropic":
        from tether.providers.anthropic import AnthropicProvider

        return AnthropicProvider(endpoint)
    if adapter == "openai_responses":
        from tether.providers.openai_responses import OpenAIResponsesProvider

        return OpenAIResponsesProvider(endpoint)
    from tether.providers.openai_chat import OpenAIChatProvider

    return OpenAIChatProvider(endpoint)


def default_handle(home: Path, env: Mapping[str, str]) -> str | None:
    """The first configured provider's default model, or None when nothing is configured.

    Hosted providers count when they have a key; openai-compatible and local servers only when
    a record or their base-URL variable says one exists (a preset URL alone proves nothing).
    """
    records = load_credentials(home)
    for prefix in DEFAULT_ORDER:
        preset = PRESETS[prefix]
        record = find_credential(records, prefix)
        configured = record is not None or bool(
            env.get(preset.base_url_env) if preset.local else env.get(preset.key_env)
        )
        if configured:
            return f"{prefix}/{preset.default_model}"
    return None
