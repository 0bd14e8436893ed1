"""Model handles whose prefix a mod registers (`api.providers.register("mine", factory)`).

`--model mine/some-model` cannot be resolved before mods load, so the run starts with a
`ModProvider` placeholder; once mods are loaded, `bind` finds the factory (or fails with a usage
error naming the prefix) and every `stream` goes to the provider the factory built.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping
from pathlib import Path
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


def no_mod_could_serve(handle: str, home: Path, cwd: Path, env: Mapping[str, str], no_mods: bool) -> str | None:
    """Why no mod can provide `handle`'s prefix, decided before anything is created (mods off,
    or no mod anywhere); None when a mod might register it once loaded."""
    from tether.runtime.extensions.mods.engine import global_mods_dir, mods_disabled
    from tether.runtime.extensions.mods.installed import installed_mod_entry_points

    if no_mods or mods_disabled(env):
        return unknown_prefix(handle, " (mods are off)")
    dirs = [global_mods_dir(home, env), cwd / ".tether" / "mods"]
    if any(d.is_dir() and any(not p.name.startswith(".") for p in d.iterdir()) for d in dirs):
        return None
    if home.joinpath("agents").is_dir() or installed_mod_entry_points(home):
        return None  # an agent's memory mods/ or an installed package may register it
    return unknown_prefix(handle, "")


def unknown_prefix(handle: str, why: str) -> str:
    from tether.providers.catalog import valid_prefixes

    prefix = handle.partition("/")[0]
    return (
        f"model handle {handle!r} is not <provider>/<model>: {prefix!r} is not a provider; "
        f"valid providers: {valid_prefixes()}, or a prefix a loaded mod registers{why}"
    )


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
        factory = mods.engine.provider(self.prefix) if mods is not None else None
        if factory is None:
            raise UsageError(unknown_prefix(self.handle, "" if mods is not None else " (mods are off)"))
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
