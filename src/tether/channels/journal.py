"""The gateway's durable journal (`$TETHER_HOME/channels/gateway.db`, SQLite WAL,
synchronous=FULL): inbound messages keyed by platform message id (an adapter acknowledges the
platform only after `receive` has committed; a redelivery is recognised and dropped), their
progress (queued → submitted:<route> when the server accepted it → answered:<route> when its
turn ended; handled:<why> when the gateway itself answered: a refusal, a command, pairing; a
message submitted on a link that went away is queued again when the link comes back, since a
server that restarted may have lost it, and its idempotency key keeps a server that did not
from running it twice), and outbound replies keyed by the agent's tool call id
(`sending` before the platform is called, `sent` with the platform's message id after), so a
reply is never sent twice: a retried call finds `sent` and answers from it, and one found
`sending` after a crash may have gone out and is not sent again.

`open_journal` picks it: this SQLite file, or with `tether channel-gateway --store
postgresql://…` `StoreJournal`, the same interface on the store's `channel_*` rows
(`backends/postgres/channel_journal.py`), where several gateways share one journal: `queued`
hands a message to one gateway only (claimed in the database), and a reply's `sending` is
refused to all but the first.
"""

from __future__ import annotations

import hashlib
import sqlite3
import time
from pathlib import Path
from typing import Any

import orjson

from tether.backends.local import sqlite_full
from tether.channels.plugins import InboundMessage
from tether.errors import ReplyTaken

SCHEMA = """
CREATE TABLE IF NOT EXISTS inbox (
  seq INTEGER PRIMARY KEY AUTOINCREMENT,
  channel TEXT NOT NULL, account TEXT NOT NULL, message_id TEXT NOT NULL,
  body BLOB NOT NULL, state TEXT NOT NULL, received_at REAL NOT NULL,
  UNIQUE (channel, account, message_id)
);
CREATE TABLE IF NOT EXISTS outbox (
  tool_call_id TEXT PRIMARY KEY, channel TEXT NOT NULL, account TEXT NOT NULL,
  chat_id TEXT NOT NULL, state TEXT NOT NULL, result BLOB, updated_at REAL NOT NULL
);
CREATE TABLE IF NOT EXISTS paused (chat TEXT PRIMARY KEY);
CREATE TABLE IF NOT EXISTS runtimes (
  route TEXT PRIMARY KEY, agent_id TEXT NOT NULL, conversation_id TEXT NOT NULL
);
"""


