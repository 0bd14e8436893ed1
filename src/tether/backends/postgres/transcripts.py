"""A conversation's transcript on the PostgreSQL store (`tether server --store`): the
`TranscriptLog` of `backends/store_api.py` as append-only `transcript` rows, ordered by
(conversation, seq), each holding its entry's exact JSONL line, with the session header (and a
migrated file's torn tail) in `transcript_files` — the layout `migrate_home.py` writes, so a
migrated home is served as it is and copied back byte for byte.

Every write is fenced by the conversation's lease (`leases.py`): the lease this worker holds
is read when the write happens, the lease row is share-locked and its token checked in the same
transaction as the insert, so a worker whose lease moved (paused, then woken) is refused
(`LeaseLost`) and its rows never appear. The entries, their view (message snapshots replaced in
place, compactions, rollbacks: `backends/local/view.py`) and the damage rules are the local
transcript's: a row repeating an earlier entry's id and parentId is damage, named by its line
(seq + 1, the header being line 1); a torn tail a migrated file carried is left out of the view
and not written after the next append (`render`). Rows are committed before an append returns (the store's
durability stands in for the file's fsync). A first read resumes from the last compaction
(`transcript_resume.py`); `entries()` reads every row."""

from __future__ import annotations

import itertools
import os
import threading
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, NoReturn

import orjson

from tether.backends.local.entry_format import entry_bytes, message_entries, session_header
from tether.backends.local.view import ActiveView
from tether.backends.postgres.connection import LeaseLost, PgSession
from tether.errors import ProtocolError, StoreError, TranscriptCorrupt
from tether.protocol.messages import Message, message_from_dict, message_to_dict

if TYPE_CHECKING:
    from tether.backends.postgres.leases import Lease
    from tether.backends.postgres.transcript_resume import Seed


