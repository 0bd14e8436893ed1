"""A fleet worker's memory follows its active conversations (issue 31, "a soak with memory flat"):
after conversations are run, left and released, what the worker still holds for them is only
the bounded `Kept` of each (`server/idle_release.py`, at most `KEPT_RUNTIMES`); no lease, no
remembered item id, no transcript view, no runtime. Counted as live Python objects by type
after a full collection, between two equal batches of conversations: a type that grows with
the conversations run is a leak (the RSS soak of `bench/fleet.py --soak` measures the same
with the allocator's noise). Three batches: a type leaks when it grows by half a batch or more
between each two counts, not once (a loaded machine leaves some work of the last batch still
in flight at one count: its futures, weak references and bound methods)."""

from __future__ import annotations

import asyncio
import gc
from collections import Counter
from pathlib import Path

import pytest

from tests.server.support import Client, InProcess, provider_env
from tether.server.fleet_leases import UNUSED_LEASE_S
from tether.server.idle_release import KEPT_RUNTIMES
from tether.testing.fake_provider import FakeProvider

BATCH = 40
# What a released conversation leaves by design (its `Kept`: the scope, its folder, the
# answers to its inputs' keys), bounded by KEPT_RUNTIMES.
KEPT_TYPES = {"Kept", "RuntimeScope", "InputAnswer", "PosixPath", "tuple", "list"}
# asyncio keeps a cancelled timer (a released runtime's idle timer, a closed connection's
# keepalive sleep), with its Context, in the loop's heap until its time comes or the loop purges
# them (when over half the heap and over 100 are cancelled): bounded by asyncio, not by us.
LOOP_TYPES = {"TimerHandle", "Context"}


def _live() -> Counter[str]:
    gc.unfreeze()  # the server's collector freezes survivors (runtime/session/gc_policy.py)
    gc.collect()
    return Counter(type(o).__qualname__ for o in gc.get_objects())


def test_conversations_run_and_released_leave_only_their_bounded_kept_state(
    tmp_path: Path, pg_url: str, monkeypatch: pytest.MonkeyPatch,
) -> None:
    project = tmp_path / "project"
    project.mkdir()
    with FakeProvider([{"text": "ok"}] * (3 * BATCH * 2 + 2)) as fake:
        for key, value in provider_env(fake.url).items():
            monkeypatch.setenv(key, value)
        monkeypatch.setenv("TETHER_HOME", str(tmp_path / "home"))

        async def scenario() -> tuple[list[Counter[str]], dict[str, int]]:
            async with InProcess(project, store=pg_url, idle_release_after=0) as srv:
                assert srv.server is not None
                ctx = srv.server.ctx
                async with srv.connect() as ws:
                    agent = (await Client(ws).start(project))["runtime"]["agent_id"]

                async def batch(tag: str) -> None:
                    for n in range(BATCH):
                        async with srv.connect() as ws:
                            c = Client(ws)
                            runtime = (await c.start(project, agent_id=agent))["runtime"]
                            for t in range(2):
                                rid = f"{tag}-{n}-{t}"
                                await c.say(runtime, "hello", request_id=rid)
                                await c.of_type("turn_finished", request_id=rid)

                async def settled() -> Counter[str]:
                    # Released at once (grace 0); their leases after UNUSED_LEASE_S + a sweep.
                    deadline = asyncio.get_running_loop().time() + UNUSED_LEASE_S + 20
                    while srv.server.runtimes or ctx.fleet.held:  # type: ignore[union-attr]
                        assert asyncio.get_running_loop().time() < deadline, (
                            f"still held: {len(srv.server.runtimes)} runtimes,"  # type: ignore[union-attr]
                            f" {len(ctx.fleet.held)} leases")
                        await asyncio.sleep(0.2)
                    await asyncio.sleep(0.5)  # the released runtimes' close tasks
                    fake.requests.clear()  # the provider stand-in's own record (same process)
                    return _live()

                counts = []
                for tag in ("a", "b", "c"):
                    await batch(tag)
                    counts.append(await settled())
                held = {"seen": len(ctx.fleet.seen), "unused": len(ctx.fleet._unused),
                        "transcripts": len(ctx.store._transcripts),
                        "released": len(ctx.released), "followers": len(ctx.fleet.events.followers)}
                return counts, held

        counts, held = asyncio.run(scenario())
    assert held == {"seen": 0, "unused": 0, "transcripts": 0, "released": 3 * BATCH + 1,
                    "followers": 0}
    assert held["released"] <= KEPT_RUNTIMES
    first, second, third = counts
    grew = {kind: (second[kind] - first[kind], third[kind] - second[kind]) for kind in third
            if min(second[kind] - first[kind], third[kind] - second[kind]) >= BATCH // 2
            and kind not in KEPT_TYPES | LOOP_TYPES}
    assert grew == {}, f"live objects that grow with the conversations run: {grew}"
    assert second["Kept"] - first["Kept"] == third["Kept"] - second["Kept"] == BATCH
