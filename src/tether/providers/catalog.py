"""Model handles to providers: the prefix table, local endpoint presets and credential lookup.

Imported on the CLI start path, so it stays cheap: adapters (and the HTTP transport) are imported only
inside `resolve_provider`.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tether.errors import UsageError
from tether.providers.base import Endpoint, Provider
from tether.providers.credentials import (
    LOCAL_KEY,
    PREFIX_ALIASES,
    find_credential,
    find_custom,
    load_credentials,
    record_key,
)
from tether.providers.timeouts import resolve_timeout_s


@dataclass(frozen=True, slots=True)
class ProviderPreset:
    prefix: str
    adapter: str  # anthropic | openai_responses | openai_chat | gemini | bedrock
    base_url: str | None  # None: the user must give one (bedrock: derived from the region)
    base_url_env: str
    key_env: str
    local: bool  # no key needed: defaults to "not-needed"; models discovered from the server
    default_model: str
    other_key_envs: tuple[str, ...] = ()  # also read, after key_env
    custom: bool = False  # a provider the user named with `tether connect NAME --base-url`


_OPENAI = "https://api.openai.com/v1"
_BUILT_IN = (
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
        "google", "gemini", "https://generativelanguage.googleapis.com/v1beta", "GEMINI_BASE_URL",
        "GEMINI_API_KEY", False, "gemini-3.1-pro-preview",
        ("GOOGLE_API_KEY", "GOOGLE_GENERATIVE_AI_API_KEY"),
    ),
    ProviderPreset(
        "bedrock", "bedrock", None, "AWS_ENDPOINT_URL_BEDROCK_RUNTIME", "AWS_ACCESS_KEY_ID",
        False, "us.anthropic.claude-opus-4-1-20250805-v1:0",
    ),
    ProviderPreset(
        "openrouter", "openai_chat", "https://openrouter.ai/api/v1", "OPENROUTER_BASE_URL",
        "OPENROUTER_API_KEY", False, "anthropic/claude-opus-4.1",
    ),
    ProviderPreset(
        "groq", "openai_chat", "https://api.groq.com/openai/v1", "GROQ_BASE_URL", "GROQ_API_KEY",
        False, "openai/gpt-oss-120b",
    ),
    ProviderPreset(
        "deepseek", "openai_chat", "https://api.deepseek.com/v1", "DEEPSEEK_BASE_URL",
        "DEEPSEEK_API_KEY", False, "deepseek-chat",
    ),
    ProviderPreset(
        "together", "openai_chat", "https://api.together.xyz/v1", "TOGETHER_BASE_URL",
        "TOGETHER_API_KEY", False, "moonshotai/Kimi-K2-Instruct",
    ),
    ProviderPreset(
        "zai", "openai_chat", "https://api.z.ai/api/paas/v4", "ZAI_BASE_URL", "ZAI_API_KEY",
        False, "glm-4.6",
    ),
    ProviderPreset(
        "mistral", "openai_chat", "https://api.mistral.ai/v1", "MISTRAL_BASE_URL",
        "MISTRAL_API_KEY", False, "mistral-large-latest",
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
)  # fmt: skip


class _PresetTable(dict[str, ProviderPreset]):
    """The built-in presets; a prefix that is none of them may still be a custom provider the
    user stored with `tether connect NAME --base-url URL`, looked up in the credentials file
    only then (so `prefix in PRESETS` is right for callers that hold no home directory)."""

    def __contains__(self, prefix: object) -> bool:
        return super().__contains__(prefix) or (
            isinstance(prefix, str) and custom_preset(prefix, _home(os.environ)) is not None
        )

    def __missing__(self, prefix: str) -> ProviderPreset:
        preset = custom_preset(prefix, _home(os.environ))
        if preset is None:
            raise KeyError(prefix)
        return preset

    def get(self, prefix: str, default: Any = None) -> Any:
        try:
            return self[prefix]
        except KeyError:
            return default


PRESETS: dict[str, ProviderPreset] = _PresetTable((p.prefix, p) for p in _BUILT_IN)
ALIASES = PREFIX_ALIASES
# The order `default_handle` tries providers in (the reference's registry order).
DEFAULT_ORDER = (
    "anthropic",
    "openai",
    "openai-chat",
    "google",
    "bedrock",
    "openrouter",
    "groq",
    "deepseek",
    "together",
    "zai",
    "mistral",
    "openai-compatible",
    "ollama",
    "lmstudio",
    "llama.cpp",
)


def _home(env: Mapping[str, str]) -> Path:
    value = env.get("TETHER_HOME")  # the same rule as runtime.session.tether_home
    return Path(value).expanduser() if value else Path.home() / ".tether"


def custom_preset(name: str, home: Path) -> ProviderPreset | None:
    """A preset for the custom OpenAI-compatible provider stored as `name`, if there is one."""
    if dict.__contains__(PRESETS, name) or name in ALIASES:
        return None
    try:
        record = find_custom(load_credentials(home), name)
    except UsageError:
        return None  # a damaged file is reported where credentials are used, not here
    if record is None:
        return None
    return ProviderPreset(
        name, "openai_chat", record["base_url"], "", "", True, "default", custom=True
    )


# Context windows of the hosted providers' default models, for runs that name no window
# (the runner's own table covers anthropic / openai; a local server's comes from its listing).
PRESET_WINDOWS = {
    "google": 1_048_576,
    "bedrock": 200_000,
    "openrouter": 200_000,
    "groq": 131_072,
    "deepseek": 128_000,
    "together": 131_072,
    "zai": 200_000,
    "mistral": 128_000,
}


def preset_window(prefix: str) -> int | None:
    """The context window tether assumes for `prefix`'s models, None when it cannot know."""
    return PRESET_WINDOWS.get(ALIASES.get(prefix, prefix))


