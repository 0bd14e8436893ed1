"""Model handles whose prefix a mod registers (`api.providers.register("mine", factory)`).

`--model mine/some-model` cannot be resolved before mods load, so the run starts with a
`ModProvider` placeholder; once mods are loaded, `bind` finds the factory (or fails with a usage
error naming the prefix) and every `stream` goes to the provider the factory built.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from tether.errors import ProviderError, UsageError
from tether.protocol.chunks import Chunk
from tether.protocol.llm import ProviderRequest


def is_mod_handle(handle: str | None) -> bool:
    """A `prefix/model` handle whose prefix is not one of tether's own providers."""
    from tether.providers.catalog import ALIASES, PRESETS

    if not handle or "/" not in handle:
        return False
    prefix = handle.partition("/")[0]
    return ALIASES.get(prefix, prefix) not in PRESETS


class ModProvider:
    def __init__(self, handle: str) -> None:
        self.prefix, _, self.model_id = handle.partition("/")
        if not self.model_id.strip():
            raise UsageError(f"model handle {handle!r} names no model after {self.prefix}/")
        self.handle = handle
        self.inner: Any = None
        self.api = f"mod-{self.prefix}"
        self.endpoint: Any = None

    def bind(self, mods: Any) -> None:
        from tether.providers.catalog import valid_prefixes

        factory = mods.engine.provider(self.prefix) if mods is not None else None
        if factory is None:
            raise UsageError(
                f"model handle {self.handle!r}: {self.prefix!r} is neither a built-in provider "
                f"({valid_prefixes()}) nor one a loaded mod registers"
                + ("" if mods is not None else " (mods are off)")
            )
        provider = factory(self.model_id)
        if provider is None or not callable(getattr(provider, "stream", None)):
            raise UsageError(f"mod provider {self.prefix!r} returned no provider with stream()")
        self.inner = provider
        self.api = str(getattr(provider, "api", self.api))
        self.endpoint = getattr(provider, "endpoint", None)

    async def stream(self, request: ProviderRequest) -> AsyncIterator[Chunk]:
        if self.inner is None:
            raise ProviderError(f"mod provider {self.prefix!r} is not bound yet")
        async for chunk in self.inner.stream(request):
            yield chunk
