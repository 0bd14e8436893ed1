"""The durable input queue (issue 29 item 1): every input a server acknowledges, on disk before
the acknowledgement, with its state, its idempotency key and where its conversation ran, so
that after `kill -9` and a restart it runs exactly once, in order, or is reported as not run.

States: `queued` (acknowledged, waiting) -> `started` (the turn that consumes it began; its user
message id recorded) -> `done` (its turn ended); or `cancelled` (withdrawn, its sender told),
`interrupted` (its turn began in a process that died: the outcome is unknown, so it is never run
again silently) and `not_run` (a restart could not run it; the reason says why).

Only the acknowledgement needs its own fsync: `accept_many` commits with `synchronous=FULL` (one
WAL fsync for a whole batch, measured p50 2.5-3.5 ms, p99 ~12 ms on the shared project machine;
a mark ~0.1 ms, a key lookup ~0.03 ms on its own reading connection). The later marks commit without one: `kill -9`
keeps the page cache, and after a power loss the transcript is the arbiter anyway (recovery
looks for the input's user message there, whatever state the row says), while the next accept's
fsync makes every earlier mark durable too (the WAL is one file written in order).

Ownership: each server process holds an flock on its owner file for its life; a restart claims
the unfinished rows of owners whose lock the kernel released (they died or stopped), inside one
write transaction, so two starting servers never both claim a row. `InputQueue` is the narrow
interface a PostgreSQL queue (issue 31) would implement; `SqliteInputQueue` is the embedded one.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import orjson

from tether.backends.local.disk_full import disk_full
from tether.backends.local.locks import StoreUnwritable
from tether.errors import StoreError

if TYPE_CHECKING:
    import sqlite3

PENDING = ("queued", "started")
TERMINAL = ("done", "cancelled", "interrupted", "not_run")
KEEP_FINISHED_S = 24 * 3600  # finished rows (and so their idempotency keys) kept this long
PRUNE_EVERY = 1000  # marks between two prunes of a long-lived queue
FINISHED_BODY = b'{"messages": [], "workspace": null}'  # what a finished input keeps
_FINISHED_BODY = FINISHED_BODY

_SCHEMA = """
CREATE TABLE IF NOT EXISTS inputs (
    seq INTEGER PRIMARY KEY AUTOINCREMENT,
    conversation TEXT NOT NULL,
    item_id TEXT NOT NULL,
    idempotency_key TEXT,
    request_id TEXT,
    source TEXT NOT NULL,
    disposition TEXT NOT NULL,
    state TEXT NOT NULL CHECK (state IN
        ('queued', 'started', 'done', 'cancelled', 'interrupted', 'not_run')),
    body BLOB NOT NULL,
    owner TEXT NOT NULL,
    user_message_id TEXT,
    reason TEXT,
    enqueued_at REAL NOT NULL,
    updated_at REAL NOT NULL,
    UNIQUE (conversation, item_id)
);
CREATE UNIQUE INDEX IF NOT EXISTS inputs_key ON inputs (conversation, idempotency_key)
    WHERE idempotency_key IS NOT NULL;
CREATE INDEX IF NOT EXISTS inputs_pending ON inputs (state, owner) WHERE state IN ('queued', 'started');
"""


class InputStoreUnavailable(StoreUnwritable):
    """The input queue's database cannot be opened or written: an input cannot be acknowledged,
    since it could be lost."""

    def __init__(self, path: Path, exc: BaseException) -> None:
        why = getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
        super().__init__(
            f"the input queue {path} cannot be written ({why}); the input was not accepted",
            getattr(exc, "errno", None) or 5,
            str(path),
        )


class KeyTaken(StoreError):
    """Another input of the conversation already holds this idempotency key."""


@dataclass(frozen=True, slots=True)
class Workspace:
    """Where the input's conversation ran, so a restart rebuilds its runtime the same way."""

    cwd: str
    mode: str | None  # the permission mode a client chose (None: the settings' default)
    sandboxed: bool
    # Client-executed tools registered on it ({scope_id, name, description, parameters}): a
    # restart registers them again, their calls waiting for the client to come back.
    external_tools: tuple[dict[str, Any], ...] = ()


@dataclass(frozen=True, slots=True)
class StoredMessage:
    client_message_id: str
    content: Any  # as the client sent it
    parts: tuple[dict[str, Any], ...]  # the pi-ai dict shape (`messages.part_to_dict`)


