"""OpenAI-compatible presets by handle (base URL, key variable, headers) and custom providers."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.providers.support import collect, request, text_of, user
from tether.errors import UsageError
from tether.providers.catalog import (
    PRESETS,
    default_handle,
    parse_handle,
    preset_window,
    resolve_provider,
)
from tether.providers.credentials import load_credentials, save_credential, save_custom_provider
from tether.providers.discovery import DiscoveringChatProvider
from tether.providers.openai_chat import OpenAIChatProvider
from tether.runtime.extensions.mods.providers import is_mod_handle
from tether.testing.fake_provider import FakeProvider

PRESET_TABLE = {
    "openrouter": ("https://openrouter.ai/api/v1", "OPENROUTER_API_KEY"),
    "groq": ("https://api.groq.com/openai/v1", "GROQ_API_KEY"),
    "deepseek": ("https://api.deepseek.com/v1", "DEEPSEEK_API_KEY"),
    "together": ("https://api.together.xyz/v1", "TOGETHER_API_KEY"),
    "zai": ("https://api.z.ai/api/paas/v4", "ZAI_API_KEY"),
    "mistral": ("https://api.mistral.ai/v1", "MISTRAL_API_KEY"),
}


@pytest.mark.parametrize("prefix", list(PRESET_TABLE))
def test_each_preset_has_its_base_url_and_key_variable(prefix: str, tmp_path: Path) -> None:
    base, key_env = PRESET_TABLE[prefix]
    provider = resolve_provider(f"{prefix}/some/model", tmp_path, {key_env: f"key-{prefix}"})
    assert isinstance(provider, OpenAIChatProvider) and not isinstance(
        provider, DiscoveringChatProvider
    )
    assert (provider.endpoint.base_url, provider.endpoint.api_key) == (base, f"key-{prefix}")
    assert parse_handle(f"{prefix}/some/model") == (prefix, "some/model")
    with pytest.raises(UsageError, match=f"{key_env}.*tether connect {prefix} --api-key"):
        resolve_provider(f"{prefix}/m", tmp_path, {})
    assert default_handle(tmp_path, {key_env: "k"}) == f"{prefix}/{PRESETS[prefix].default_model}"
    assert (preset_window(prefix) or 0) >= 128_000


def test_openrouter_headers_and_mistral_body_on_the_wire(tmp_path: Path) -> None:
    with FakeProvider([{"text": "from openrouter"}, {"text": "from mistral"}], models=[]) as fake:
        env = {
            "OPENROUTER_API_KEY": "or-key",
            "OPENROUTER_BASE_URL": f"{fake.url}/api/v1",
            "OPENROUTER_HTTP_REFERER": "https://example.org/app",
            "MISTRAL_API_KEY": "mi-key",
            "MISTRAL_BASE_URL": f"{fake.url}/v1",
        }
        a = collect(
            resolve_provider("openrouter/anthropic/claude", tmp_path, env), request(user("hi"))
        )
        b = collect(
            resolve_provider("mistral/mistral-large-latest", tmp_path, env), request(user("hi"))
        )
        routed, mistral = fake.of("chat")
    assert fake.violations == []
    assert (text_of(a), text_of(b)) == ("from openrouter", "from mistral")
    assert routed["path"] == "/api/v1/chat/completions"
    assert routed["headers"]["authorization"] == "Bearer or-key"
    assert routed["headers"]["x-title"] == "tether"
    assert routed["headers"]["http-referer"] == "https://example.org/app"
    assert routed["body"]["stream_options"] == {"include_usage": True}
    assert "stream_options" not in mistral["body"] and "x-title" not in mistral["headers"]
    assert mistral["headers"]["authorization"] == "Bearer mi-key"


def test_stored_preset_key_beats_the_environment(tmp_path: Path) -> None:
    save_credential(tmp_path, "groq", api_key="stored", base_url=None, timeout="30s")
    endpoint = resolve_provider("groq/llama", tmp_path, {"GROQ_API_KEY": "env"}).endpoint
    assert (endpoint.api_key, endpoint.timeout_s) == ("stored", 30.0)
    assert load_credentials(tmp_path)[0]["name"] == "lc-groq"


def test_custom_provider_by_name(tether_home: Path) -> None:
    assert "gateway" not in PRESETS and is_mod_handle("gateway/some-model")
    with FakeProvider([{"text": "via gateway"}], models=["served-model"]) as fake:
        rec = save_custom_provider(
            tether_home, "gateway", base_url=f"{fake.url}/v1/", api_key="gw-key", timeout=None
        )
        assert (rec["name"], rec["provider_type"], rec["base_url"]) == (
            "gateway",
            "openai-compatible",
            f"{fake.url}/v1",
        )
        # Callers that only check `prefix in PRESETS` (mods) see it as tether's own now.
        assert "gateway" in PRESETS and not is_mod_handle("gateway/some-model")
        assert parse_handle("gateway/") == ("gateway", "default")
        provider = resolve_provider("gateway/", tether_home, {})
        assert isinstance(provider, DiscoveringChatProvider)
        assert (provider.endpoint.provider, provider.endpoint.api_key) == ("gateway", "gw-key")
        from dataclasses import replace

        chunks = collect(provider, replace(request(user("hi")), model="default"))
        (sent,) = fake.of("chat")
    assert text_of(chunks) == "via gateway"
    assert default_handle(tether_home, {}) == "gateway/default"
    assert default_handle(tether_home, {"GROQ_API_KEY": "k"}).startswith("groq/")
    assert sent["body"]["model"] == "served-model"
    assert sent["headers"]["authorization"] == "Bearer gw-key"


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("openai", "built-in"),
        ("Bad Name", "lower-case"),
        ("llama-cpp", "built-in"),
        ("a/b", "lower-case"),
    ],
)
def test_custom_names_that_cannot_be_handles(name: str, why: str, tmp_path: Path) -> None:
    with pytest.raises(UsageError, match=why):
        save_custom_provider(tmp_path, name, base_url="http://x/v1", api_key=None, timeout=None)


def test_custom_provider_needs_a_base_url(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="needs --base-url"):
        save_custom_provider(tmp_path, "mine", base_url=None, api_key="k", timeout=None)
    with pytest.raises(UsageError, match="http"):
        save_custom_provider(tmp_path, "mine", base_url="gw.local", api_key="k", timeout=None)
