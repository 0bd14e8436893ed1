"""A measuring probe loaded into each `tether server --store` worker of `bench/fleet.py
--loop-probe` (through a generated `sitecustomize.py`): how long the event loop's callbacks run
(every `Handle._run` timed: a long one blocks every conversation of the worker), and how long
each store call that a turn makes takes and on which thread (the loop's, or another), written
as JSON to `$TETHER_LOOP_PROBE_DIR/<pid>.json` every few seconds and at exit.

The store calls timed: the transcript append (`PgTranscript._write`), the effect checkpoint
writes (`PgCheckpointStore.record_before`, `_swap`), the input queue's commits and marks, and
the lease calls (`ConversationLeases.*`, `renew_all` being the keeper's round).

With `TETHER_LOOP_PROBE_TRACEMALLOC=1` it also traces allocations and writes, at each dump,
what grew most since the first dump after warm-up (by file and line, the 25 largest), to tell a
leak from data the worker is meant to hold (a conversation's history grows with it)."""

from __future__ import annotations

import asyncio.events
import atexit
import functools
import json
import os
import threading
import time
from typing import Any

EDGES_MS = (0.1, 0.5, 1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0)
DUMP_EVERY_S = 5.0


class Tally:
    """Durations in ms: count, total, max, a histogram over `EDGES_MS`, and the slowest few."""

    def __init__(self, every: int = 1) -> None:
        self.every = every
        self.n = 0
        self.total = 0.0
        self.max = 0.0
        self.buckets = [0] * (len(EDGES_MS) + 1)
        self.samples: list[float] = []  # every `every`th, for percentiles

    def add(self, ms: float) -> None:
        self.n += 1
        self.total += ms
        self.max = max(self.max, ms)
        for i, edge in enumerate(EDGES_MS):
            if ms < edge:
                self.buckets[i] += 1
                break
        else:
            self.buckets[-1] += 1
        if self.n % self.every == 0:
            self.samples.append(ms)

    def summary(self) -> dict[str, Any]:
        s = sorted(self.samples)
        def pct(q: float) -> float:
            return round(s[min(len(s) - 1, int(q * len(s)))], 3) if s else 0.0

        return {"n": self.n, "total_ms": round(self.total, 1), "max_ms": round(self.max, 3),
                "p50_ms": pct(0.5), "p99_ms": pct(0.99), "buckets_ms<": dict(zip([*map(str, EDGES_MS), "inf"],
                                                            self.buckets, strict=True))}


LOOP = Tally(every=16)  # many: percentiles from a sample
SLOW_MS = 5.0
SLOWEST: list[tuple[float, float, str]] = []  # (ms, seconds since start, what ran), 20 kept
STARTED = time.perf_counter()
CALLS: dict[str, Tally] = {}
LOCK = threading.Lock()
MAIN = threading.main_thread()


def _timed_run(original: Any) -> Any:
    @functools.wraps(original)
    def run(self: Any) -> None:
        t0 = time.perf_counter()
        try:
            original(self)
        finally:
            ms = (time.perf_counter() - t0) * 1000
            LOOP.add(ms)
            if ms >= SLOW_MS:
                _note_slow(ms, t0, self)
    return run


def _note_slow(ms: float, t0: float, handle: Any) -> None:
    what = repr(getattr(handle, "_callback", handle))[:160]
    coro = getattr(getattr(handle._callback, "__self__", None), "get_coro", None)
    if coro is not None:
        c = coro()
        what = getattr(c, "__qualname__", what)
        frame = getattr(c, "cr_frame", None)
        if frame is not None:
            what += f" ({frame.f_code.co_filename.rsplit('/src/', 1)[-1]}:{frame.f_lineno})"
    with LOCK:
        SLOWEST.append((round(ms, 2), round(t0 - STARTED, 1), what))
        SLOWEST.sort(reverse=True)
        del SLOWEST[20:]


def _timed_call(name: str, original: Any) -> Any:
    @functools.wraps(original)
    def call(*args: Any, **kwargs: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return original(*args, **kwargs)
        finally:
            ms = (time.perf_counter() - t0) * 1000
            where = "loop" if threading.current_thread() is MAIN else "thread"
            with LOCK:
                CALLS.setdefault(f"{name} [{where}]", Tally()).add(ms)
    return call


def _wrap(cls: Any, names: tuple[str, ...], label: str) -> None:
    for name in names:
        setattr(cls, name, _timed_call(f"{label}.{name}", getattr(cls, name)))


BASELINE: list[Any] = []  # the tracemalloc snapshot growth is measured from


def _growth() -> list[str]:
    import tracemalloc

    if not tracemalloc.is_tracing():
        return []
    snap = tracemalloc.take_snapshot().filter_traces(
        [tracemalloc.Filter(False, tracemalloc.__file__)])
    if not BASELINE:
        BASELINE.append(snap)
        return []
    return [str(d) for d in snap.compare_to(BASELINE[0], "lineno")[:25]]


GREW: list[list[str]] = [[]]  # the last growth listing (the exit's dump keeps it: shutdown frees)


def dump(at_exit: bool = False) -> None:
    out = os.environ.get("TETHER_LOOP_PROBE_DIR")
    if not out:
        return
    if not at_exit:
        GREW[0] = _growth()
    grew = GREW[0]
    with LOCK:
        data = {"grew_since_warm_up": grew,"loop_callbacks": LOOP.summary(), "slowest_callbacks": list(SLOWEST),
                "store_calls": {k: t.summary() for k, t in sorted(CALLS.items())}}
    path = os.path.join(out, f"{os.getpid()}.json")
    with open(path + ".tmp", "w") as f:
        json.dump(data, f, indent=1)
    os.replace(path + ".tmp", path)


def _dumping() -> None:
    every = DUMP_EVERY_S
    if os.environ.get("TETHER_LOOP_PROBE_TRACEMALLOC"):
        every = 30.0  # a snapshot of every traced block is slow
        time.sleep(every)  # warm-up: the runtimes built
    while True:
        dump()
        time.sleep(every)


def install() -> None:
    from tether.backends.postgres.checkpoints import PgCheckpointStore
    from tether.backends.postgres.input_queue import PgInputQueue
    from tether.backends.postgres.leases import ConversationLeases
    from tether.backends.postgres.transcripts import PgTranscript

    asyncio.events.Handle._run = _timed_run(asyncio.events.Handle._run)  # type: ignore[method-assign]
    _wrap(PgTranscript, ("_write",), "transcript")
    _wrap(PgCheckpointStore, ("record_before", "_swap"), "checkpoint")
    _wrap(PgInputQueue, ("accept_many", "mark"), "inputs")
    _wrap(ConversationLeases, ("acquire", "renew_all", "queued", "mark", "orphaned",
                               "release_all"), "leases")
    if os.environ.get("TETHER_LOOP_PROBE_TRACEMALLOC"):
        import tracemalloc

        tracemalloc.start(1)
    atexit.register(dump, at_exit=True)
    threading.Thread(target=_dumping, name="loop-probe", daemon=True).start()
