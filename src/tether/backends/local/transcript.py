"""One conversation's append-only `messages.jsonl` (reference §4.3): its format, its active
view and its crash repair (the settlement of tool calls an interrupted turn left open, §4.4, is
in `settlement.py`; resuming from the last compaction, in `resume_index.py`; reading the last
messages back from the end, in `tail.py` with the log of `replacements.py`).

Format: a `session` header line, then one LF-terminated JSON entry per line:

    {"type":"message","id":<8 hex>,"parentId":<previous entry id|null>,"timestamp":<iso>,
     "message":<message_to_dict(...)>}
    {"type":"compaction","id","parentId","timestamp","summary","firstKeptEntryId"|null,
     "tokensBefore","message":<the summary message>,"details"?}
    {"type":"rollback","id","parentId","timestamp","messageId"}        <- tether extension

The active view replays the entries: a message entry whose message id is already in the view
replaces that snapshot in place (latest wins), otherwise it joins the end; a compaction entry
makes the view `[summary message] + the view from the message that firstKeptEntryId carried`;
a rollback entry removes that message from the view.

Extension to the reference: the `rollback` entry. The backend may persist an assistant
message before its provider call finished (`stopReason: null`); settlement drops such a
message from the active view and records that durably with a rollback entry rather than
rewriting history. A reader that does not know the entry type fails loudly (as tether does on
any unknown type), so the extension can never be half-understood.

Durability: an entry counts once its LF is on disk and fsynced. A torn last line (no LF, or
not JSON) is left out of the view and cut off before the next append; damage anywhere else
raises `TranscriptCorrupt` with the 1-based line number. A torn write is a prefix of one entry,
perhaps followed by NUL bytes (blocks a crash left zero-filled, even where its newline should
be), so a line holding a whole entry plus more bytes (two records fused by a lost newline, even
at the end) is damage too: those records were committed, and nothing is cut. So are NUL bytes
inside a committed line, and an entry repeating an earlier entry's id and parentId (the same
record twice; entry ids are unique, parentId and firstKeptEntryId name them). A message entry
for a message already in view is no duplicate: it replaces that snapshot (see above). A reader
seeded by the resume index knows the ids from the last compaction on, so a copy of an older
record placed after it is found by a full read (`entries()`, or any read without the index).
"""

from __future__ import annotations

import contextlib
import functools
import gc
import itertools
import os
import threading
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, NoReturn, TypeVar, cast

import orjson

from tether.backends.local import replacements, resume_index
from tether.backends.local.damage import (
    duplicated_record,
    fused_records,
    nul_run,
    torn_tail_damage,
)
from tether.backends.local.durable import append_durably
from tether.backends.local.entry_format import (
    entry_bytes,
    entry_timestamp,
    message_entries,
    session_header,
)
from tether.backends.local.locks import create_exclusive
from tether.backends.local.settlement import settle_orphaned_tool_calls
from tether.backends.local.tail import read_tail
from tether.backends.local.view import ActiveView
from tether.errors import ProtocolError, TranscriptCorrupt
from tether.protocol.messages import Message, message_from_dict, message_to_dict

_StatKey = tuple[int, int, int]
_F = TypeVar("_F", bound=Callable[..., Any])


def _locked(method: _F) -> _F:
    """Run under the transcript's lock: the backend appends in a worker thread, and a reader on
    another thread (reflection, a mod) must never meet a write half applied."""

    @functools.wraps(method)
    def run(self: Transcript, *args: Any, **kwargs: Any) -> Any:
        with self._lock:
            return method(self, *args, **kwargs)

    return cast(_F, run)


