"""The collector policy of a tether process: rare collections while starting, normal after."""

from __future__ import annotations

import gc
from collections.abc import Iterator
from pathlib import Path

import pytest

from tether.runtime import gc_policy


@pytest.fixture
def restore_gc() -> Iterator[None]:
    thresholds = gc.get_threshold()
    state = dict(gc_policy._state)
    yield
    gc.unfreeze()
    gc.set_threshold(*thresholds)
    gc_policy._state.update(state)


def test_startup_raises_thresholds_then_done_freezes_and_restores(restore_gc: None) -> None:
    gc_policy._state["done"] = False
    default = gc.get_threshold()
    gc_policy.starting()
    assert gc.get_threshold()[0] >= 100_000
    gc_policy.startup_done()
    assert gc.get_threshold() == default
    frozen = gc.get_freeze_count()
    assert frozen > 0
    gc_policy.startup_done()  # once per process: a later session does not freeze its garbage
    assert gc.get_freeze_count() == frozen


def test_prepare_ends_startup(restore_gc: None, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from tether.cli.flags import parse_run_flags
    from tether.cli.runner import prepare
    from tether.testing.fake_provider import FakeProvider

    gc_policy._state["done"] = False
    default = gc.get_threshold()
    gc_policy.starting()
    monkeypatch.setenv("TETHER_HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    with FakeProvider([]) as fake:
        monkeypatch.setenv("ANTHROPIC_BASE_URL", fake.url)
        monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-test")
        prepared = prepare(parse_run_flags(["-p", "hi", "--model", "anthropic/m"]))
    assert gc.get_threshold() == default and gc.get_freeze_count() > 0
    assert gc_policy._state["done"]
    del prepared
