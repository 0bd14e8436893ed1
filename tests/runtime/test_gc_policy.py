"""The collector policy of a tether process: rare collections while starting, normal after, and
in a server full collections that walk only what is new, with deep ones for released cycles."""

from __future__ import annotations

import asyncio
import gc
import weakref
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.server.support import Client, InProcess, point_at, released
from tether.runtime.session import gc_policy
from tether.server.runtime import ConversationRuntime
from tether.testing.fake_provider import FakeProvider


@pytest.fixture
def restore_gc() -> Iterator[None]:
    thresholds = gc.get_threshold()
    state = dict(gc_policy._state)
    yield
    serving = gc_policy._serving
    if serving is not None:
        gc.callbacks.remove(serving.after_collection)
        gc_policy._serving = None
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


class _Node:
    """A cycle's member the tests can watch die (weakref) and find among the collector's."""

    def __init__(self) -> None:
        self.me = self


def _young(obj: object) -> bool:
    """Whether the collector still walks `obj` (it is in a generation, not frozen)."""
    return any(o is obj for g in range(3) for o in gc.get_objects(generation=g))


def test_serving_freezes_what_any_collection_leaves(restore_gc: None) -> None:
    gc_policy._state["done"] = False
    gc_policy.serving()
    assert gc.get_threshold() == gc_policy._DEFAULT_THRESHOLDS  # start-up's rare collections end
    gc_policy.serving()  # once per process: one callback
    assert gc.callbacks.count(gc_policy._serving.after_collection) == 1  # type: ignore[union-attr]
    node = _Node()
    assert _young(node)
    gc.collect(0)
    assert not _young(node)  # frozen: no later collection walks it
    gc.collect()
    assert node.me is node


def _frozen_garbage_cycle() -> weakref.ref[_Node]:
    """In a serving process: a cycle that survived a collection (frozen), then became garbage."""
    gc_policy.serving()
    node = _Node()
    gc.collect(0)  # survives, frozen
    return weakref.ref(node)


def test_a_frozen_cycle_waits_for_the_deep_collection_released_runtimes_trigger(
    restore_gc: None,
) -> None:
    gone = _frozen_garbage_cycle()
    gc.collect()
    assert gone() is not None  # garbage, but frozen: a full collection leaves it
    for _ in range(gc_policy.DEEP_AFTER_RELEASES - 1):
        gc_policy.released(live=0)
    gc.collect()
    assert gone() is not None
    gc_policy.released(live=0)  # the 64th: a deep collection, now
    assert gone() is None
    serving = gc_policy._serving
    assert serving is not None and serving.deep_collections == 1 and serving.released == 0
    assert not serving.deep_pending


def test_the_deep_collection_waits_for_as_many_releases_as_live_conversations(
    restore_gc: None,
) -> None:
    gone = _frozen_garbage_cycle()
    for _ in range(199):
        gc_policy.released(live=200)  # its pause grows with the 200 live ones: not yet
    assert gone() is not None
    gc_policy.released(live=200)
    assert gone() is None


def test_a_deep_collection_is_due_by_time_at_the_next_full_collection(
    restore_gc: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    gone = _frozen_garbage_cycle()
    gc.collect()
    assert gone() is not None
    monkeypatch.setattr(gc_policy, "DEEP_EVERY_S", 0.0)
    gc.collect()  # ends finding a deep collection due: unfreezes everything
    serving = gc_policy._serving
    assert serving is not None and serving.deep_pending
    gc.collect(0)  # a young collection does not freeze it back
    assert serving.deep_pending
    monkeypatch.setattr(gc_policy, "DEEP_EVERY_S", 300.0)
    gc.collect()  # the deep one
    assert gone() is None
    assert serving.deep_collections == 1 and not serving.deep_pending


def test_released_outside_a_server_does_nothing(restore_gc: None) -> None:
    assert gc_policy._serving is None
    gc_policy.released(live=0)
    assert gc_policy._serving is None


def test_a_server_frees_the_runtimes_it_released(
    restore_gc: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The whole chain in a real (in-process) App Server: a conversation is released, that
    triggers the deep collection, and the runtime, frozen while it served, is gone."""
    project = tmp_path / "project"
    project.mkdir()
    monkeypatch.setattr(gc_policy, "DEEP_AFTER_RELEASES", 1)
    gc_policy.serving()

    async def scenario() -> weakref.ref[ConversationRuntime]:
        async with InProcess(project, idle_release_after=0) as srv:
            assert srv.server is not None
            async with srv.connect() as ws:
                c = Client(ws)
                runtime = (await c.start(project))["runtime"]
                await c.say(runtime, "hi")
                await c.of_type("turn_finished")
                gone = weakref.ref(next(iter(srv.server.runtimes.values())))
                gc.collect(0)
                assert not _young(gone())  # frozen while it serves
            await released(srv, (runtime["agent_id"], runtime["conversation_id"]))
            assert srv.server.runtimes == {}
            return gone

    with FakeProvider([{"text": "hello"}]) as fake:
        point_at(fake, monkeypatch)
        gone = asyncio.run(scenario())
    assert gone() is None
    assert gc_policy._serving is not None and gc_policy._serving.deep_collections >= 1
