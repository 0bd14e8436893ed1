"""Waking workers: every commit that enqueues inputs notifies `tether_inputs` with the
conversation (`input_queue.py`), so an input sent to any worker reaches the worker holding the
conversation's lease; turn events and commands notify `tether_events` and `tether_commands`
(`events.py`). A `FleetListener` hears them on its own connection, which its thread may also use
to read what a notification names."""

from __future__ import annotations

from typing import Any

from tether.backends.postgres.connection import connect, store_errors
from tether.backends.postgres.input_queue import INPUTS_CHANNEL


class FleetListener:
    """LISTENs on a dedicated connection (a LISTEN holds no lock and needs no transaction)."""

    doing = "wait for notifications"

    def __init__(self, url: str, channels: tuple[str, ...] = (INPUTS_CHANNEL,)) -> None:
        self.url = url
        self.channels = channels
        self._conn: Any = None

    @property
    def conn(self) -> Any:
        """The listening connection (autocommit), for reads on the listener's own thread."""
        self.start()
        return self._conn

    def start(self) -> None:
        """Listen from now on: notifications committed after this returns are heard."""
        if self._conn is None:
            conn = connect(self.url)
            try:
                with store_errors(self.url, "listen for notifications"):
                    for channel in self.channels:
                        conn.execute(f"LISTEN {channel}")
            except BaseException:
                conn.close()
                raise
            self._conn = conn

    def heard(self, timeout: float) -> list[tuple[str, str]]:
        """(channel, payload) of what was notified within `timeout` seconds (returning at the
        first), plus any already waiting, in arrival order. Empty when none came."""
        self.start()
        heard: list[tuple[str, str]] = []
        try:
            with store_errors(self.url, self.doing):
                for note in self._conn.notifies(timeout=timeout, stop_after=1):
                    heard.append((note.channel, note.payload))
                for note in self._conn.notifies(timeout=0):  # what arrived together
                    heard.append((note.channel, note.payload))
        except BaseException:
            # The next wait listens on a new connection; what was notified in between is lost,
            # so after this error the caller looks at the tables itself (`queued`, `orphaned`).
            self.close()
            raise
        return heard

    def close(self) -> None:
        if self._conn is not None:
            self._conn.close()
            self._conn = None


class InputListener(FleetListener):
    """A `FleetListener` on `tether_inputs` only, answering with the conversations heard."""

    doing = "wait for inputs"

    def wait(self, timeout: float) -> set[str]:
        return {payload for _, payload in self.heard(timeout)}