@dataclass(frozen=True, slots=True)
class StoredInput:
    """One acknowledged input as the queue keeps it."""

    conversation: str  # "<agent_id>/<conversation_id>"
    item_id: str
    source: str
    disposition: str  # what the acknowledgement said: "started" or "queued"
    messages: tuple[StoredMessage, ...]
    workspace: Workspace
    idempotency_key: str | None = None
    request_id: str | None = None
    enqueued_at: str = ""  # ISO time, as update_queue shows it
    state: str = "queued"
    user_message_id: str | None = None
    reason: str | None = None
    seq: int = field(default=0, compare=False)


class InputQueue(Protocol):
    """What a server needs of durable input: accept before acknowledging, find an idempotency
    key, follow an input's state, and claim what a dead predecessor left."""

    def accept_many(self, items: Sequence[StoredInput]) -> list[str | None]:
        """Record `items` durably (state queued) in one commit; returns once they are on disk,
        per item None or "key" (its idempotency key is taken: not recorded)."""
        ...

    def by_key(self, conversation: str, key: str) -> StoredInput | None: ...

    def mark(
        self, conversation: str, item_id: str, state: str, *,
        user_message_id: str | None = None, reason: str | None = None,
    ) -> None: ...

    def claim_orphans(self) -> list[StoredInput]:
        """Unfinished inputs of owners no longer alive, now this owner's, oldest first."""
        ...

    def close(self) -> None: ...


@contextlib.contextmanager
def _store_errors(path: Path) -> Iterator[None]:
    import sqlite3

    try:
        yield
    except sqlite3.IntegrityError:
        raise
    except (sqlite3.Error, OSError) as exc:
        full = disk_full(path, exc, "write the input queue", "the input was not accepted")
        raise (full or InputStoreUnavailable(path, exc)) from exc