class PgTranscript(ActiveView):
    """The transcript of conversation `key` (`store_api.conversation_ref`). `path` is where the
    file sits in a home (`conversations/<b64url key>/messages.jsonl`, the `transcript_files`
    row's), `lease` returns the lease this worker holds on it now (None: none)."""

    def __init__(
        self, session: PgSession, key: str, path: str, lease: Callable[[], Lease | None]
    ) -> None:
        self.session = session
        self.key = key
        self.path = path
        self._lease = lease
        self._lock = threading.RLock()
        self._collect: list[dict[str, Any]] | None = None
        self._reset()

    def _reset(self) -> None:
        self._reset_view()
        self._header: dict[str, Any] | None = None
        self._header_line = b""
        self._seq = 0  # the last row read
        self._parents: dict[str, Any] = {}  # entry id -> its parentId (a record twice is damage)

    @property
    def where(self) -> str:
        return f"transcript {self.key} in the PostgreSQL store"

    # --- reading ----------------------------------------------------------------------------

    def ensure_created(self, cwd: str | None = None) -> None:
        """The session header row, if the conversation has none yet (a racing worker's wins)."""
        with self._lock, self.session.transaction("create a transcript") as cur:
            cur.execute(
                "INSERT INTO transcript_files (conversation, path, header, torn)"
                " VALUES (%s, %s, %s, '') ON CONFLICT DO NOTHING",
                (self.key, self.path, session_header(cwd)),
            )

    def load(self) -> list[Message]:
        with self._lock:
            self._sync()
            return list(self._view.values())

    def tail(self, limit: int) -> list[Message]:
        if limit < 1:
            raise ValueError(f"limit must be at least 1, got {limit}")
        with self._lock:
            self._sync()
            return list(itertools.islice(reversed(self._view.values()), limit))[::-1]

    def header(self) -> dict[str, Any] | None:
        with self._lock:
            self._sync()
            return dict(self._header) if self._header is not None else None

    def last_compaction_id(self) -> str | None:
        with self._lock:
            self._sync()
            return self._compaction[0][0] if self._compaction is not None else None

    def entries(self) -> list[dict[str, Any]]:
        """Every entry after the header, as stored (a fresh, validating read)."""
        fresh = PgTranscript(self.session, self.key, self.path, self._lease)
        fresh._collect = []
        fresh._sync()
        return fresh._collect

    def written_bytes(self) -> bytes:
        """The transcript as its file would hold it (`render`); empty when it has none."""
        with self.session.transaction("read a transcript") as cur:
            head = cur.execute(
                "SELECT header, torn FROM transcript_files WHERE conversation = %s", (self.key,)
            ).fetchone()
            header, torn = (bytes(head[0]), bytes(head[1])) if head else (b"", b"")
            return render(cur, self.key, header, torn)[0]

    def _sync(self) -> None:
        """Apply the rows written since the last read (all of them the first time)."""
        from tether.backends.postgres.transcript_resume import read_seed

        with self.session.transaction("read a transcript") as cur:
            head = seed = None
            if self._header is None:
                cur.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
                head = cur.execute(
                    "SELECT header, torn FROM transcript_files WHERE conversation = %s",
                    (self.key,),
                ).fetchone()
                if head is not None and self._collect is None:  # a full read collects all
                    seed = read_seed(cur, self.key, self._corrupt)
            rows = cur.execute(
                "SELECT seq, line, entry FROM transcript WHERE conversation = %s AND seq > %s"
                " ORDER BY seq", (self.key, seed.seq if seed is not None else self._seq),
            ).fetchall()
        if head is not None:
            self._read_header(bytes(head[0]))  # a torn tail (head[1]) is never in the view
        if seed is not None:
            self._seed(seed)
        if not rows:
            return
        if self._header is None:
            self._corrupt(1, "rows without a session header (no transcript_files row)")
        try:
            for seq, line, entry in rows:
                seq = int(seq)
                if seq != self._seq + 1:
                    self._corrupt(seq + 1, f"row {self._seq + 1} is missing (the next is {seq})")
                self._ingest(seq, _line(line, entry))
                self._seq = seq
        except BaseException:
            self._reset()  # the next read starts over
            raise

    def _seed(self, seed: Seed) -> None:
        """Start from the view right after the last compaction (`transcript_resume`)."""
        for mid, eid, seq, message in seed.view:
            self._view[mid] = message
            self._latest_entry[mid] = eid
            self._at[mid] = (eid, seq, 0)
        self._entry_message.update(seed.entry_message)
        self._parents.update(seed.parents)
        self._last_entry_id = seed.entry_id
        kept = [(mid, (eid, seq, 0)) for mid, eid, seq, _m in seed.view[1:]]
        self._compaction = ((seed.entry_id, seed.seq, 0), seed.seq + 1, kept)
        self._seq = seed.seq

    def _read_header(self, line: bytes) -> None:
        try:
            header = orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            self._corrupt(1, f"session header is not JSON: {exc}")
        if not isinstance(header, dict) or header.get("type") != "session":
            self._corrupt(1, 'the first line is not a {"type":"session"} header')
        self._header = header
        self._header_line = line

    def _ingest(self, seq: int, line: bytes) -> None:
        number = seq + 1
        try:
            entry = orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            self._corrupt(number, f"not JSON: {exc}")
        if type(entry) is not dict:
            self._corrupt(number, "entry is not a JSON object")
        if self._collect is not None:
            self._collect.append(entry)
        kind, eid = entry.get("type"), entry.get("id")
        if not isinstance(eid, str):
            self._corrupt(number, f"{kind} entry lacks a string id")
        if eid in self._parents and self._parents[eid] == entry.get("parentId"):
            self._corrupt(
                number, f"entry id {eid!r} is recorded twice with the same parentId"
                " (the same record written twice)",
            )
        self._parents[eid] = entry.get("parentId")
        where = (eid, seq, 0)
        if kind == "message":
            self._add_message(where, self._message(entry, "message", number))
        elif kind == "compaction":
            summary = self._message(entry, "compaction", number)
            first_kept = entry.get("firstKeptEntryId")
            if first_kept is not None and not isinstance(first_kept, str):
                self._corrupt(number, "compaction firstKeptEntryId must be a string or null")
            kept_from = self._entry_message.get(first_kept) if first_kept is not None else None
            if first_kept is not None and kept_from not in self._view:
                self._corrupt(
                    number, f"compaction firstKeptEntryId {first_kept!r} names no message in view"
                )
            self._compact(where, number, summary, kept_from)
        elif kind == "rollback":
            mid = entry.get("messageId")
            if not isinstance(mid, str):
                self._corrupt(number, "rollback entry lacks a string messageId")
            self._roll_back(eid, mid)
        else:
            self._corrupt(number, f"unknown entry type {kind!r}")

    def _message(self, entry: dict[str, Any], kind: str, line: int) -> Message:
        try:
            return message_from_dict(entry.get("message"), f"{kind} entry")
        except ProtocolError as exc:
            self._corrupt(line, str(exc))

    def _corrupt(self, line: int, why: str) -> NoReturn:
        raise TranscriptCorrupt(self.where, line, why)

    # --- writing ----------------------------------------------------------------------------

    def append(self, messages: Sequence[Message]) -> None:
        """One step boundary: a row per message whose snapshot changed, in one fenced commit."""
        with self._lock:
            self._sync_for_write()
            lines = [line for _, _, line in message_entries(
                messages, self._view, self._last_entry_id, self._new_entry_id)]
            if lines:
                self._write(lines)

    def rollback(self, message_id: str) -> None:
        with self._lock:
            self._sync()
            if message_id not in self._view:
                return
            eid = self._new_entry_id(set())
            fields = b'"messageId":' + orjson.dumps(message_id)
            self._write([entry_bytes("rollback", eid, self._last_entry_id, fields)])

    def append_compaction(
        self,
        summary_message: Message,
        *,
        summary: str,
        first_kept_message_id: str | None,
        tokens_before: int,
        details: Mapping[str, Any] | None = None,
    ) -> str:
        with self._lock:
            self._sync_for_write()
            if first_kept_message_id is not None and first_kept_message_id not in self._view:
                raise ValueError(f"message {first_kept_message_id!r} is not in the active view")
            first_kept = (
                self._latest_entry[first_kept_message_id]
                if first_kept_message_id is not None else None
            )
            fields: dict[str, Any] = {
                "summary": summary,
                "firstKeptEntryId": first_kept,
                "tokensBefore": tokens_before,
                "message": message_to_dict(summary_message),
            }
            if details is not None:
                fields["details"] = dict(details)
            eid = self._new_entry_id(set())
            body = orjson.dumps(fields)[1:-1]
            self._write([entry_bytes("compaction", eid, self._last_entry_id, body)])
            return eid

    def _sync_for_write(self) -> None:
        self._sync()
        if self._header is None:
            self.ensure_created()
            self._sync()

    def _new_entry_id(self, taken: set[str]) -> str:
        while True:
            eid = os.urandom(4).hex()
            if eid not in self._parents and eid not in taken:
                taken.add(eid)
                return eid

    def _write(self, lines: list[bytes]) -> None:
        """Insert `lines` after the last row, fenced by this worker's lease, then apply them."""
        from psycopg.types.json import Jsonb

        from tether.backends.postgres.leases import fence
        from tether.backends.postgres.migrate_local import _jsonb_safe

        lease = self._lease()
        first = self._seq + 1
        rows = [
            (self.key, first + n, Jsonb(_jsonb_safe(orjson.loads(line))), line)
            for n, line in enumerate(lines)
        ]
        with self.session.transaction("append to a transcript") as cur:
            if lease is None:
                _refuse_unheld(cur, self.key, self.session.worker)
            fence(cur, lease)
            row = cur.execute(
                "SELECT COALESCE(max(seq), 0) FROM transcript WHERE conversation = %s",
                (self.key,),
            ).fetchone()
            if row is None or int(row[0]) != self._seq:
                raise StoreError(
                    f"{self.where} has rows this worker did not read (last {row and row[0]},"
                    f" read {self._seq}); nothing was written: try the turn again"
                )
            cur.executemany(
                "INSERT INTO transcript (conversation, seq, entry, token, line)"
                " VALUES (%s, %s, %s, %s, %s)",
                [(k, seq, entry, lease.token, line) for k, seq, entry, line in rows],
            )
        for seq, line in enumerate(lines, first):
            self._ingest(seq, line)
            self._seq = seq


