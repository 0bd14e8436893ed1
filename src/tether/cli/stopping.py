"""Why a headless run stopped before its turn ended (a signal, or the effect store failing), and
how that is told: the message the client sees, and the exit code.

SIGINT, SIGTERM and SIGHUP all do what Ctrl-C does (the running tool's process group is stopped,
a waiting MCP request cancelled and MCP servers still starting given up on, every tool call gets
its answer in the transcript) and exit 128+N, named in the message:
"Interrupted by SIGTERM". A SIGHUP means the terminal is gone, so writing the message may fail;
the exit code still says what happened.
"""

from __future__ import annotations

import asyncio
import signal
from dataclasses import replace
from typing import Any

from tether.protocol.turns import TurnError

STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
# What the turn engine says for every abort, whoever asked for it.
_ENGINE_INTERRUPT = "Interrupted by SIGINT"


class RunStop:
    """The first reason `abort` was set, if any; retitles the engine's interrupt to match."""

    def __init__(self, abort: asyncio.Event) -> None:
        self.abort = abort
        self.signum: int | None = None
        self.failure: str | None = None  # the effect store became unavailable

    def install(self, loop: asyncio.AbstractEventLoop) -> None:
        for sig in STOP_SIGNALS:
            loop.add_signal_handler(sig, self.on_signal, sig)

    def on_signal(self, signum: int) -> None:
        if self.signum is None and self.failure is None:
            self.signum = signum
        self.abort.set()

    def on_store_unavailable(self, message: str) -> None:
        if self.failure is None and self.signum is None:
            self.failure = message
        self.abort.set()

    @property
    def stopped(self) -> bool:
        return self.signum is not None or self.failure is not None

    @property
    def message(self) -> str:
        if self.failure is not None:
            return self.failure[:1].upper() + self.failure[1:]
        if self.signum is not None:
            return f"Interrupted by {signal.Signals(self.signum).name}"
        return _ENGINE_INTERRUPT

    def retitle(self, event: Any) -> Any:
        """The engine's interrupt error, said as what actually stopped the run."""
        if not (isinstance(event, TurnError) and event.message == _ENGINE_INTERRUPT and self.stopped):
            return event
        if self.failure is not None:
            return replace(event, message=self.message, stop_reason="error")
        return replace(event, message=self.message)

    def exit_code(self, code: int) -> int:
        """1 when the store failed, 128+N after signal N (130, 143, 129), else `code`."""
        if self.failure is not None:
            return 1
        if self.signum is not None and code in (1, 130):  # a turn that ended anyway is a success
            return 128 + self.signum
        return code
