"""`PgInputQueue`: the runtime's durable input queue (`runtime/turns/input_queue.py`'s `InputQueue`)
on PostgreSQL, with the same states, idempotency keys and marks; an input is acknowledged once
its transaction commits, and the commit wakes the conversation's owner (`notify.py`).

The runtime's row shape stays the runtime's: a `RowCodec` turns an input into the bytes of its
body and a row back into the runtime's input (the columns in `COLUMNS` order), so this L2
adapter never imports L3. Owners are workers (`presence.py`): `claim_orphans` takes the
unfinished inputs of workers whose database session is gone, in one transaction, so two
claimants never both take a row.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, Protocol, TypeVar

from tether.backends.postgres import logs
from tether.backends.postgres.connection import PgSession
from tether.backends.postgres.presence import ALIVE
from tether.errors import StoreError

PENDING = ("queued", "started")
TERMINAL = ("done", "cancelled", "interrupted", "not_run")
KEEP_FINISHED_S = 24 * 3600  # finished rows (and so their idempotency keys) kept this long
PRUNE_EVERY = 1000  # marks between two prunes
INPUTS_CHANNEL = "tether_inputs"  # NOTIFY channel; the payload is the conversation

COLUMNS = (
    "seq, conversation, item_id, idempotency_key, request_id, source, disposition, state, body,"
    " user_message_id, reason"
)


class QueuedItem(Protocol):
    """What the queue reads of an input it accepts (the runtime's `StoredInput` has it)."""

    @property
    def conversation(self) -> str: ...
    @property
    def item_id(self) -> str: ...
    @property
    def idempotency_key(self) -> str | None: ...
    @property
    def request_id(self) -> str | None: ...
    @property
    def source(self) -> str: ...
    @property
    def disposition(self) -> str: ...


T = TypeVar("T", bound=QueuedItem)


@dataclass(frozen=True, slots=True)
class RowCodec(Generic[T]):
    """The runtime's side of a row: `encode` an input's body, `decode` a `COLUMNS` row (the
    body as bytes), and the body a finished input keeps (its content dropped)."""

    encode: Callable[[T], bytes]
    decode: Callable[[tuple[Any, ...]], T]
    finished_body: bytes


class NotOwner(StoreError):
    """A mark of an input that another worker owns (it claimed it from this one, which it
    believed dead): refused, so two workers never both settle one input."""


class KeyTaken(StoreError):
    """Another input of the conversation already holds this idempotency key."""


def _check_state(state: str) -> None:
    if state not in PENDING + TERMINAL:
        raise ValueError(f"unknown input state {state!r}")


class PgInputQueue(Generic[T]):
    """The durable input queue in the `inputs` table of the store at `session.url`, owned by
    `session.worker`. Thread-safe (the session's lock)."""

    def __init__(self, session: PgSession, codec: RowCodec[T]) -> None:
        self.session = session
        self.owner = session.worker
        self.codec = codec
        self._marks = 0

    def open(self) -> None:
        self.session.open()

    def close(self) -> None:
        self.session.close()

    # --- writes -------------------------------------------------------------------------------

    def accept(self, item: T) -> None:
        if self.accept_many([item]) != [None]:
            raise KeyTaken(f"idempotency key {item.idempotency_key!r} is taken in {item.conversation}")

    def accept_many(self, items: Sequence[T]) -> list[str | None]:
        """Record `items` (state queued, owned by this worker) in one commit; per item None, or
        "key" when its idempotency key is taken (that one alone is not recorded). The commit
        notifies each conversation's channel."""
        with self.session.transaction("accept an input (it was not accepted)") as cur:
            return self.accept_in(cur, items)

    def accept_in(self, cur: Any, items: Sequence[T]) -> list[str | None]:
        """`accept_many`'s inserts and notifications inside the caller's transaction (a
        schedule's fire and its input commit together, `fires.py`)."""
        out: list[str | None] = []
        for item in items:
            cur.execute(
                "INSERT INTO inputs (conversation, item_id, idempotency_key, request_id,"
                " source, disposition, state, body, owner)"
                " VALUES (%s, %s, %s, %s, %s, %s, 'queued', %s, %s) ON CONFLICT DO NOTHING",
                (item.conversation, item.item_id, item.idempotency_key, item.request_id,
                 item.source, item.disposition, self.codec.encode(item), self.owner),
            )
            out.append(None if cur.rowcount == 1 else "key")
        for conversation in dict.fromkeys(
            i.conversation for i, why in zip(items, out, strict=True) if why is None
        ):
            cur.execute("SELECT pg_notify(%s, %s)", (INPUTS_CHANNEL, conversation))
        return out

    def mark(
        self, conversation: str, item_id: str, state: str, *,
        user_message_id: str | None = None, reason: str | None = None,
    ) -> None:
        """Move an input this worker owns to `state`; an input another worker owns now is
        refused (`NotOwner`), one that does not exist is a no-op, as in the SQLite queue."""
        _check_state(state)
        body = self.codec.finished_body if state in TERMINAL else None
        with self.session.transaction("mark an input") as cur:
            cur.execute(
                "UPDATE inputs SET state = %s, user_message_id = COALESCE(%s, user_message_id),"
                " reason = COALESCE(%s, reason), body = COALESCE(%s, body),"
                " updated_at = clock_timestamp()"
                " WHERE conversation = %s AND item_id = %s AND owner = %s",
                (state, user_message_id, reason, body, conversation, item_id, self.owner),
            )
            if cur.rowcount == 0:
                row = cur.execute(
                    "SELECT owner FROM inputs WHERE conversation = %s AND item_id = %s",
                    (conversation, item_id),
                ).fetchone()
                if row is not None:
                    raise NotOwner(
                        f"input {item_id} of {conversation} cannot be marked {state} by"
                        f" {self.owner}: worker {row[0]} owns it now"
                    )
            self._marks += 1
            if self._marks % PRUNE_EVERY == 0:
                prune(cur)

    def claim_orphans(self) -> list[T]:
        """Unfinished inputs of workers no longer alive, now this worker's, oldest first."""
        with self.session.transaction("claim a dead worker's inputs") as cur:
            # Row locks (FOR UPDATE) make concurrent claimants queue; the second one re-reads
            # the owner and finds a live one (the first), so it claims nothing twice.
            cur.execute(
                "WITH dead AS (SELECT seq FROM inputs i WHERE state IN ('queued', 'started')"
                " AND owner <> %s AND NOT " + ALIVE.format(w="i.owner") + " FOR UPDATE)"
                " UPDATE inputs SET owner = %s, updated_at = clock_timestamp()"
                " WHERE seq IN (SELECT seq FROM dead)",
                (self.owner, self.owner),
            )
            claimed = cur.rowcount
            rows = cur.execute(
                f"SELECT {COLUMNS} FROM inputs WHERE owner = %s"
                " AND state IN ('queued', 'started') ORDER BY seq", (self.owner,),
            ).fetchall()
        if claimed:
            logs.event("inputs_claimed", f"{self.owner} claimed {claimed} inputs of dead workers",
                       worker=self.owner, claimed=claimed)
        return [self.codec.decode(tuple(r)) for r in rows]

    # --- reads --------------------------------------------------------------------------------

    def by_key(self, conversation: str, key: str) -> T | None:
        with self.session.transaction("find an idempotency key") as cur:
            row = cur.execute(
                f"SELECT {COLUMNS} FROM inputs WHERE conversation = %s AND idempotency_key = %s",
                (conversation, key),
            ).fetchone()
        return None if row is None else self.codec.decode(tuple(row))

    def of_conversation(self, conversation: str, states: Sequence[str] = PENDING) -> list[T]:
        for state in states:
            _check_state(state)
        with self.session.transaction("read a conversation's inputs") as cur:
            rows = cur.execute(
                f"SELECT {COLUMNS} FROM inputs WHERE conversation = %s AND state = ANY(%s)"
                " ORDER BY seq", (conversation, list(states)),
            ).fetchall()
        return [self.codec.decode(tuple(r)) for r in rows]


def prune(cur: Any) -> None:
    """Forget finished inputs (and so their idempotency keys) after KEEP_FINISHED_S."""
    cur.execute(
        "DELETE FROM inputs WHERE state IN ('done', 'cancelled', 'interrupted', 'not_run')"
        " AND updated_at < clock_timestamp() - make_interval(secs => %s)", (KEEP_FINISHED_S,),
    )