class Transcript(ActiveView):
    """The messages.jsonl at `path`. One writer at a time across processes (the turn lock);
    within one, the public methods hold `_lock`.

    The parsed view stays in memory: `load()` and `append()` re-read only what another process
    added since (detected by inode, size and mtime), never the whole file again.
    """

    def __init__(self, path: Path | str) -> None:
        self.path = Path(path)
        self._lock = threading.RLock()
        self._key: _StatKey | None = None
        self._collect: list[dict[str, Any]] | None = None
        self._reset()

    def _reset(self) -> None:
        self._reset_view()
        self._header: dict[str, Any] | None = None
        self._good_size = 0  # bytes up to and including the last good LF
        self._good_lines = 0  # lines in those bytes, header included
        self._disk_size = 0  # bytes on disk when last read (more than good: a torn tail)
        self._index_stale = False  # a compaction the index does not describe yet
        self._log_end: int | None = None  # how far the replacement log is known written

    # --- reading ----------------------------------------------------------------------------

    def ensure_created(self, cwd: str | None = None) -> None:
        """Write the session header if the file does not exist yet (atomically: a racing
        process either wins or sees a complete header)."""
        if not self.path.exists():
            create_exclusive(self.path, session_header(cwd))

    @_locked
    def load(self) -> list[Message]:
        """The active view, in order. A missing file is an empty conversation."""
        self._sync()
        return list(self._view.values())

    @_locked
    def tail(self, limit: int) -> list[Message]:
        """The last `limit` messages of the active view (`load()[-limit:]`), read back from the
        end of the file when this reader has not read it yet."""
        if limit < 1:
            raise ValueError(f"limit must be at least 1, got {limit}")
        if self._key is None:
            found = read_tail(self.path, limit)
            if found is not None:
                return found
        self._sync()
        return list(itertools.islice(reversed(self._view.values()), limit))[::-1]

    @_locked
    def header(self) -> dict[str, Any] | None:
        self._sync()
        return dict(self._header) if self._header is not None else None

    @_locked
    def last_compaction_id(self) -> str | None:
        """The entry id of the latest compaction (None: never compacted), reading only what
        was appended since the last read."""
        self._sync()
        return self._compaction[0][0] if self._compaction is not None else None

    def written_bytes(self) -> bytes:
        """The file as written (header, entries, any torn tail); empty when it does not exist."""
        try:
            return self.path.read_bytes()
        except FileNotFoundError:
            return b""

    def entries(self) -> list[dict[str, Any]]:
        """Every entry after the header, as stored (a fresh, validating read of the file)."""
        fresh = Transcript(self.path)
        fresh._collect = []
        fresh._sync()
        return fresh._collect

    def _sync(self) -> None:
        try:
            f = open(self.path, "rb")  # noqa: SIM115 - closed below; stat and read one file
        except FileNotFoundError:
            self._reset()
            self._key = None
            return
        with f:
            st = os.fstat(f.fileno())
            key = (st.st_ino, st.st_size, st.st_mtime_ns)
            if key == self._key:
                return
            grown = (
                self._key is not None
                and self._header is not None
                and st.st_ino == self._key[0]
                and st.st_size >= self._good_size
            )
            seeded: str | None = None
            if not grown:
                self._reset()
                seed = resume_index.read(self.path, f, st.st_size, st.st_ino) if self._collect is None else None
                if seed is not None:
                    self._seed(seed)
                    seeded = seed.compaction[0]
            f.seek(self._good_size)
            start = self._good_size
            data = f.read()
        try:
            with _gc_paused():
                self._ingest(data)
        except BaseException:
            self._reset()
            self._key = None
            raise
        self._disk_size = start + len(data)
        self._key = key
        if not grown and self._compaction is not None and self._compaction[0][0] != seeded:
            self._index_stale = True  # written with the next append

    def _seed(self, seed: resume_index.Seed) -> None:
        """Start from the view right after the last compaction, as the resume index says."""
        self._read_header(seed.header_line, True)
        summary, ceid = seed.summary, seed.compaction[0]
        self._view[summary.id] = summary
        self._latest_entry[summary.id] = ceid
        self._entry_message[ceid] = summary.id
        self._at[summary.id] = seed.compaction
        for where, message in seed.kept:
            if message.id != summary.id:
                self._add_message(where, message)
        self._last_entry_id = ceid
        self._cover_from = seed.end
        kept = [(m.id, where) for where, m in seed.kept if m.id != summary.id]
        self._compaction = (seed.compaction, seed.compaction_line, kept)
        self._good_size = seed.end
        self._good_lines = seed.compaction_line

    def _ingest(self, data: bytes) -> None:
        """Apply the complete lines in `data` (which runs to end of file) to the view."""
        end = data.rfind(b"\n") + 1
        lines = data[:end].split(b"\n")
        lines.pop()  # after the last LF: empty
        torn_tail = len(data) > end
        first = 0
        if self._header is None:
            self._read_header(lines[0] if lines else None, torn_tail or bool(data))
            self._cover_from = len(lines[0]) + 1
            first = 1
        base = self._good_lines  # line number of lines[0], minus one
        last = len(lines) - 1
        loads, from_dict = orjson.loads, message_from_dict
        view, latest, carried, at = self._view, self._latest_entry, self._entry_message, self._at
        replaced = self._replaced
        fast = self._collect is None
        good = end
        pos = self._good_size + (len(lines[0]) + 1 if first else 0)  # offset of lines[first]
        for i in range(first, len(lines)):
            line_at = pos
            pos += len(lines[i]) + 1
            try:
                entry = loads(lines[i])
            except orjson.JSONDecodeError as exc:
                fused = fused_records(lines[i])
                if fused:
                    self._corrupt(base + i + 1, nul_run(lines[i]) or fused)
                if i == last and not torn_tail:
                    # An unparsable final line is a write the crash cut short: drop it.
                    good = end - len(lines[i]) - 1
                    lines.pop()
                    break
                why = nul_run(lines[i]) or f"not JSON: {exc}"
                raise TranscriptCorrupt(str(self.path), base + i + 1, why) from None
            # The common entry, inlined (this loop runs once per line of the file); anything
            # else, or anything wrong, takes the general path, which also reports errors.
            if fast and type(entry) is dict and entry.get("type") == "message":
                eid = entry.get("id")
                if type(eid) is str:
                    try:
                        message = from_dict(entry.get("message"), "message entry")
                    except ProtocolError as exc:
                        self._corrupt(base + i + 1, str(exc))
                    if eid in carried:
                        self._repeated(entry, base + i + 1, line_at)
                    mid = message.id
                    if mid in view:
                        replaced.append(line_at)
                    view[mid] = message
                    latest[mid] = eid
                    carried[eid] = mid
                    at[mid] = (eid, line_at, len(lines[i]))
                    self._last_entry_id = eid
                    continue
            self._apply(entry, base + i + 1, line_at, len(lines[i]))
        if torn_tail:
            # A cut-short write is a prefix of one entry; a whole entry inside it means a
            # committed record lost its newline: damage, never a tail to cut off.
            fused = torn_tail_damage(data[end:])
            if fused:
                self._corrupt(base + len(lines) + 1, fused)
        self._good_size += good
        self._good_lines += len(lines)

    def _read_header(self, line: bytes | None, nonempty: bool) -> None:
        path = str(self.path)
        if line is None:
            why = "the session header line is incomplete" if nonempty else "the file is empty"
            raise TranscriptCorrupt(path, 1, why)
        try:
            header = orjson.loads(line)
        except orjson.JSONDecodeError as exc:
            raise TranscriptCorrupt(path, 1, f"session header is not JSON: {exc}") from None
        if not isinstance(header, dict) or header.get("type") != "session":
            raise TranscriptCorrupt(path, 1, 'the first line is not a {"type":"session"} header')
        self._header = header

    def _apply(self, entry: Any, line: int, offset: int, length: int) -> None:
        if type(entry) is not dict:
            self._corrupt(line, "entry is not a JSON object")
        if self._collect is not None:
            self._collect.append(entry)
        kind = entry.get("type")
        eid = entry.get("id")
        if not isinstance(eid, str):
            self._corrupt(line, f"{kind} entry lacks a string id")
        if eid in self._entry_message:
            self._repeated(entry, line, offset)
        if kind == "message":
            self._add_message((eid, offset, length), self._message(entry, "message", line))
        elif kind == "compaction":
            summary = self._message(entry, "compaction", line)
            first_kept = entry.get("firstKeptEntryId")
            if first_kept is not None and not isinstance(first_kept, str):
                self._corrupt(line, "compaction firstKeptEntryId must be a string or null")
            kept_from = self._entry_message.get(first_kept) if first_kept is not None else None
            if first_kept is not None and kept_from not in self._view:
                self._corrupt(
                    line, f"compaction firstKeptEntryId {first_kept!r} names no message in view"
                )
            self._compact((eid, offset, length), line, summary, kept_from)
        elif kind == "rollback":
            mid = entry.get("messageId")
            if not isinstance(mid, str):
                self._corrupt(line, "rollback entry lacks a string messageId")
            self._roll_back(eid, mid)
        else:
            self._corrupt(line, f"unknown entry type {kind!r}")

    def _message(self, entry: dict[str, Any], kind: str, line: int) -> Message:
        try:
            return message_from_dict(entry.get("message"), f"{kind} entry")
        except ProtocolError as exc:
            self._corrupt(line, str(exc))

    def _repeated(self, entry: dict[str, Any], line: int, offset: int) -> None:
        """An entry whose id an earlier one has: damage if it is the same record again."""
        why = duplicated_record(self.path, entry, offset)
        if why is not None:
            self._corrupt(line, why)

    def _corrupt(self, line: int, why: str) -> NoReturn:
        raise TranscriptCorrupt(str(self.path), line, why)

    # --- writing ----------------------------------------------------------------------------

    @_locked
    def append(self, messages: Sequence[Message]) -> None:
        """One step boundary: an entry per message whose snapshot changed, one write, one fsync."""
        self._sync_for_write()
        entries = message_entries(messages, self._view, self._last_entry_id, self._new_entry_id)
        lines = [line for _, _, line in entries]
        if not lines:
            return
        offset = start = self._write(lines)
        known = len(self._replaced)
        for eid, message, line in entries:
            self._add_message((eid, offset, len(line) - 1), message)
            offset += len(line)
        self._log_replacements(start, self._replaced[known:])
        self._write_index_if_stale()

    @_locked
    def rollback(self, message_id: str) -> None:
        """Durably drop `message_id` from the active view (see the module docstring)."""
        self._sync()
        if message_id not in self._view:
            return
        eid = self._new_entry_id(set())
        fields = b'"messageId":' + orjson.dumps(message_id)
        start = self._write([entry_bytes("rollback", eid, self._last_entry_id, fields)])
        self._roll_back(eid, message_id)
        self._log_replacements(start, [])
        self._write_index_if_stale()

    @_locked
    def append_compaction(
        self,
        summary_message: Message,
        *,
        summary: str,
        first_kept_message_id: str | None,
        tokens_before: int,
        details: Mapping[str, Any] | None = None,
    ) -> str:
        """Record a compaction: the view becomes `[summary_message]` plus the view from
        `first_kept_message_id` on (None keeps nothing). Returns the entry id."""
        self._sync_for_write()
        if first_kept_message_id is not None and first_kept_message_id not in self._view:
            raise ValueError(f"message {first_kept_message_id!r} is not in the active view")
        first_kept = (
            self._latest_entry[first_kept_message_id] if first_kept_message_id is not None else None
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
        body = orjson.dumps(fields)[1:-1]  # the object's members, spliced after the common keys
        line = entry_bytes("compaction", eid, self._last_entry_id, body)
        offset = self._write([line])
        self._compact((eid, offset, len(line) - 1), self._good_lines, summary_message, first_kept_message_id)
        self._log_replacements(offset, [])
        self._index_stale = True
        self._write_index_if_stale()
        return eid

    def _write_index_if_stale(self) -> None:
        """Record the view after the last compaction for the next resume (`resume_index`)."""
        if not self._index_stale or self._compaction is None or self._key is None:
            return
        where, line, kept = self._compaction
        if kept is not None:  # None: a kept message whose entry this reader never saw
            resume_index.write(self.path, self._key[0], where, line, kept)
        self._index_stale = False

    def _log_replacements(self, start: int, new: list[int]) -> None:
        """Log the append that began at `start` for readers walking back (`replacements`)."""
        if self._key is None or self._cover_from is None or self._last_entry_id is None:
            self._log_end = None  # foreign bytes on disk: the next reader reads in full
            return
        self._log_end = replacements.record(
            self.path, self._key[0], known_end=self._log_end, start=start, end=self._good_size,
            last_entry_id=self._last_entry_id, new=new, cover_from=self._cover_from,
            every=self._replaced,
        )

    def _new_entry_id(self, taken: set[str]) -> str:
        # 8 hex digits collide by the birthday bound in long files; ids must stay unique
        # because firstKeptEntryId and parentId refer to them.
        while True:
            eid = os.urandom(4).hex()
            if eid not in self._entry_message and eid not in taken:
                taken.add(eid)
                return eid

    def _sync_for_write(self) -> None:
        self._sync()
        if self._header is None:
            self.ensure_created()
            self._sync()

    def _write(self, lines: list[bytes]) -> int:
        """Append `lines` durably; returns the offset they start at."""
        payload = b"".join(lines)
        torn = self._disk_size > self._good_size
        try:
            st = append_durably(self.path, payload, self._good_size, torn=torn)
        except OSError:
            self._key = None  # what is on disk is unknown: the next read starts over
            raise
        offset = self._good_size
        self._good_size += len(payload)
        self._good_lines += len(lines)
        self._disk_size = self._good_size
        # Anything but our own bytes on disk (a writer ignoring the turn lock) forces a re-read.
        expected = st.st_size == self._good_size
        self._key = (st.st_ino, st.st_size, st.st_mtime_ns) if expected else None
        return offset


@contextlib.contextmanager
def _gc_paused() -> Iterator[None]:
    """Parsing 100k entries allocates millions of objects that all live; letting the cyclic
    collector rescan them every few thousand allocations costs more than the parse itself."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


__all__ = ["Transcript", "TranscriptCorrupt", "entry_timestamp", "settle_orphaned_tool_calls"]
