"""Fixtures of the command-line tests (the end-to-end ones run the real `tether` script)."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    """The project folder a `tether` subprocess runs in."""
    d = tmp_path / "project"
    d.mkdir()
    return d
