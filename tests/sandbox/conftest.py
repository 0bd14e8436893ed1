"""Fixtures of the sandbox tests: the machine's probed sandbox status and a fresh workspace."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.requirements import need_bwrap
from tether.sandbox import SandboxStatus


@pytest.fixture(scope="module")
def status() -> SandboxStatus:
    return need_bwrap()


@pytest.fixture
def ws(tmp_path: Path) -> Path:
    root = tmp_path / "ws"
    root.mkdir()
    (root / "tmp").mkdir()
    (tmp_path / "sbx-tmp").mkdir()
    return root
