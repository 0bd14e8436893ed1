"""How the garbage collector runs in a `tether` process: rarely during start-up, normally after,
and in the App Server without full collections that stop every conversation at once.

Start-up imports ~300 modules and builds the session, and nearly all of it lives as long as the
process. Collections during start-up walk those objects again and again for nothing (~15 ms of a
headless turn on the project machine), and the collection at interpreter exit walks them once more
(~20 ms). So `starting()` raises the thresholds, `startup_done()` freezes what start-up built (later
collections skip it, as in a long-running server) and restores the defaults, and `exiting()`
freezes everything just before the interpreter finalizes. Measure: bench/startup.py.

A server (`serving()`) holds every open conversation's history and every turn in flight, and
CPython's collections of the older generations walk them: with 200 conversations a full
collection grew to 70-200 ms and a middle one to 5-15 ms, and each delayed all 200 turns in
flight (issue 20 item 4). So there, whatever survives any collection is frozen at once
(`_Serving.after_collection`): no later collection walks it again, and every collection walks
only what was allocated since the previous one (under 1 ms). Frozen objects are still freed by
reference counting; only garbage *cycles* among them wait, for a deep collection that unfreezes
everything and walks it. Turns leave few (~1 object per turn in bench/server.py); released
runtimes are where they come from, so `released()` runs one, from the event loop, once as many
conversations were released as remain live (at least `DEEP_AFTER_RELEASES`), and one is due
`DEEP_EVERY_S` after the last, at the next full collection. Measure: bench/server.py (and its
`--soak`).
"""

from __future__ import annotations

import gc
import time  # builtin; `typing` stays out: `tether --version` would be the first to import it

_DEFAULT_THRESHOLDS = gc.get_threshold()
_STARTUP_THRESHOLDS = (100_000, 50, 100)  # a young collection per 100k net allocations
DEEP_EVERY_S = 300.0
DEEP_AFTER_RELEASES = 64
_state = {"done": False}


class _Serving:
    """The server's collector state: when the last deep collection ended, and what since."""

    def __init__(self) -> None:
        self.last_deep = time.monotonic()
        self.released = 0
        self.deep_pending = False  # unfrozen: the next full collection walks everything
        self.deep_collections = 0

    def after_collection(self, phase: str, info: dict[str, int]) -> None:
        """A gc callback: when a collection ended, freeze its survivors, so that no later
        collection walks them again; or, when a deep collection is due by time, unfreeze
        everything instead (the next full collection is then the deep one)."""
        if phase != "stop":
            return
        generation = info.get("generation")
        if self.deep_pending:
            if generation != 2:
                return  # wait for the full collection, which walks what was unfrozen
            self.deep_pending = False
            self.deep_collections += 1
            self.last_deep = time.monotonic()
            self.released = 0
        elif generation == 2 and time.monotonic() - self.last_deep >= DEEP_EVERY_S:
            self.unfreeze()
            return
        gc.freeze()

    def unfreeze(self) -> None:
        self.deep_pending = True
        gc.unfreeze()

    def deep(self) -> None:
        """A deep collection now (outside the collector: from the event loop)."""
        self.unfreeze()
        gc.collect()  # its end (`after_collection`) counts it and freezes the survivors


_serving: _Serving | None = None


def starting() -> None:
    gc.set_threshold(*_STARTUP_THRESHOLDS)


def startup_done() -> None:
    """Once per process, when the session is built: freeze it, collect normally from here on."""
    if _state["done"]:
        return
    _state["done"] = True
    gc.freeze()
    gc.set_threshold(*_DEFAULT_THRESHOLDS)


def serving() -> None:
    """Once per server process, after start-up: collections walk only what is new."""
    global _serving
    startup_done()
    if _serving is not None:
        return
    # Walks nothing (start-up is frozen), but bases CPython's rule "a full collection only once
    # the old generation grew by a quarter" on that empty generation, not on start-up's heap:
    # full collections then come every few middle ones, each cheap, and a deep one falls due.
    gc.collect()
    _serving = _Serving()
    gc.callbacks.append(_serving.after_collection)


def released(live: int) -> None:
    """A conversation runtime was let go and `live` remain: collect deeply once as many were
    released since the last deep collection as remain (at least `DEEP_AFTER_RELEASES`).

    A released runtime's history is garbage held in cycles, which only a deep collection frees;
    its pause grows with the live conversations, so waiting for as many releases keeps its cost
    per released conversation constant and the uncollected ones at most as many as the live."""
    if _serving is None:
        return
    _serving.released += 1
    if _serving.released >= max(DEEP_AFTER_RELEASES, live):
        _serving.deep()


def exiting() -> None:
    """Everything alive now dies with the process; the exit collection need not walk it."""
    gc.freeze()
