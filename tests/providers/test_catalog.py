"""Handles to providers: prefixes, presets, env and stored credentials, the default handle."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

import tether
from tether.errors import UsageError
from tether.providers.anthropic import AnthropicProvider
from tether.providers.catalog import default_handle, parse_handle, resolve_provider
from tether.providers.credentials import save_credential
from tether.providers.openai_chat import OpenAIChatProvider
from tether.providers.openai_responses import OpenAIResponsesProvider


def test_parse_handle() -> None:
    assert parse_handle("anthropic/claude-opus-4-8") == ("anthropic", "claude-opus-4-8")
    assert parse_handle("llama-cpp/qwen3") == ("llama.cpp", "qwen3")
    assert parse_handle("openai-compatible/meta-llama/Llama-3.3") == (
        "openai-compatible",
        "meta-llama/Llama-3.3",
    )


@pytest.mark.parametrize("handle", ["gpt-5.5", "gemini/pro", "/x"])
def test_bad_handles_list_the_valid_prefixes(handle: str) -> None:
    with pytest.raises(UsageError) as info:
        parse_handle(handle)
    message = str(info.value)
    for prefix in (
        "anthropic/",
        "openai/",
        "openai-chat/",
        "openai-compatible/",
        "ollama/",
        "lmstudio/",
        "llama.cpp/",
        "llama-cpp/",
    ):
        assert prefix in message


def test_handle_without_model_is_an_error() -> None:
    with pytest.raises(UsageError, match="names no model"):
        parse_handle("openai/")


def test_each_prefix_picks_its_adapter_and_preset(tmp_path: Path) -> None:
    env = {
        "ANTHROPIC_API_KEY": "a",
        "OPENAI_API_KEY": "o",
        "OPENAI_COMPATIBLE_BASE_URL": "http://gw:9000/v1/",
    }
    cases = {
        "anthropic/m": (AnthropicProvider, "https://api.anthropic.com", "a"),
        "openai/m": (OpenAIResponsesProvider, "https://api.openai.com/v1", "o"),
        "openai-chat/m": (OpenAIChatProvider, "https://api.openai.com/v1", "o"),
        "openai-compatible/m": (OpenAIChatProvider, "http://gw:9000/v1", "not-needed"),
        "ollama/m": (OpenAIChatProvider, "http://localhost:11434/v1", "not-needed"),
        "lmstudio/m": (OpenAIChatProvider, "http://127.0.0.1:1234/v1", "not-needed"),
        "llama-cpp/m": (OpenAIChatProvider, "http://localhost:8080/v1", "not-needed"),
    }
    for handle, (cls, base, key) in cases.items():
        provider = resolve_provider(handle, tmp_path, env)
        assert isinstance(provider, cls), handle
        assert (provider.endpoint.base_url, provider.endpoint.api_key) == (base, key), handle
        assert provider.endpoint.timeout_s == 300.0


def test_env_base_urls_and_ollama_v1(tmp_path: Path) -> None:
    env = {
        "OLLAMA_BASE_URL": "http://gpu:11434",
        "LLAMA_CPP_BASE_URL": "http://box:8081/v1",
        "ANTHROPIC_BASE_URL": "http://proxy",
        "ANTHROPIC_API_KEY": "a",
    }
    assert (
        resolve_provider("ollama/qwen3", tmp_path, env).endpoint.base_url == "http://gpu:11434/v1"
    )
    assert resolve_provider("llama.cpp/x", tmp_path, env).endpoint.base_url == "http://box:8081/v1"
    assert resolve_provider("anthropic/x", tmp_path, env).endpoint.base_url == "http://proxy"


def test_stored_credential_beats_env(tmp_path: Path) -> None:
    save_credential(tmp_path, "openai", api_key="stored", base_url="http://mine/v1", timeout="20s")
    endpoint = resolve_provider(
        "openai/gpt-5.5", tmp_path, {"OPENAI_API_KEY": "env", "OPENAI_BASE_URL": "http://env/v1"}
    ).endpoint
    assert (endpoint.api_key, endpoint.base_url, endpoint.timeout_s) == (
        "stored",
        "http://mine/v1",
        20.0,
    )


def test_timeout_env_reaches_the_endpoint(tmp_path: Path) -> None:
    env = {"TETHER_LOCAL_PROVIDER_TIMEOUT_MS": "off"}
    assert resolve_provider("lmstudio/x", tmp_path, env).endpoint.timeout_s is None


def test_hosted_without_key_says_how_to_configure(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="ANTHROPIC_API_KEY.*tether connect anthropic --api-key"):
        resolve_provider("anthropic/x", tmp_path, {})
    with pytest.raises(UsageError, match="OPENAI_API_KEY"):
        resolve_provider("openai-chat/x", tmp_path, {})


def test_openai_compatible_needs_a_base_url(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="OPENAI_COMPATIBLE_BASE_URL.*--base-url"):
        resolve_provider("openai-compatible/x", tmp_path, {})


def test_default_handle_order(tmp_path: Path) -> None:
    assert default_handle(tmp_path, {}) is None
    assert default_handle(tmp_path, {"OLLAMA_BASE_URL": "http://x"}) == "ollama/default"
    assert (
        default_handle(
            tmp_path, {"OPENAI_COMPATIBLE_BASE_URL": "http://x", "LLAMA_CPP_BASE_URL": "http://y"}
        )
        == "openai-compatible/default"
    )
    assert (
        default_handle(tmp_path, {"OPENAI_API_KEY": "o", "OLLAMA_BASE_URL": "http://x"})
        == "openai/gpt-5.5"
    )
    both = {"OPENAI_API_KEY": "o", "ANTHROPIC_API_KEY": "a"}
    assert default_handle(tmp_path, both) == "anthropic/claude-opus-4-8"
    save_credential(tmp_path, "lmstudio", api_key=None, base_url=None, timeout=None)
    assert default_handle(tmp_path, {}) == "lmstudio/default"
    save_credential(tmp_path, "openai", api_key="k", base_url=None, timeout=None)
    assert default_handle(tmp_path, {"LLAMA_CPP_BASE_URL": "http://y"}) == "openai/gpt-5.5"


def test_catalog_import_does_not_load_httpx_or_adapters() -> None:
    src = str(Path(tether.__file__).parents[1])
    code = (
        "import sys; sys.path.insert(0, sys.argv[1]); import tether.providers.catalog; "
        "bad = [m for m in ('httpx', 'tether.providers.anthropic', 'tether.providers.openai_chat') if m in sys.modules]; "
        "print(bad)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code, src], capture_output=True, text=True, check=True
    )
    assert out.stdout.strip() == "[]"
