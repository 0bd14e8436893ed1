"""Keeping a conversation's lease while its turn runs: a daemon thread renews it every third of
its ttl and, the moment a renewal is refused (the lease moved while this worker was stopped or
cut off), says so once through `on_lost`, so the runtime aborts the turn instead of finding out
at its next write."""

from __future__ import annotations

import threading
from collections.abc import Callable

from tether.backends.postgres.connection import LeaseLost, PgStoreUnavailable
from tether.backends.postgres.leases import ConversationLeases, Lease


class LeaseKeeper:
    """Renews `lease` until `stop()`; `lost` is set (and `on_lost` called once, from the
    keeper's thread, with the reason) when it could not be kept."""

    def __init__(
        self, leases: ConversationLeases, lease: Lease,
        on_lost: Callable[[str], None] | None = None,
    ) -> None:
        self.leases = leases
        self.lease = lease
        self.on_lost = on_lost
        self.lost: str | None = None
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._run, name=f"lease-keeper {lease.conversation}", daemon=True
        )

    def start(self) -> LeaseKeeper:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join()

    def _run(self) -> None:
        every = self.leases.ttl_s / 3
        while not self._stop.wait(every):
            try:
                self.leases.renew(self.lease)
            except LeaseLost as exc:
                self._lose(str(exc))
                return
            except PgStoreUnavailable:
                # Not lost yet: the lease holds until its expiry, and the next renewal (on a
                # new session) may still be in time; a fenced write decides in any case.
                continue

    def _lose(self, why: str) -> None:
        self.lost = why
        if self.on_lost is not None:
            self.on_lost(why)
