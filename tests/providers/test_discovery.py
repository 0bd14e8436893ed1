"""Local servers are asked for their models: the first for `ollama/`, a wrong name listed, a cache."""

from __future__ import annotations

import asyncio
import json
from dataclasses import replace
from pathlib import Path

import pytest

from tests.providers.support import collect, collect_until_error, request, text_of, user
from tether.errors import ProviderError
from tether.providers.base import Endpoint
from tether.providers.catalog import parse_handle, resolve_provider
from tether.providers.discovery import DiscoveringChatProvider, ModelInfo, list_models
from tether.testing.fake_provider import FakeProvider


def ask(provider: DiscoveringChatProvider, model: str) -> list:
    return collect(provider, replace(request(user("hi")), model=model))


def test_unnamed_model_is_the_servers_first(tmp_path: Path) -> None:
    assert parse_handle("ollama/") == ("ollama", "default")
    assert parse_handle("lmstudio/") == ("lmstudio", "default")
    with FakeProvider([{"text": "one"}], models=["qwen3-8b", "gemma-3"]) as fake:
        env = {"LMSTUDIO_BASE_URL": f"{fake.url}/v1"}
        provider = resolve_provider("lmstudio/", tmp_path, env)
        assert isinstance(provider, DiscoveringChatProvider)
        assert text_of(ask(provider, "default")) == "one"
        assert [r["path"] for r in fake.requests] == ["/v1/models", "/v1/chat/completions"]
        assert fake.of("chat")[0]["body"]["model"] == "qwen3-8b"


def test_ollama_native_listing_prefers_the_loaded_model_and_latest_tags(tmp_path: Path) -> None:
    models = ["llama3.2:latest", "qwen3:latest", "mistral:7b"]
    with FakeProvider([{"text": "a"}, {"text": "b"}], models=models, ollama=True) as fake:
        provider = resolve_provider("ollama/", tmp_path, {"OLLAMA_BASE_URL": fake.url})
        ask(provider, "default")
        ask(resolve_provider("ollama/qwen3", tmp_path, {"OLLAMA_BASE_URL": fake.url}), "qwen3")
        assert [r["path"] for r in fake.of("list")] == ["/api/ps", "/api/tags"]  # then cached
        assert [r["body"]["model"] for r in fake.of("chat")] == ["llama3.2:latest", "qwen3:latest"]


def test_a_wrong_name_lists_what_the_server_has(tmp_path: Path) -> None:
    with FakeProvider([{"text": "never"}], models=["alpha", "beta"]) as fake:
        provider = DiscoveringChatProvider(
            Endpoint("llama.cpp", f"{fake.url}/v1", "not-needed"), tmp_path
        )
        seen, error = collect_until_error(provider, replace(request(user("hi")), model="gamma"))
        assert fake.of("chat") == []
        # The miss was checked against a fresh listing, not only the cached one.
        assert len(fake.of("list")) == 2
    assert seen == [] and isinstance(error, ProviderError) and not error.retryable
    assert "has no model 'gamma'; it has: alpha, beta" in str(error)
    assert "--model llama.cpp/<one of them>" in str(error)


def test_file_name_match_and_an_empty_server(tmp_path: Path) -> None:
    models = ["/models/SmolLM2-135M-Instruct.Q4_1.gguf"]
    with FakeProvider([{"text": "ok"}], models=models) as fake:
        provider = DiscoveringChatProvider(Endpoint("llama.cpp", f"{fake.url}/v1", "x"), tmp_path)
        ask(provider, "smollm2")
        assert fake.of("chat")[0]["body"]["model"] == models[0]
    with FakeProvider([], models=[]) as fake:
        provider = DiscoveringChatProvider(Endpoint("ollama", f"{fake.url}/v1", "x"), None)
        _, error = collect_until_error(provider, replace(request(user("hi")), model="default"))
    assert "lists no models" in str(error)


def test_listing_is_cached_briefly_across_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import tether.providers.discovery as discovery

    with FakeProvider([], models=[{"id": "m1", "context_length": 32768}]) as fake:
        endpoint = Endpoint("openai-compatible", f"{fake.url}/v1", "x")
        first = asyncio.run(list_models(endpoint, tmp_path))
        again = asyncio.run(list_models(endpoint, tmp_path))
        assert first == again == [ModelInfo("m1", 32768)]
        assert len(fake.of("list")) == 1
        monkeypatch.setattr(discovery, "CACHE_TTL_S", 0.0)  # the cache has aged out
        asyncio.run(list_models(endpoint, tmp_path))
        assert len(fake.of("list")) == 2
    cached = json.loads(next((tmp_path / "cache" / "models").glob("*.json")).read_text())
    assert cached["models"] == [{"id": "m1", "context_window": 32768}]


def test_a_server_without_a_listing_gets_the_name_unchanged(tmp_path: Path) -> None:
    with FakeProvider([{"text": "x"}, {"text": "y"}]) as fake:  # no GET /v1/models: 404
        provider = DiscoveringChatProvider(
            Endpoint("openai-compatible", f"{fake.url}/v1", "x"), tmp_path
        )
        ask(provider, "default")
        ask(DiscoveringChatProvider(provider.endpoint, tmp_path), "whatever")
        assert [r["body"]["model"] for r in fake.requests] == ["default", "whatever"]
    # The 404 is remembered, so the next run does not ask again (a refused connection is not).
    assert "failed" in next((tmp_path / "cache" / "models").glob("*.json")).read_text()


def test_a_down_server_is_a_connection_error_not_a_discovery_one(tmp_path: Path) -> None:
    provider = DiscoveringChatProvider(
        Endpoint("ollama", "http://127.0.0.1:9/v1", "x", 5.0), tmp_path
    )
    provider.retry = replace(provider.retry, max_retries=0)
    _, error = collect_until_error(provider, replace(request(user("hi")), model="default"))
    assert "cannot connect to ollama" in str(error)
    assert not (tmp_path / "cache" / "models").exists()
