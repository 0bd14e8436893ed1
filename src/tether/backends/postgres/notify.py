"""Waking a conversation's owner: every commit that enqueues inputs notifies `tether_inputs`
with the conversation (`input_queue.py`); an `InputListener` on its own connection hears it, so
an input sent to any worker reaches the worker holding the conversation's lease."""

from __future__ import annotations

from typing import Any

from tether.backends.postgres.connection import connect, store_errors
from tether.backends.postgres.input_queue import INPUTS_CHANNEL


class InputListener:
    """LISTENs on a dedicated connection (a LISTEN holds no lock and needs no transaction)."""

    def __init__(self, url: str) -> None:
        self.url = url
        self._conn: Any = None

    def start(self) -> None:
        """Listen from now on: notifications committed after this returns are heard."""
        if self._conn is None:
            self._conn = connect(self.url)
            with store_errors(self.url, "listen for inputs"):
                self._conn.execute(f"LISTEN {INPUTS_CHANNEL}")

    def wait(self, timeout: float) -> set[str]:
        """Conversations with new inputs: those heard within `timeout` seconds (returning at
        the first), plus any already waiting. Empty when none came."""
        self.start()
        heard: set[str] = set()
        try:
            with store_errors(self.url, "wait for inputs"):
                for note in self._conn.notifies(timeout=timeout, stop_after=1):
                    heard.add(note.payload)
                for note in self._conn.notifies(timeout=0):  # what arrived together
                    heard.add(note.payload)
        except BaseException:
            # The next wait listens on a new connection; what was notified in between is lost,
            # so after this error the caller looks at the queue itself (`queued`, `orphaned`).
            self.close()
            raise
        return heard

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None
