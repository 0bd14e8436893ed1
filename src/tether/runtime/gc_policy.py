"""How the garbage collector runs in a `tether` process: rarely during start-up, normally after.

Start-up imports ~300 modules and builds the session, and nearly all of it lives as long as the
process. Collections during start-up walk those objects again and again for nothing (~15 ms of a
headless turn on the project machine), and the collection at interpreter exit walks them once more
(~20 ms). So `entry()` raises the thresholds, `startup_done()` freezes what start-up built (later
collections skip it, as in a long-running server) and restores the defaults, and `exiting()`
freezes everything just before the interpreter finalizes. Measure: bench/startup.py.
"""

from __future__ import annotations

import gc

_DEFAULT_THRESHOLDS = gc.get_threshold()
_STARTUP_THRESHOLDS = (100_000, 50, 100)  # a young collection per 100k net allocations
_state = {"done": False}


def starting() -> None:
    gc.set_threshold(*_STARTUP_THRESHOLDS)


def startup_done() -> None:
    """Once per process, when the session is built: freeze it, collect normally from here on."""
    if _state["done"]:
        return
    _state["done"] = True
    gc.freeze()
    gc.set_threshold(*_DEFAULT_THRESHOLDS)


def exiting() -> None:
    """Everything alive now dies with the process; the exit collection need not walk it."""
    gc.freeze()
