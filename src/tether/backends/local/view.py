"""A transcript's active view and the rules that edit it, entry by entry (reference §4.3): a
message entry joins the end or replaces its message's snapshot in place, a compaction leaves
`[summary] + the view from the first kept message`, a rollback removes one message. Beside the
view it keeps what the sidecars record: where each message's latest entry lies (the resume
index) and which entries replaced a message in place (the replacement log)."""

from __future__ import annotations

from tether.backends.local.resume_index import Where
from tether.protocol.messages import Message


class ActiveView:
    """The view's state and edits; `Transcript` reads and writes the file around them."""

    def _reset_view(self) -> None:
        self._view: dict[str, Message] = {}
        self._latest_entry: dict[str, str] = {}  # message id in view -> its latest entry id
        self._entry_message: dict[str, str | None] = {}  # entry id -> message id it carried
        self._last_entry_id: str | None = None
        # Where each message in view has its latest entry, and the last compaction entry (with
        # its line number): what the resume index records (`resume_index`).
        self._at: dict[str, Where] = {}
        # (entry, line number, the kept messages' latest entries as they were at it)
        self._compaction: tuple[Where, int, list[tuple[str, Where]] | None] | None = None
        # Offsets of the message entries from `_cover_from` on that replaced a message in view:
        # what the replacement log records (`replacements`).
        self._cover_from: int | None = None
        self._replaced: list[int] = []

    def _note_entry(self, eid: str, message_id: str | None) -> None:
        self._entry_message[eid] = message_id
        self._last_entry_id = eid

    def _add_message(self, where: Where, message: Message) -> None:
        eid = where[0]
        if message.id in self._view:
            self._replaced.append(where[1])
        self._view[message.id] = message  # an existing key keeps its place: replaced in place
        self._latest_entry[message.id] = eid
        self._at[message.id] = where
        self._note_entry(eid, message.id)

    def _compact(self, where: Where, line: int, summary: Message, kept_from: str | None) -> None:
        eid = where[0]
        kept: list[str] = []
        if kept_from is not None:
            ids = list(self._view)
            kept = ids[ids.index(kept_from) :]
        view = {summary.id: summary}
        latest = {summary.id: eid}
        at: dict[str, Where] = {}
        for mid in kept:
            if mid != summary.id:
                view[mid] = self._view[mid]
                latest[mid] = self._latest_entry[mid]
                if mid in self._at:
                    at[mid] = self._at[mid]
        # In place: the parse loop holds references to these dicts.
        self._view.clear()
        self._view.update(view)
        self._latest_entry.clear()
        self._latest_entry.update(latest)
        self._at.clear()
        self._at.update(at)
        self._at[summary.id] = where  # its latest entry, should a later compaction keep it
        snapshot = [(mid, at[mid]) for mid in view if mid != summary.id and mid in at]
        complete = len(snapshot) == len(view) - 1 if summary.id in view else False
        self._compaction = (where, line, snapshot if complete else None)
        self._note_entry(eid, summary.id)
        self._cover_from = where[1] + where[2] + 1  # before it, the resume index tells
        self._replaced.clear()

    def _roll_back(self, eid: str, message_id: str) -> None:
        # A rollback of a message not in view (already compacted away) changes nothing.
        self._view.pop(message_id, None)
        self._latest_entry.pop(message_id, None)
        self._at.pop(message_id, None)
        self._note_entry(eid, None)
