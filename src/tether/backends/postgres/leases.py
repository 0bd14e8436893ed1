"""Conversation leases with fencing tokens: a conversation runs on one worker at a time, and
every write its holder makes is conditional on its token still being current.

A lease is taken when it is free, expired (its holder stopped renewing: a SIGSTOPped worker), or
its holder's database session is gone (`kill -9`: no waiting for the clock). Each change of
holder increments the conversation's token (never reset, so tokens only grow) and, in the same
transaction, settles what the previous holder left: an input it had `started` becomes
`interrupted` (its outcome is unknown; it is never run again), its `queued` ones pass to the new
holder, which runs each once. A fenced write reads the lease row `FOR SHARE` before writing, so
it either commits before a takeover or sees the new token and is refused (`LeaseLost`); a worker
paused inside such a transaction is cut off by `idle_in_transaction_session_timeout`.
Transcript rows are append-only, ordered by (conversation, seq), and appended only this way.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tether.backends.postgres import events, logs
from tether.backends.postgres.connection import LeaseLost, PgSession
from tether.backends.postgres.input_queue import COLUMNS, PENDING, TERMINAL, RowCodec, T
from tether.backends.postgres.presence import ALIVE
from tether.errors import StoreError

DEFAULT_TTL_S = 15.0


@dataclass(frozen=True, slots=True)
class Lease:
    """This worker's hold on a conversation: valid while `token` is the conversation's current
    one. `interrupted` names the inputs its taking found started by an earlier holder;
    `event_seq` is the last turn event any holder published (`events.py`), where this one's go on."""

    conversation: str
    holder: str
    token: int
    interrupted: tuple[str, ...] = ()
    event_seq: int = 0


