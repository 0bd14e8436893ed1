"""The old name of the fake provider with model listings on: `FakeMoreProviders(script,
models=[...], ollama=..., aws_secrets=...)` is `FakeProvider` serving `GET …/models` (empty by
default). New tests use `tether.testing.fake_provider.FakeProvider(models=[...])` directly."""

from __future__ import annotations

from typing import Any

from tether.testing.fake_provider import FakeProvider


class FakeMoreProviders(FakeProvider):
    def __init__(
        self, script: list[dict[str, Any]] | None = None, *, models: list[Any] | None = None,
        **options: Any,
    ) -> None:  # fmt: skip
        super().__init__(script, models=list(models or []), **options)
