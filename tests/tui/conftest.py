"""Shared fixtures of the TUI tests."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture
def workdir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The project folder, and this process's working directory (the app runs in-process)."""
    d = tmp_path / "project"
    d.mkdir()
    monkeypatch.chdir(d)
    return d
