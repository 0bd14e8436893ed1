"""Keeping a conversation's lease while its turn runs: a daemon thread renews it every third of
its ttl and, the moment a renewal is refused (the lease moved while this worker was stopped or
cut off), says so once through that lease's `on_lost`, so the runtime aborts the turn instead of
finding out at its next write. The thread is one per worker, not per lease: each round renews
every lease the worker holds in one statement."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass

from tether.backends.postgres.connection import PgStoreUnavailable
from tether.backends.postgres.leases import ConversationLeases, Lease

THREAD_NAME = "lease-keeper"


@dataclass(frozen=True, slots=True)
class _Kept:
    lease: Lease
    on_lost: Callable[[str], None] | None


class LeaseKeeper:
    """Renews the leases given to `keep` until each is `drop`ped or lost, or the keeper stops.
    `lost` maps each conversation whose lease could not be kept to the reason (its `on_lost`
    is called once, from the keeper's thread, with it)."""

    def __init__(self, leases: ConversationLeases, every_s: float | None = None) -> None:
        self.leases = leases
        self.every_s = leases.ttl_s / 3 if every_s is None else every_s
        if self.every_s <= 0:
            raise ValueError(f"lease renewal interval must be positive, got {self.every_s}")
        self.lost: dict[str, str] = {}
        self._kept: dict[str, _Kept] = {}
        self._lock = threading.Lock()  # guards _kept and lost
        # Held for a whole renewal round: `drop` waits on it, so no renewal of a dropped lease
        # (extending it again after its release) is still in flight when `drop` returns.
        # Reentrant: an `on_lost` may drop another lease.
        self._round = threading.RLock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=THREAD_NAME, daemon=True)

    @property
    def started(self) -> bool:
        return self._thread.ident is not None

    def start(self) -> LeaseKeeper:
        self._thread.start()
        return self

    def keep(self, lease: Lease, on_lost: Callable[[str], None] | None = None) -> None:
        """Renew `lease` from the next round on (replacing an older lease of its conversation)."""
        with self._lock:
            self._kept[lease.conversation] = _Kept(lease, on_lost)
            self.lost.pop(lease.conversation, None)

    def drop(self, conversation: str, token: int | None = None) -> Lease | None:
        """Stop renewing the conversation's lease (to release it, say; only while it is the one
        of `token`, when given); the lease it renewed. Waits for a renewal round in flight (one
        round trip), so call it off the event loop."""
        with self._round, self._lock:
            kept = self._kept.get(conversation)
            if kept is None or (token is not None and kept.lease.token != token):
                return None
            del self._kept[conversation]
        return kept.lease

    def held(self) -> list[Lease]:
        """The leases being renewed now."""
        with self._lock:
            return [k.lease for k in self._kept.values()]

    def stop(self) -> list[Lease]:
        """Stop the thread (waiting for a round in flight); the leases it was renewing."""
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join()
        with self._lock:
            leases = [k.lease for k in self._kept.values()]
            self._kept.clear()
        return leases

    def _run(self) -> None:
        while not self._stop.wait(self.every_s):
            with self._round:
                if self._stop.is_set():
                    return
                self.renew_once()

    def renew_once(self) -> None:
        """One round: every kept lease renewed in one statement; the ones refused are lost."""
        with self._lock:
            kept = list(self._kept.values())
        if not kept:
            return
        try:
            refused = self.leases.renew_all([k.lease for k in kept])
        except PgStoreUnavailable:
            # Not lost yet: a lease holds until its expiry, and the next round (on a new
            # session) may still be in time; a fenced write decides in any case.
            return
        for k in kept:
            if k.lease.conversation in refused:
                self._lose(k, str(refused[k.lease.conversation]))

    def _lose(self, kept: _Kept, why: str) -> None:
        conversation = kept.lease.conversation
        with self._lock:
            if self._kept.get(conversation) is not kept:  # dropped or replaced meanwhile
                return
            del self._kept[conversation]
            self.lost[conversation] = why
        if kept.on_lost is not None:
            kept.on_lost(why)