class SqliteInputQueue:
    """`$TETHER_HOME/inputs.db` (WAL) plus `inputs.owners/`, one flock file per live owner.
    Thread-safe; opened on first use, except the owner lock, taken at construction."""

    def __init__(self, path: Path, owner: str) -> None:
        self.path = Path(path)
        self.owner = owner
        self.owners = self.path.parent / "inputs.owners"
        self._lock = threading.Lock()
        self._conn: sqlite3.Connection | None = None
        # Reads on their own connection: in WAL they never wait for a commit's fsync.
        self._read_lock = threading.Lock()
        self._reader: sqlite3.Connection | None = None
        self._mark_conn: sqlite3.Connection | None = None
        self._closed = False
        self._owner_fd: int | None = None
        self._marks = 0

    # --- the database and this process's owner lock ------------------------------------------

    @property
    def _db(self) -> sqlite3.Connection:
        if self._conn is None:
            if self._closed:
                raise StoreError(f"input queue {self.path} is closed")
            import sqlite3

            self._hold_owner_lock()
            self.path.parent.mkdir(parents=True, exist_ok=True)
            conn = sqlite3.connect(
                self.path, check_same_thread=False, isolation_level=None, timeout=10
            )
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute("PRAGMA synchronous=FULL")
            conn.executescript(_SCHEMA)
            self._prune(conn, time.time())
            self._conn = conn
        return self._conn

    @property
    def _marker(self) -> sqlite3.Connection:
        """The connection marks commit on: `synchronous=NORMAL`, no fsync of its own (module
        docstring); called under `_lock`."""
        if self._mark_conn is None:
            import sqlite3

            self._db  # noqa: B018  (the schema, the owner lock)
            conn = sqlite3.connect(
                self.path, check_same_thread=False, isolation_level=None, timeout=10
            )
            conn.execute("PRAGMA synchronous=NORMAL")
            self._mark_conn = conn
        return self._mark_conn

    @property
    def _reads(self) -> sqlite3.Connection:
        if self._reader is None:
            import sqlite3

            with self._lock:
                self._db  # noqa: B018  (the schema, the owner lock)
            self._reader = sqlite3.connect(
                self.path, check_same_thread=False, isolation_level=None, timeout=10
            )
        return self._reader

    def _owner_file(self, owner: str) -> Path:
        return self.owners / (hashlib.sha256(owner.encode()).hexdigest()[:32] + ".lock")

    def _hold_owner_lock(self) -> None:
        if self._owner_fd is not None:
            return
        self.owners.mkdir(parents=True, exist_ok=True)
        for stale in self.owners.glob("*.lock"):  # owners that died with nothing pending
            self._unlink_if_unlocked(stale)
        path = self._owner_file(self.owner)
        while True:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
            fcntl.flock(fd, fcntl.LOCK_EX)  # a fresh id: only a sweep holds it, for a moment
            try:  # another process's sweep may have unlinked it between open and flock
                if os.stat(path).st_ino == os.fstat(fd).st_ino:
                    break
            except FileNotFoundError:
                pass
            os.close(fd)
        self._owner_fd = fd

    def _owner_alive(self, owner: str) -> bool:
        return not self._unlink_if_unlocked(self._owner_file(owner))

    @staticmethod
    def _unlink_if_unlocked(path: Path) -> bool:
        """True (and the file gone) when no live process holds `path`'s lock."""
        try:
            fd = os.open(path, os.O_RDWR | os.O_CLOEXEC)
        except FileNotFoundError:
            return True
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return False
        else:
            with contextlib.suppress(OSError):
                path.unlink()  # its owner is gone; the file only named it
            return True
        finally:
            os.close(fd)

    def open(self) -> None:
        """Open the database now (a server does, to fail at start rather than at an input)."""
        with self._lock, _store_errors(self.path):
            self._db  # noqa: B018

    def close(self) -> None:
        with self._read_lock:
            if self._reader is not None:
                self._reader.close()
                self._reader = None
        with self._lock:
            self._closed = True
            for conn in (self._mark_conn, self._conn):
                if conn is not None:
                    conn.close()
            self._conn = self._mark_conn = None
            if self._owner_fd is not None:
                with contextlib.suppress(OSError):
                    self._owner_file(self.owner).unlink()
                os.close(self._owner_fd)
                self._owner_fd = None

    # --- writes -------------------------------------------------------------------------------

    def accept(self, item: StoredInput) -> None:
        if self.accept_many([item]) != [None]:
            raise KeyTaken(f"idempotency key {item.idempotency_key!r} is taken in {item.conversation}")

    def accept_many(self, items: Sequence[StoredInput]) -> list[str | None]:
        """Record `items` in one transaction (one fsync: a group commit); per item None, or
        "key" when its idempotency key is taken (that one alone is not recorded)."""
        rows = [
            (i.conversation, i.item_id, i.idempotency_key, i.request_id, i.source, i.disposition,
             orjson.dumps(_body(i)), self.owner)
            for i in items
        ]
        now = time.time()
        out: list[str | None] = []
        with self._lock, _store_errors(self.path):
            db = self._db
            db.execute("BEGIN IMMEDIATE")
            try:
                for row in rows:
                    # Only the key's unique index can refuse a row (item ids are random).
                    cur = db.execute(
                        "INSERT OR IGNORE INTO inputs (conversation, item_id, idempotency_key,"
                        " request_id, source, disposition, state, body, owner, enqueued_at,"
                        " updated_at) VALUES (?, ?, ?, ?, ?, ?, 'queued', ?, ?, ?, ?)",
                        (*row, now, now),
                    )
                    out.append(None if cur.rowcount == 1 else "key")
                db.execute("COMMIT")
            except BaseException:
                if db.in_transaction:
                    db.execute("ROLLBACK")
                raise
        return out

    def mark(
        self, conversation: str, item_id: str, state: str, *,
        user_message_id: str | None = None, reason: str | None = None,
    ) -> None:
        if state not in PENDING + TERMINAL:
            raise ValueError(f"unknown input state {state!r}")
        # A finished input keeps its key and state, not its content (an image can be large).
        body = FINISHED_BODY if state in TERMINAL else None
        now = time.time()
        with self._lock, _store_errors(self.path):
            db = self._marker
            db.execute(
                "UPDATE inputs SET state = ?, user_message_id = COALESCE(?, user_message_id),"
                " reason = COALESCE(?, reason), body = COALESCE(?, body), updated_at = ?"
                " WHERE conversation = ? AND item_id = ? AND owner = ?",
                (state, user_message_id, reason, body, now, conversation, item_id, self.owner),
            )
            self._marks += 1
            if self._marks % PRUNE_EVERY == 0:
                self._prune(db, now)

    @staticmethod
    def _prune(db: sqlite3.Connection, now: float) -> None:
        """Forget finished inputs (and so their idempotency keys) after KEEP_FINISHED_S."""
        db.execute(
            "DELETE FROM inputs WHERE state IN ('done', 'cancelled', 'interrupted', 'not_run')"
            " AND updated_at < ?", (now - KEEP_FINISHED_S,),
        )

    def claim_orphans(self) -> list[StoredInput]:
        with self._lock, _store_errors(self.path):
            db = self._db
            db.execute("BEGIN IMMEDIATE")  # one claimant at a time
            try:
                owners = [r[0] for r in db.execute(
                    "SELECT DISTINCT owner FROM inputs WHERE state IN ('queued', 'started')"
                    " AND owner != ?", (self.owner,),
                )]
                dead = [o for o in owners if not self._owner_alive(o)]
                for owner in dead:
                    db.execute(
                        "UPDATE inputs SET owner = ?, updated_at = ? WHERE owner = ?"
                        " AND state IN ('queued', 'started')", (self.owner, time.time(), owner),
                    )
                rows = db.execute(
                    f"SELECT {_COLUMNS} FROM inputs WHERE owner = ?"
                    " AND state IN ('queued', 'started') ORDER BY seq", (self.owner,),
                ).fetchall()
                db.execute("COMMIT")
            except BaseException:
                if db.in_transaction:
                    db.execute("ROLLBACK")
                raise
        return [_row(r) for r in rows]

    # --- reads --------------------------------------------------------------------------------

    def by_key(self, conversation: str, key: str) -> StoredInput | None:
        with self._read_lock, _store_errors(self.path):
            row = self._reads.execute(
                f"SELECT {_COLUMNS} FROM inputs WHERE conversation = ? AND idempotency_key = ?",
                (conversation, key),
            ).fetchone()
        return None if row is None else _row(row)

    def of_conversation(self, conversation: str, states: Sequence[str] = PENDING) -> list[StoredInput]:
        marks = ", ".join("?" for _ in states)
        with self._read_lock, _store_errors(self.path):
            rows = self._reads.execute(
                f"SELECT {_COLUMNS} FROM inputs WHERE conversation = ? AND state IN ({marks})"
                " ORDER BY seq", (conversation, *states),
            ).fetchall()
        return [_row(r) for r in rows]


