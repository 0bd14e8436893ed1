"""Shared fixtures: every test gets a temporary TETHER_HOME and never sees the real home."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

_SCRUB_PREFIXES = ("TETHER_", "ANTHROPIC_", "OPENAI_", "OLLAMA_", "LMSTUDIO_", "LLAMA_CPP_")


@pytest.fixture(autouse=True)
def tether_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    for key in list(os.environ):
        if key.startswith(_SCRUB_PREFIXES):
            monkeypatch.delenv(key, raising=False)
    home = tmp_path / "tether-home"
    monkeypatch.setenv("TETHER_HOME", str(home))
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    (tmp_path / "home").mkdir()
    return home
