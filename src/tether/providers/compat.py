"""The hosted OpenAI-compatible presets' quirks: extra headers and body keys a service refuses.

OpenRouter attributes traffic to an app by `X-Title` (and `HTTP-Referer` when the user sets
`OPENROUTER_HTTP_REFERER`); Mistral rejects `stream_options` (it sends usage on its last chunk
without being asked). Everything else is the plain Chat Completions adapter.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tether.protocol.llm import ProviderRequest
from tether.providers.base import Endpoint
from tether.providers.openai_chat import OpenAIChatProvider

APP_TITLE = "tether"
_REFUSED_KEYS = {"mistral": ("stream_options",)}


class PresetChatProvider(OpenAIChatProvider):
    """Chat Completions with a preset's extra headers and without the keys it refuses."""

    def __init__(
        self, endpoint: Endpoint, *, extra_headers: Mapping[str, str], refused: tuple[str, ...]
    ) -> None:
        super().__init__(endpoint)
        self.extra_headers = dict(extra_headers)
        self.refused = refused

    def headers(self) -> dict[str, str]:
        return {**super().headers(), **self.extra_headers}

    def body(self, request: ProviderRequest) -> dict[str, Any]:
        body = super().body(request)
        for key in self.refused:
            if key not in request.extra:  # an explicit request extra still goes out
                body.pop(key, None)
        return body


def preset_headers(prefix: str, env: Mapping[str, str]) -> dict[str, str]:
    if prefix != "openrouter":
        return {}
    headers = {"x-title": env.get("OPENROUTER_APP_TITLE") or APP_TITLE}
    if env.get("OPENROUTER_HTTP_REFERER"):
        headers["http-referer"] = env["OPENROUTER_HTTP_REFERER"]
    return headers


def chat_provider(endpoint: Endpoint, env: Mapping[str, str]) -> OpenAIChatProvider:
    headers = preset_headers(endpoint.provider, env)
    refused = _REFUSED_KEYS.get(endpoint.provider, ())
    if not headers and not refused:
        return OpenAIChatProvider(endpoint)
    return PresetChatProvider(endpoint, extra_headers=headers, refused=refused)