_COLUMNS = (
    "seq, conversation, item_id, idempotency_key, request_id, source, disposition, state, body,"
    " user_message_id, reason"
)


def encode_body(item: StoredInput) -> bytes:
    """The bytes a queue keeps as an input's body (any `InputQueue`: the row codec)."""
    return orjson.dumps(_body(item))


def decode_row(row: tuple[Any, ...]) -> StoredInput:
    """The input a row of `COLUMNS` (seq, conversation, item_id, idempotency_key, request_id,
    source, disposition, state, body, user_message_id, reason) holds."""
    return _row(tuple(row))


COLUMNS = _COLUMNS


def _body(item: StoredInput) -> dict[str, Any]:
    ws = item.workspace
    return {
        "messages": [
            {"client_message_id": m.client_message_id, "content": m.content, "parts": list(m.parts)}
            for m in item.messages
        ],
        "workspace": {"cwd": ws.cwd, "mode": ws.mode, "sandboxed": ws.sandboxed,
                      "external_tools": list(ws.external_tools)},
        "enqueued_at": item.enqueued_at,
    }


def _row(row: tuple[Any, ...]) -> StoredInput:
    seq, conversation, item_id, key, request_id, source, disposition, state, body, umid, why = row
    data = orjson.loads(body)
    ws = data["workspace"] or {"cwd": "", "mode": None, "sandboxed": False}  # None: finished
    messages = tuple(
        StoredMessage(m["client_message_id"], m["content"], tuple(m["parts"]))
        for m in data["messages"]
    )
    return StoredInput(
        conversation=conversation, item_id=item_id, source=source, disposition=disposition,
        messages=messages,
        workspace=Workspace(
            ws["cwd"], ws["mode"], bool(ws["sandboxed"]), tuple(ws.get("external_tools") or ())
        ),
        idempotency_key=key, request_id=request_id, enqueued_at=data.get("enqueued_at", ""),
        state=state, user_message_id=umid, reason=why, seq=seq,
    )
