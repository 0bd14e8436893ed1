"""The world every attack runs in."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.security.support import World


@pytest.fixture
def world(tmp_path: Path) -> World:
    return World.build(tmp_path / "w")


@pytest.fixture
def git_world(tmp_path: Path) -> World:
    return World.build(tmp_path / "w", git=True)
