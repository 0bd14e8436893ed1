"""Asking a local or compatible server which models it has, and choosing one for a handle.

Ollama is asked through its native API (`/api/ps` for the loaded models, then `/api/tags`),
everything else through `GET <base>/models`. `ollama/` or `…/default` becomes the server's first
(loaded) model; a named model the server does not list is an error naming the ones it has. The
answer is cached under `$TETHER_HOME/cache/models/` for `CACHE_TTL_S`, so a run of short
`tether -p` calls asks once, and a miss is always checked against a fresh listing.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from tether.errors import ProviderError
from tether.protocol.chunks import Chunk
from tether.protocol.llm import ProviderRequest
from tether.providers.base import Endpoint
from tether.providers.openai_chat import OpenAIChatProvider

CACHE_TTL_S = 60.0
LIST_TIMEOUT_S = 10.0
UNSELECTED = "default"
# Where servers put a model's context window in their listings: OpenRouter / Together,
# LM Studio's /api/v0, vLLM, llama.cpp's `meta`.
_WINDOW_KEYS = ("context_length", "context_window", "max_context_length", "max_model_len")


@dataclass(frozen=True, slots=True)
class ModelInfo:
    id: str
    context_window: int | None = None


class DiscoveryFailed(Exception):
    """The server could not be asked (down, or it has no listing endpoint)."""

    def __init__(self, message: str, *, lasting: bool = False) -> None:
        super().__init__(message)
        self.lasting = lasting  # the server answered: it has no listing (not merely down)


async def list_models(
    endpoint: Endpoint, home: Path | None = None, *, fresh: bool = False
) -> list[ModelInfo]:
    """The models `endpoint` serves, first the loaded one(s) where the server says which.

    Raises DiscoveryFailed when the server cannot be asked; that too is cached briefly, so a
    server without a listing endpoint costs one request a minute, not one per run.
    """
    cache = _cache_path(home, endpoint) if home is not None else None
    if cache is not None and not fresh:
        cached = _read_cache(cache)
        if isinstance(cached, str):
            raise DiscoveryFailed(cached, lasting=True)
        if cached is not None:
            return cached
    try:
        models = await asyncio.to_thread(_ask, endpoint)
    except DiscoveryFailed as exc:
        if cache is not None and exc.lasting:
            _write_cache(cache, str(exc))
        raise
    if cache is not None:
        _write_cache(cache, models)
    return models


def _ask(endpoint: Endpoint) -> list[ModelInfo]:
    base = endpoint.base_url.rstrip("/")
    if endpoint.provider == "ollama":
        root = base.removesuffix("/v1")
        try:
            loaded = [
                _info(m, "name") for m in get_json(endpoint, f"{root}/api/ps").get("models") or []
            ]
            tags = [
                _info(m, "name") for m in get_json(endpoint, f"{root}/api/tags").get("models") or []
            ]
        except DiscoveryFailed:
            pass  # an Ollama-compatible server without the native API: try the OpenAI listing
        else:
            names = {m.id for m in loaded}
            return [m for m in loaded if m.id] + [m for m in tags if m.id and m.id not in names]
    data = get_json(endpoint, f"{base}/models")
    return [m for m in (_info(item, "id") for item in data.get("data") or []) if m.id]


def _info(item: Any, key: str) -> ModelInfo:
    if not isinstance(item, dict):
        return ModelInfo("")
    window = next((item[k] for k in _WINDOW_KEYS if isinstance(item.get(k), int)), None)
    meta = item.get("meta")
    if window is None and isinstance(meta, dict) and isinstance(meta.get("n_ctx_train"), int):
        window = meta["n_ctx_train"]
    name = item.get(key) or item.get("model") or ""
    return ModelInfo(str(name), window)


def get_json(endpoint: Endpoint, url: str, auth: dict[str, str] | None = None) -> dict[str, Any]:
    """GET `url` as JSON; `auth` replaces the bearer key (Gemini and Anthropic use their own)."""
    import urllib.error
    import urllib.request  # ~15 ms of imports, paid only when the cache has no answer

    headers = {"accept": "application/json"}
    if auth is not None:
        headers.update(auth)
    elif endpoint.api_key:
        headers["authorization"] = f"Bearer {endpoint.api_key}"
    limit = min(endpoint.timeout_s or LIST_TIMEOUT_S, LIST_TIMEOUT_S)
    try:
        with urllib.request.urlopen(
            urllib.request.Request(url, headers=headers), timeout=limit
        ) as r:
            data = json.loads(r.read(4 * 1024 * 1024))
    except urllib.error.HTTPError as exc:
        raise DiscoveryFailed(f"GET {url}: HTTP {exc.code}", lasting=True) from None
    except (OSError, ValueError) as exc:  # refused, timed out, or not JSON
        raise DiscoveryFailed(f"GET {url}: {exc}", lasting=isinstance(exc, ValueError)) from None
    if not isinstance(data, dict):
        raise DiscoveryFailed(f"GET {url}: the answer is not a JSON object", lasting=True)
    return data


def _cache_path(home: Path, endpoint: Endpoint) -> Path:
    digest = hashlib.sha256(f"{endpoint.provider} {endpoint.base_url}".encode()).hexdigest()
    return home / "cache" / "models" / f"{digest[:24]}.json"


def _read_cache(path: Path) -> list[ModelInfo] | str | None:
    """The cached listing, the cached reason it could not be had, or None (ask the server)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        if time.time() - float(data["at"]) > CACHE_TTL_S:
            return None
        if isinstance(data.get("failed"), str):
            return str(data["failed"])
        return [ModelInfo(str(m["id"]), m.get("context_window")) for m in data["models"]]
    except (OSError, ValueError, KeyError, TypeError):
        return None  # absent, stale or damaged: ask the server