class ConversationLeases:
    """Leases and fenced writes for the worker `session.worker`."""

    def __init__(self, session: PgSession, ttl_s: float = DEFAULT_TTL_S) -> None:
        if ttl_s <= 0:
            raise ValueError(f"lease ttl must be positive, got {ttl_s}")
        self.session = session
        self.worker = session.worker
        self.ttl_s = ttl_s

    # --- the lease ----------------------------------------------------------------------------

    def acquire(self, conversation: str, anew: bool = False) -> Lease | None:
        """The conversation's lease for this worker (a new token when it changes hands), or None
        while another live worker holds it unexpired. `anew`: even from this worker, under a new
        token (it is giving the old one up: that release, running late, must not end this)."""
        with self.session.transaction("take a conversation's lease") as cur:
            cur.execute(
                "INSERT INTO conversation_leases (conversation, holder, token, expires_at)"
                " VALUES (%s, %s, 1, clock_timestamp() + make_interval(secs => %s))"
                " ON CONFLICT DO NOTHING", (conversation, self.worker, self.ttl_s),
            )
            if cur.rowcount == 1:
                return self._settle(cur, Lease(conversation, self.worker, 1))
            row = cur.execute(
                "SELECT holder, token, expires_at < clock_timestamp(), "
                + ALIVE.format(w="holder")
                + " FROM conversation_leases WHERE conversation = %s FOR UPDATE",
                (conversation,),
            ).fetchone()
            assert row is not None  # inserted or present; leases are never deleted
            holder, token, expired, holder_alive = row
            if holder == self.worker and not expired and not anew:
                self._extend(cur, conversation, token)
                return Lease(conversation, self.worker, token, (), events.last_seq(cur, conversation))
            if holder != self.worker and not expired and holder_alive:
                return None
            previous = (holder, token, "its lease expired" if expired else "its session ended")
            cur.execute(
                "UPDATE conversation_leases SET holder = %s, token = token + 1,"
                " expires_at = clock_timestamp() + make_interval(secs => %s)"
                " WHERE conversation = %s RETURNING token", (self.worker, self.ttl_s, conversation),
            )
            new = cur.fetchone()
            assert new is not None
            taken = self._settle(cur, Lease(conversation, self.worker, int(new[0])), holder)
        if holder == self.worker:  # its own again (given up when idle): not a move
            return taken
        logs.event(
            "lease_taken", f"{self.worker} took {conversation} (token {taken.token}) from"
            f" {previous[0]}: {previous[2]}", conversation=conversation,
            worker=self.worker, token=taken.token, previous=previous[0],
            previous_token=previous[1], interrupted=list(taken.interrupted),
        )
        return taken

    def _settle(self, cur: Any, lease: Lease, previous: str | None = None) -> Lease:
        """What earlier holders left: started inputs interrupted, queued ones this holder's."""
        by = f"worker {previous}" if previous else "a worker"
        cur.execute(
            "UPDATE inputs SET state = 'interrupted', owner = %s, updated_at = clock_timestamp(),"
            " reason = %s WHERE conversation = %s AND state = 'started' RETURNING item_id",
            (lease.holder,
             f"its turn began on {by} that lost the conversation; the outcome is unknown,"
             " so it is not run again", lease.conversation),
        )
        interrupted = tuple(sorted(r[0] for r in cur.fetchall()))
        cur.execute(
            "UPDATE inputs SET owner = %s, updated_at = clock_timestamp()"
            " WHERE conversation = %s AND state = 'queued'", (lease.holder, lease.conversation),
        )
        return Lease(lease.conversation, lease.holder, lease.token, interrupted,
                     events.last_seq(cur, lease.conversation))

    def _extend(self, cur: Any, conversation: str, token: int) -> None:
        cur.execute(
            "UPDATE conversation_leases SET expires_at = clock_timestamp()"
            " + make_interval(secs => %s) WHERE conversation = %s AND token = %s",
            (self.ttl_s, conversation, token),
        )

    def renew(self, lease: Lease) -> None:
        """Push the lease's expiry out by the ttl; `LeaseLost` if it moved."""
        with self.session.transaction("renew a conversation's lease") as cur:
            fence(cur, lease)
            self._extend(cur, lease.conversation, lease.token)

    def renew_all(self, leases: Sequence[Lease]) -> dict[str, LeaseLost]:
        """Push every lease's expiry out by the ttl in one statement; the ones refused (moved:
        another token or holder, or no lease row), each with why. The reason reads the row as
        the statement began, so a takeover racing the renewal may still show this holder."""
        if not leases:
            return {}
        with self.session.transaction("renew conversation leases") as cur:
            rows = cur.execute(
                "WITH kept (conversation, token) AS (SELECT * FROM unnest(%s::text[], %s::bigint[])),"
                " renewed AS (UPDATE conversation_leases l SET expires_at = clock_timestamp()"
                " + make_interval(secs => %s) FROM kept WHERE l.conversation = kept.conversation"
                " AND l.token = kept.token AND l.holder = %s RETURNING l.conversation)"
                " SELECT kept.conversation, kept.token, c.token, c.holder FROM kept"
                " LEFT JOIN conversation_leases c ON c.conversation = kept.conversation"
                " WHERE kept.conversation NOT IN (SELECT conversation FROM renewed)",
                ([x.conversation for x in leases], [x.token for x in leases], self.ttl_s,
                 self.worker),
            ).fetchall()
        refused = {}
        for conversation, token, current, holder in rows:
            lost = LeaseLost(conversation, int(token), None if current is None else int(current),
                             None if holder is None else str(holder))
            logs.event(
                "write_refused", str(lost), logging.WARNING, conversation=conversation,
                worker=self.worker, token=int(token), current_token=lost.current, what="renewal",
            )
            refused[str(conversation)] = lost
        return refused

    def release_all(self, leases: Sequence[Lease]) -> list[str]:
        """Give the leases up now, in one statement (each only while its token is current);
        the conversations released."""
        if not leases:
            return []
        with self.session.transaction("release conversation leases") as cur:
            rows = cur.execute(
                "UPDATE conversation_leases l SET expires_at = clock_timestamp() - interval '1 ms'"
                " FROM unnest(%s::text[], %s::bigint[]) AS kept (conversation, token)"
                " WHERE l.conversation = kept.conversation AND l.token = kept.token"
                " AND l.holder = %s RETURNING l.conversation",
                ([x.conversation for x in leases], [x.token for x in leases], self.worker),
            ).fetchall()
        return [str(r[0]) for r in rows]

    def release(self, lease: Lease) -> None:
        """Give the lease up now (the token stays, so the next holder's is higher)."""
        with self.session.transaction("release a conversation's lease") as cur:
            fence(cur, lease)
            cur.execute(
                "UPDATE conversation_leases SET expires_at = clock_timestamp() - interval '1 ms'"
                " WHERE conversation = %s AND token = %s", (lease.conversation, lease.token),
            )

    def orphaned(self) -> list[str]:
        """Conversations with unfinished inputs and no live holder (never leased, expired, or
        held by a worker whose session is gone), oldest input first: what a starting worker,
        or one woken by a notification, should try to `acquire` (the fleet's `claim_orphans`)."""
        with self.session.transaction("find conversations without a live owner") as cur:
            rows = cur.execute(
                "SELECT i.conversation FROM inputs i LEFT JOIN conversation_leases l"
                " ON l.conversation = i.conversation"
                " WHERE i.state IN ('queued', 'started') AND (l.conversation IS NULL"
                " OR l.expires_at < clock_timestamp() OR NOT " + ALIVE.format(w="l.holder") + ")"
                " GROUP BY i.conversation ORDER BY min(i.seq)"
            ).fetchall()
        return [str(r[0]) for r in rows]

    def current(self, conversation: str) -> tuple[str, int] | None:
        """(holder, token) of the conversation's lease, expired or not; None if never taken."""
        with self.session.transaction("read a conversation's lease") as cur:
            row = cur.execute(
                "SELECT holder, token FROM conversation_leases WHERE conversation = %s",
                (conversation,),
            ).fetchone()
        return None if row is None else (str(row[0]), int(row[1]))

    # --- fenced writes ------------------------------------------------------------------------

    def queued(self, lease: Lease, codec: RowCodec[T]) -> list[T]:
        """The conversation's queued inputs, oldest first, now the holder's (fenced)."""
        with self.session.transaction("take a conversation's inputs") as cur:
            fence(cur, lease)
            cur.execute(
                "UPDATE inputs SET owner = %s WHERE conversation = %s AND state = 'queued'"
                " AND owner <> %s", (lease.holder, lease.conversation, lease.holder),
            )
            rows = cur.execute(
                f"SELECT {COLUMNS} FROM inputs WHERE conversation = %s AND state = 'queued'"
                " ORDER BY seq", (lease.conversation,),
            ).fetchall()
        return [codec.decode(tuple(r)) for r in rows]

    def mark(
        self, lease: Lease, item_id: str, state: str, *,
        user_message_id: str | None = None, reason: str | None = None,
    ) -> None:
        """Move one of the conversation's inputs to `state` under the lease (fenced)."""
        if state not in PENDING + TERMINAL:
            raise ValueError(f"unknown input state {state!r}")
        with self.session.transaction("mark an input") as cur:
            fence(cur, lease)
            _set_state(cur, lease, item_id, state, user_message_id=user_message_id, reason=reason)

    def append(self, lease: Lease, entries: Sequence[Any]) -> list[int]:
        """Append transcript rows (JSON values) after the conversation's last; their seqs."""
        with self.session.transaction("append to a transcript") as cur:
            fence(cur, lease)
            return _append(cur, lease, entries)

    def begin_turn(self, lease: Lease, item_id: str, user_entry: Any, user_message_id: str) -> int:
        """An input's turn begins: it is `started` and its user message is in the transcript,
        in one commit (so `started` means "its message may have been answered", never less);
        the message's seq."""
        with self.session.transaction("begin a turn") as cur:
            fence(cur, lease)
            _set_state(cur, lease, item_id, "started", user_message_id=user_message_id)
            return _append(cur, lease, [user_entry])[0]

    def end_turn(self, lease: Lease, item_id: str, entries: Sequence[Any]) -> list[int]:
        """The turn's last entries appended and its input `done`, in one commit."""
        with self.session.transaction("end a turn") as cur:
            fence(cur, lease)
            seqs = _append(cur, lease, entries)
            _set_state(cur, lease, item_id, "done")
            return seqs

    def transcript(self, conversation: str, after: int = 0) -> list[tuple[int, Any]]:
        """The conversation's transcript rows after seq `after`, in order."""
        with self.session.transaction("read a transcript") as cur:
            rows = cur.execute(
                "SELECT seq, entry FROM transcript WHERE conversation = %s AND seq > %s"
                " ORDER BY seq", (conversation, after),
            ).fetchall()
        return [(int(s), e) for s, e in rows]


