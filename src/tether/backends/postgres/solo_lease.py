"""One process's hold on the conversations it runs on the PostgreSQL store outside a server
(`tether -p --store postgresql://…`, which is also how a fleet's subagents run): each
conversation's lease is taken on first use (refused, naming the holder, while another live
worker has it), renewed by a `LeaseKeeper` for the whole run, and given up when the run ends.

A lease lost mid-run (the process was stopped past its ttl and another worker took the
conversation) is never taken back silently: the stale lease stays the one handed out, so the
run's next fenced write is refused (`LeaseLost`) instead of interleaving with the new holder's."""

from __future__ import annotations

import threading
from collections.abc import Callable

from tether.backends.postgres.connection import PgSession, PgStoreUnavailable
from tether.backends.postgres.keeper import LeaseKeeper
from tether.backends.postgres.leases import DEFAULT_TTL_S, ConversationLeases, Lease
from tether.errors import ConversationBusy


class HeldElsewhere(ConversationBusy):
    """Another live worker holds the conversation's lease: it is running there."""

    def __init__(self, conversation: str, holder: str | None) -> None:
        agent_id, _, conversation_id = conversation.partition("/")
        by = f"worker {holder}" if holder else "another worker"
        super().__init__(
            conversation_id,
            f"conversation {conversation_id} (agent {agent_id}) is running elsewhere: {by} "
            "holds it in the PostgreSQL store. Run again once that worker has let it go (a "
            "server keeps an idle conversation about a minute by default), or start a new "
            f"one with --agent {agent_id} --new",
        )
        self.holder = holder


class SoloLeases:
    """The leases of the worker `session.worker`, for one run. `lease_of` is the
    `PgConversationStore`'s: it takes the conversation's lease on its first write."""

    def __init__(
        self, session: PgSession, *, ttl_s: float = DEFAULT_TTL_S,
        on_lost: Callable[[str, str], None] | None = None,
    ) -> None:
        self.leases = ConversationLeases(session, ttl_s)
        self.keeper = LeaseKeeper(self.leases)
        self.on_lost = on_lost  # (conversation, why), from the keeper's thread
        self._held: dict[str, Lease] = {}
        self._lock = threading.Lock()

    def take(self, conversation: str) -> Lease:
        """The conversation's lease (`store_api.conversation_ref`), taken now if this run does
        not hold it yet; `HeldElsewhere` while another live worker does."""
        with self._lock:
            lease = self._held.get(conversation)
            if lease is not None:
                return lease  # also when lost: its writes are then refused, never re-taken
            lease = self.leases.acquire(conversation)
            if lease is None:
                current = self.leases.current(conversation)
                raise HeldElsewhere(conversation, current[0] if current else None)
            self._held[conversation] = lease
            if not self.keeper.started:
                self.keeper.start()
            self.keeper.keep(lease, self._lost_callback(conversation))
            return lease

    def lease_of(self, conversation: str) -> Lease | None:
        return self.take(conversation)

    def held(self) -> list[Lease]:
        with self._lock:
            return list(self._held.values())

    def close(self) -> None:
        """Stop renewing and give every lease up (a conversation is free for a server worker
        at once, not after the ttl). An unreachable store is left to the ttl and to the
        session's end, which frees the leases of a worker that is gone anyway."""
        self.keeper.stop()
        with self._lock:
            held, self._held = list(self._held.values()), {}
        try:
            self.leases.release_all(held)
        except PgStoreUnavailable:
            pass

    def _lost_callback(self, conversation: str) -> Callable[[str], None] | None:
        if self.on_lost is None:
            return None
        tell = self.on_lost
        return lambda why: tell(conversation, why)


__all__ = ["HeldElsewhere", "SoloLeases"]