def _write_cache(path: Path, models: list[ModelInfo] | str) -> None:
    record: dict[str, Any] = {"at": time.time()}
    if isinstance(models, str):
        record["failed"] = models
    else:
        record["models"] = [{"id": m.id, "context_window": m.context_window} for m in models]
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(f".{time.monotonic_ns()}.tmp")
        tmp.write_text(json.dumps(record), encoding="utf-8")
        tmp.replace(path)
    except OSError:
        pass  # a cache that cannot be written only costs the next run one request


def same_model(wanted: str, listed: str) -> bool:
    """Ollama lists `qwen3:latest` for what users call `qwen3`."""
    return wanted == listed or (":" not in wanted and listed == f"{wanted}:latest")


def find_model(wanted: str, models: list[ModelInfo]) -> str | None:
    """The listed id `wanted` names: the same id, Ollama's `:latest`, else the one model whose
    file name contains it (llama.cpp servers list a path: `…/SmolLM2-135M-Instruct.gguf`)."""
    exact = next((m.id for m in models if same_model(wanted, m.id)), None)
    if exact is not None:
        return exact
    needle = wanted.lower()
    loose = [m.id for m in models if needle in m.id.rsplit("/", 1)[-1].lower()]
    return loose[0] if len(loose) == 1 else None


async def choose_model(endpoint: Endpoint, wanted: str, home: Path | None) -> str:
    """The model id to send: the server's first model for `default`, else the listed model
    `wanted` names. A server that cannot be asked gets `wanted` unchanged."""
    try:
        models = await list_models(endpoint, home)
        if wanted != UNSELECTED and find_model(wanted, models) is None:
            models = await list_models(endpoint, home, fresh=True)  # maybe pulled since
    except DiscoveryFailed:
        return wanted
    where = f"{endpoint.provider} at {endpoint.base_url}"
    if wanted == UNSELECTED:
        if not models:
            raise ProviderError(
                f"{where} lists no models; load or pull one first (e.g. `ollama pull qwen3`), "
                f"or name it with --model {endpoint.provider}/<model>"
            )
        return models[0].id
    match = find_model(wanted, models)
    if match is None:
        names = ", ".join(m.id for m in models) or "none"
        raise ProviderError(
            f"{where} has no model {wanted!r}; it has: {names}. "
            f"Use --model {endpoint.provider}/<one of them>"
        )
    return match


class DiscoveringChatProvider(OpenAIChatProvider):
    """Chat Completions to a local server, with the model chosen from the server's listing."""

    def __init__(self, endpoint: Endpoint, home: Path | None = None, **kw: Any) -> None:
        super().__init__(endpoint, **kw)
        self.home = home
        self._chosen: dict[str, str] = {}

    async def stream(self, request: ProviderRequest) -> AsyncIterator[Chunk]:
        model = self._chosen.get(request.model)
        if model is None:
            model = await choose_model(self.endpoint, request.model, self.home)
            self._chosen[request.model] = model
        async for chunk in super().stream(replace(request, model=model)):
            yield chunk