def valid_prefixes() -> str:
    return ", ".join(f"{p}/" for p in [*PRESETS, *ALIASES])


def parse_handle(handle: str) -> tuple[str, str]:
    """`llama-cpp/qwen3` -> (`llama.cpp`, `qwen3`); the model id may itself contain `/`.

    A local server's handle may leave the model out (`ollama/`): that is `default`, which the
    provider resolves to the server's first model (see `providers/discovery.py`).
    """
    prefix, sep, model = handle.partition("/")
    prefix = ALIASES.get(prefix, prefix)
    if not sep or prefix not in PRESETS:
        raise UsageError(
            f"model handle {handle!r} is not <provider>/<model>; valid providers: {valid_prefixes()} "
            "(e.g. anthropic/claude-opus-4-8, openai/gpt-5.5, google/gemini-2.5-pro, ollama/qwen3)"
        )
    if not model.strip():
        if PRESETS[prefix].local:
            return prefix, "default"
        raise UsageError(f"model handle {handle!r} names no model after {prefix}/")
    return prefix, model


def find_preset(prefix: str, home: Path) -> ProviderPreset:
    prefix = ALIASES.get(prefix, prefix)
    preset = dict.get(PRESETS, prefix) or custom_preset(prefix, home)
    if preset is None:
        raise UsageError(f"unknown provider {prefix!r}; valid providers: {valid_prefixes()}")
    return preset


def provider_record(preset: ProviderPreset, home: Path) -> dict[str, Any] | None:
    records = load_credentials(home)
    if preset.custom:
        return find_custom(records, preset.prefix)
    return find_credential(records, preset.prefix)


def env_key(preset: ProviderPreset, env: Mapping[str, str]) -> str | None:
    return next(
        (env[n] for n in (preset.key_env, *preset.other_key_envs) if n and env.get(n)), None
    )


def resolve_endpoint(prefix: str, home: Path, env: Mapping[str, str]) -> Endpoint:
    """Base URL and key from the stored credential, else the environment, else the preset."""
    preset = find_preset(prefix, home)
    record = provider_record(preset, home)
    base_url = (
        (record or {}).get("base_url")
        or (env.get(preset.base_url_env) if preset.base_url_env else None)
        or preset.base_url
    )
    if not base_url:
        raise UsageError(
            f"{preset.prefix} needs a base URL: set {preset.base_url_env} or run "
            f"`tether connect {preset.prefix} --base-url URL`"
        )
    base_url = base_url.rstrip("/")
    if preset.prefix == "ollama" and not base_url.endswith("/v1"):
        base_url += "/v1"  # OLLAMA_BASE_URL is usually the native root; tether speaks its /v1
    key = record_key(record) or env_key(preset, env) or (LOCAL_KEY if preset.local else None)
    if not key:
        names = " or ".join((preset.key_env, *preset.other_key_envs))
        raise UsageError(
            f"no API key for {preset.prefix}: set {names} or run "
            f"`tether connect {preset.prefix} --api-key K`"
        )
    timeout = (record or {}).get("timeout")
    return Endpoint(preset.prefix, base_url, key, resolve_timeout_s(preset.prefix, env, timeout))


def resolve_provider(handle: str, home: Path, env: Mapping[str, str]) -> Provider:
    """The streaming adapter for `handle`; pass `parse_handle(handle)[1]` as the request's model."""
    prefix, model = parse_handle(handle)
    preset = find_preset(prefix, home)
    if preset.adapter == "bedrock":  # AWS credentials and a region, not a key and a URL
        from tether.providers.bedrock import bedrock_provider

        return bedrock_provider(provider_record(preset, home), env)
    endpoint = resolve_endpoint(prefix, home, env)
    if preset.adapter == "anthropic":
        from tether.providers.anthropic import AnthropicProvider

        return AnthropicProvider(endpoint)
    if preset.adapter == "openai_responses":
        from tether.providers.openai_responses import OpenAIResponsesProvider

        return OpenAIResponsesProvider(endpoint)
    if preset.adapter == "gemini":
        from tether.providers.gemini import GeminiProvider

        return GeminiProvider(endpoint)
    if preset.local:  # a server whose models tether asks for rather than guesses
        from tether.providers.discovery import DiscoveringChatProvider

        return DiscoveringChatProvider(endpoint, home)
    from tether.providers.compat import chat_provider

    return chat_provider(endpoint, env)


def default_handle(home: Path, env: Mapping[str, str]) -> str | None:
    """The first configured provider's default model, or None when nothing is configured.

    Hosted providers count when they have a key; openai-compatible and local servers only when
    a record or their base-URL variable says one exists (a preset URL alone proves nothing);
    Bedrock only with a record (AWS keys in the environment are not a wish to use Bedrock);
    custom OpenAI-compatible providers last, in the order they were added.
    """
    records = load_credentials(home)
    for prefix in DEFAULT_ORDER:
        preset = PRESETS[prefix]
        record = find_credential(records, prefix)
        if preset.adapter == "bedrock":
            configured = record is not None
        elif preset.local:
            configured = record is not None or bool(env.get(preset.base_url_env))
        else:
            configured = record is not None or env_key(preset, env) is not None
        if configured:
            return f"{prefix}/{preset.default_model}"
    custom = next(
        (r["name"] for r in records if find_custom(records, str(r.get("name"))) is r), None
    )
    return f"{custom}/default" if custom else None  # its server's first model