def _set_state(
    cur: Any, lease: Lease, item_id: str, state: str, *,
    user_message_id: str | None = None, reason: str | None = None,
) -> None:
    cur.execute(
        "UPDATE inputs SET state = %s, owner = %s, user_message_id = COALESCE(%s, user_message_id),"
        " reason = COALESCE(%s, reason), updated_at = clock_timestamp()"
        " WHERE conversation = %s AND item_id = %s",
        (state, lease.holder, user_message_id, reason, lease.conversation, item_id),
    )
    if cur.rowcount != 1:
        raise StoreError(f"conversation {lease.conversation} has no input {item_id}")


def _append(cur: Any, lease: Lease, entries: Sequence[Any]) -> list[int]:
    from psycopg.types.json import Jsonb

    row = cur.execute(
        "SELECT COALESCE(max(seq), 0) FROM transcript WHERE conversation = %s",
        (lease.conversation,),
    ).fetchone()
    last = int(row[0]) if row else 0
    seqs = list(range(last + 1, last + 1 + len(entries)))
    cur.executemany(
        "INSERT INTO transcript (conversation, seq, entry, token) VALUES (%s, %s, %s, %s)",
        [(lease.conversation, seq, Jsonb(e), lease.token)
         for seq, e in zip(seqs, entries, strict=True)],
    )
    return seqs


def fence(cur: Any, lease: Lease) -> None:
    """Refuse (`LeaseLost`) unless `lease` is the conversation's current one; the row stays
    share-locked to the end of the caller's transaction, so no takeover commits in between."""
    row = cur.execute(
        "SELECT holder, token FROM conversation_leases WHERE conversation = %s FOR SHARE",
        (lease.conversation,),
    ).fetchone()
    if row is None or int(row[1]) != lease.token or row[0] != lease.holder:
        refused = LeaseLost(
            lease.conversation, lease.token, None if row is None else int(row[1]),
            None if row is None else str(row[0]),
        )
        logs.event(
            "write_refused", str(refused), logging.WARNING, conversation=lease.conversation,
            worker=lease.holder, token=lease.token, current_token=refused.current,
        )
        raise refused