def render(cur: Any, key: str, header: bytes, torn: bytes) -> tuple[bytes, bytes, int]:
    """(the file, the file as it was migrated in, how many rows) of transcript `key`: the
    header, each row's line, and a migrated file's torn tail, which stays at the end only until
    the first live append (token > 0): a file's torn tail is cut before its next append. The
    migrated-in file is the header, the rows migrated (token 0) and the tail."""
    rows = cur.execute(
        "SELECT line, entry, token FROM transcript WHERE conversation = %s ORDER BY seq", (key,)
    ).fetchall()
    lines = [(_line(line, entry), int(token)) for line, entry, token in rows]
    migrated = header + b"".join(line for line, token in lines if token == 0) + torn
    live = any(token > 0 for _, token in lines)
    whole = header + b"".join(line for line, _ in lines) + (b"" if live else torn)
    return whole, migrated, len(lines)


def _line(line: Any, entry: Any) -> bytes:
    """A row's exact line; a row written without one renders from its entry."""
    return bytes(line) if line is not None else orjson.dumps(entry) + b"\n"


def _refuse_unheld(cur: Any, key: str, worker: str) -> NoReturn:
    row = cur.execute(
        "SELECT holder, token FROM conversation_leases WHERE conversation = %s", (key,)
    ).fetchone()
    raise LeaseLost(key, None, None if row is None else int(row[1]),
                    None if row is None else str(row[0]), worker=worker)