class Journal:
    def __init__(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.db = sqlite_full.connect(path, "write the channels journal", isolation_level=None)
        self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=FULL")
        self.db.executescript(SCHEMA)

    def close(self) -> None:
        self.db.close()

    # --- inbound ---------------------------------------------------------------------------

    def receive(self, msg: InboundMessage) -> bool:
        """Record an inbound message; False when this message id was seen before."""
        message_id, body = inbound_row(msg)
        cur = self.db.execute(
            "INSERT OR IGNORE INTO inbox (channel, account, message_id, body, state, received_at)"
            " VALUES (?, ?, ?, ?, 'queued', ?)",
            (msg.channel, msg.account_id, message_id, body, time.time()),
        )
        return cur.rowcount == 1

    def queued(self) -> list[tuple[int, InboundMessage]]:
        """The queued messages to handle now, oldest first (one gateway per home: all)."""
        rows = self.db.execute(
            "SELECT seq, body FROM inbox WHERE state = 'queued' ORDER BY seq"
        ).fetchall()
        return [(seq, InboundMessage(**orjson.loads(body))) for seq, body in rows]

    def unanswered(self) -> list[int]:
        """Messages a server accepted whose turn is not known to have ended."""
        rows = self.db.execute(
            "SELECT seq FROM inbox WHERE state LIKE 'submitted:%' ORDER BY seq"
        ).fetchall()
        return [int(seq) for (seq,) in rows]

    def handled(self, seq: int, state: str = "handled") -> None:
        self.db.execute("UPDATE inbox SET state = ? WHERE seq = ?", (state, seq))

    def message(self, seq: int) -> tuple[str, InboundMessage] | None:
        row = self.db.execute("SELECT state, body FROM inbox WHERE seq = ?", (seq,)).fetchone()
        return None if row is None else (str(row[0]), InboundMessage(**orjson.loads(row[1])))

    def answered(self, seq: int, state: str | None = None) -> bool:
        """A submitted message's turn ended: `answered:<route>` (or `state`). False when the
        message was not waiting for its turn."""
        cur = self.db.execute(
            "UPDATE inbox SET state = COALESCE(?, 'answered:' || substr(state, 11))"
            " WHERE seq = ? AND state LIKE 'submitted:%'",
            (state, seq),
        )
        return cur.rowcount == 1

    def requeue(self, seq: int) -> bool:
        """A submitted message whose turn has not ended goes back to the queue (the link it
        was submitted on went away: the server may have restarted without it)."""
        cur = self.db.execute(
            "UPDATE inbox SET state = 'queued' WHERE seq = ? AND state LIKE 'submitted:%'",
            (seq,),
        )
        return cur.rowcount == 1

    def last_chat(self, route: str) -> dict[str, Any] | None:
        """The newest message handed to a route's runtime (where its approvals are asked)."""
        row = self.db.execute(
            "SELECT body FROM inbox WHERE state IN (?, ?) ORDER BY seq DESC LIMIT 1",
            (f"submitted:{route}", f"answered:{route}"),
        ).fetchone()
        return orjson.loads(row[0]) if row else None

    def chats_of(self, route: str) -> set[tuple[str, str, str]]:
        rows = self.db.execute(
            "SELECT body FROM inbox WHERE state IN (?, ?)",
            (f"submitted:{route}", f"answered:{route}"),
        ).fetchall()
        out = set()
        for (body,) in rows:
            b = orjson.loads(body)
            out.add((b["channel"], b["account_id"], b["chat_id"]))
        return out

    def route_conversation(self, route: str, agent_id: str) -> str | None:
        """The conversation a `conversation: new` route was given the first time."""
        row = self.db.execute(
            "SELECT conversation_id FROM runtimes WHERE route = ? AND agent_id = ?",
            (route, agent_id),
        ).fetchone()
        return str(row[0]) if row else None

    def remember_conversation(self, route: str, agent_id: str, conversation_id: str) -> None:
        self.db.execute(
            "INSERT OR REPLACE INTO runtimes (route, agent_id, conversation_id) VALUES (?, ?, ?)",
            (route, agent_id, conversation_id),
        )

    def pause(self, chat: tuple[str, str, str], paused: bool) -> None:
        key = "/".join(chat)
        if paused:
            self.db.execute("INSERT OR IGNORE INTO paused (chat) VALUES (?)", (key,))
        else:
            self.db.execute("DELETE FROM paused WHERE chat = ?", (key,))

    def is_paused(self, chat: tuple[str, str, str]) -> bool:
        key = "/".join(chat)
        return self.db.execute("SELECT 1 FROM paused WHERE chat = ?", (key,)).fetchone() is not None

    # --- outbound --------------------------------------------------------------------------

    def reply_state(self, tool_call_id: str) -> tuple[str, Any] | None:
        row = self.db.execute(
            "SELECT state, result FROM outbox WHERE tool_call_id = ?", (tool_call_id,)
        ).fetchone()
        if row is None:
            return None
        return row[0], orjson.loads(row[1]) if row[1] is not None else None

    def reply_sending(self, tool_call_id: str, channel: str, account: str, chat_id: str) -> None:
        try:
            self.db.execute(
                "INSERT INTO outbox (tool_call_id, channel, account, chat_id, state, updated_at)"
                " VALUES (?, ?, ?, ?, 'sending', ?)",
                (tool_call_id, channel, account, chat_id, time.time()),
            )
        except sqlite3.IntegrityError:
            raise ReplyTaken(f"the reply of tool call {tool_call_id} is already being sent:"
                             " it is not sent twice") from None

    def reply_settled(self, tool_call_id: str, state: str, result: Any) -> None:
        self.db.execute(
            "UPDATE outbox SET state = ?, result = ?, updated_at = ? WHERE tool_call_id = ?",
            (state, orjson.dumps(result), time.time(), tool_call_id),
        )

    def reply_forget(self, tool_call_id: str) -> None:
        """A send that provably did not reach the platform (refused before any request)."""
        self.db.execute("DELETE FROM outbox WHERE tool_call_id = ?", (tool_call_id,))


def inbound_row(msg: InboundMessage) -> tuple[str, bytes]:
    """The message id a message is journaled under (its platform's, or a digest stable across
    processes, unlike hash()) and its body."""
    message_id = msg.message_id or hashlib.sha256(
        f"{msg.chat_id}\0{msg.timestamp}\0{msg.text}".encode()
    ).hexdigest()[:24]
    body = orjson.dumps({
        "channel": msg.channel, "account_id": msg.account_id, "chat_id": msg.chat_id,
        "sender_id": msg.sender_id, "text": msg.text, "timestamp": msg.timestamp,
        "message_id": message_id, "sender_name": msg.sender_name,
        "thread_id": msg.thread_id, "chat_type": msg.chat_type, "is_mention": msg.is_mention,
    })
    return message_id, body


class StoreJournal(Journal):
    """`Journal` on the PostgreSQL store, shared by every gateway pointed at it (`store`: a
    `PgChannelJournal`, this gateway's session): every method is overridden, no SQLite file
    is opened (a subclass so the gateway and `turns.py` take either)."""

    def __init__(self, store: Any) -> None:  # noqa: D107 - no SQLite: super() not called
        self.store = store

    def close(self) -> None:
        self.store.close()

    def receive(self, msg: InboundMessage) -> bool:
        message_id, body = inbound_row(msg)
        return bool(self.store.receive(msg.channel, msg.account_id, message_id, body))

    def queued(self) -> list[tuple[int, InboundMessage]]:
        """The queued messages this gateway handles: claimed in the database, so no other
        gateway handles them while this one lives."""
        return [(seq, InboundMessage(**orjson.loads(body)))
                for seq, body in self.store.claim_queued()]

    def unanswered(self) -> list[int]:
        """Submitted messages whose turn has not ended: this gateway's, and a gone gateway's
        (now this one's to wait for, or queue again)."""
        return [int(seq) for seq in self.store.claim_unanswered()]

    def handled(self, seq: int, state: str = "handled") -> None:
        self.store.set_state(seq, state)

    def message(self, seq: int) -> tuple[str, InboundMessage] | None:
        row = self.store.message(seq)
        return None if row is None else (row[0], InboundMessage(**orjson.loads(row[1])))

    def answered(self, seq: int, state: str | None = None) -> bool:
        return bool(self.store.answered(seq, state))

    def requeue(self, seq: int) -> bool:
        return bool(self.store.requeue(seq))

    def last_chat(self, route: str) -> dict[str, Any] | None:
        bodies = self.store.bodies_of(route, newest_only=True)
        return orjson.loads(bodies[0]) if bodies else None

    def chats_of(self, route: str) -> set[tuple[str, str, str]]:
        out = set()
        for body in self.store.bodies_of(route):
            b = orjson.loads(body)
            out.add((b["channel"], b["account_id"], b["chat_id"]))
        return out

    def route_conversation(self, route: str, agent_id: str) -> str | None:
        found = self.store.route_conversation(route, agent_id)
        return None if found is None else str(found)

    def remember_conversation(self, route: str, agent_id: str, conversation_id: str) -> None:
        self.store.remember_conversation(route, agent_id, conversation_id)

    def pause(self, chat: tuple[str, str, str], paused: bool) -> None:
        self.store.pause("/".join(chat), paused)

    def is_paused(self, chat: tuple[str, str, str]) -> bool:
        return bool(self.store.is_paused("/".join(chat)))

    def reply_state(self, tool_call_id: str) -> tuple[str, Any] | None:
        row = self.store.reply_state(tool_call_id)
        if row is None:
            return None
        return row[0], orjson.loads(row[1]) if row[1] is not None else None

    def reply_sending(self, tool_call_id: str, channel: str, account: str, chat_id: str) -> None:
        self.store.reply_sending(tool_call_id, channel, account, chat_id)

    def reply_settled(self, tool_call_id: str, state: str, result: Any) -> None:
        self.store.reply_settled(tool_call_id, state, orjson.dumps(result))

    def reply_forget(self, tool_call_id: str) -> None:
        self.store.reply_forget(tool_call_id)


def open_journal(home: Path, store: str | None = None) -> Journal:
    """The gateway's journal: `$TETHER_HOME/channels/gateway.db`, or the PostgreSQL store at
    `store` (a `postgresql://` URL), this process registered there as gateway
    host:pid:nonce."""
    if store is None:
        return Journal(home / "channels" / "gateway.db")
    import os
    import socket
    import uuid

    from tether.backends.postgres.channel_journal import open_channel_journal

    name = f"gateway:{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
    return StoreJournal(open_channel_journal(store, name))
