"""The channel gateway's journal on the PostgreSQL store (`tether channel-gateway --store …`):
the `channel_*` rows `store migrate` copies `channels/gateway.db` into, used live, so gateway
processes on several machines share one inbox and outbox. An inbound message is recorded once
(its platform id is unique), handled by one gateway (the one whose claim set `owner`; a
gateway is a worker here, alive while its database session is, so a dead one's messages pass to
the next that asks), and a reply is sent once (its tool call id is the outbox's key: the second
`sending` is refused). Bodies and results are the caller's bytes (`channels/journal.py` turns
them into messages), so this L2 adapter never imports the channels package.
"""

from __future__ import annotations

from tether.backends.postgres import logs
from tether.backends.postgres.connection import PgSession
from tether.backends.postgres.presence import ALIVE
from tether.errors import ReplyTaken

_SEQ_LOCK = 0x7E7E_C4A7  # pg_advisory_xact_lock key: inbox numbers handed out one at a time
_MINE_OR_GONE = (
    "(owner IS NULL OR owner = %s OR NOT " + ALIVE.format(w="channel_inbox.owner") + ")"
)


class PgChannelJournal:
    """One gateway's view of the shared journal, on its own session (named `session.worker`)."""

    def __init__(self, session: PgSession) -> None:
        self.session = session
        self.me = session.worker

    def close(self) -> None:
        self.session.close()

    # --- inbound ---------------------------------------------------------------------------

    def receive(self, channel: str, account: str, message_id: str, body: bytes) -> bool:
        """Record an inbound message (state queued, no owner); False when it was seen before."""
        with self.session.transaction("journal an inbound message") as cur:
            cur.execute("SELECT pg_advisory_xact_lock(%s)", (_SEQ_LOCK,))
            cur.execute(
                "INSERT INTO channel_inbox (seq, channel, account, message_id, body, state,"
                " received_at) SELECT COALESCE(max(seq), 0) + 1, %s, %s, %s, %s, 'queued',"
                " clock_timestamp() FROM channel_inbox"
                " ON CONFLICT (channel, account, message_id) DO NOTHING",
                (channel, account, message_id, body),
            )
            return cur.rowcount == 1

    def claim_queued(self) -> list[tuple[int, bytes]]:
        """The queued messages this gateway handles now, oldest first: unclaimed ones, its
        own, and those of gateways that are gone, all made its own in one commit (rows another
        claimant is taking are skipped, not waited for)."""
        with self.session.transaction("claim queued inbound messages") as cur:
            rows = cur.execute(
                "UPDATE channel_inbox SET owner = %s WHERE seq IN (SELECT seq FROM channel_inbox"
                " WHERE state = 'queued' AND " + _MINE_OR_GONE + " ORDER BY seq"
                " FOR UPDATE SKIP LOCKED) RETURNING seq, body, owner",
                (self.me, self.me),
            ).fetchall()
        rows.sort(key=lambda r: int(r[0]))
        return [(int(seq), bytes(body)) for seq, body, _ in rows]

    def claim_unanswered(self) -> list[int]:
        """Messages submitted by this gateway or a gone one whose turn is not known to have
        ended, now this gateway's to wait for (or queue again)."""
        with self.session.transaction("claim unanswered inbound messages") as cur:
            rows = cur.execute(
                "UPDATE channel_inbox SET owner = %s WHERE seq IN (SELECT seq FROM channel_inbox"
                " WHERE state LIKE 'submitted:%%' AND " + _MINE_OR_GONE
                + " FOR UPDATE SKIP LOCKED) RETURNING seq", (self.me, self.me),
            ).fetchall()
        return sorted(int(r[0]) for r in rows)

    def set_state(self, seq: int, state: str) -> bool:
        """A message this gateway holds moves to `state`; False (nothing written) when another
        gateway took it meanwhile."""
        with self.session.transaction("record a message's progress") as cur:
            cur.execute(
                "UPDATE channel_inbox SET state = %s WHERE seq = %s AND (owner IS NULL OR"
                " owner = %s)", (state, seq, self.me),
            )
            moved = cur.rowcount == 1
        if not moved:
            logs.event("write_refused", f"{self.me} may not move inbound message {seq}: another"
                       " gateway handles it", worker=self.me, inbound=seq, state=state)
        return moved

    def message(self, seq: int) -> tuple[str, bytes] | None:
        with self.session.transaction("read an inbound message") as cur:
            row = cur.execute(
                "SELECT state, body FROM channel_inbox WHERE seq = %s", (seq,)
            ).fetchone()
        return None if row is None else (str(row[0]), bytes(row[1]))

    def answered(self, seq: int, state: str | None) -> bool:
        with self.session.transaction("record a message answered") as cur:
            cur.execute(
                "UPDATE channel_inbox SET state = COALESCE(%s, 'answered:' || substr(state, 11))"
                " WHERE seq = %s AND state LIKE 'submitted:%%'", (state, seq),
            )
            return cur.rowcount == 1

    def requeue(self, seq: int) -> bool:
        with self.session.transaction("queue a message again") as cur:
            cur.execute(
                "UPDATE channel_inbox SET state = 'queued' WHERE seq = %s"
                " AND state LIKE 'submitted:%%' AND (owner IS NULL OR owner = %s)", (seq, self.me),
            )
            return cur.rowcount == 1

    def bodies_of(self, route: str, newest_only: bool = False) -> list[bytes]:
        """Bodies of the messages handed to a route's runtime (newest first when limited)."""
        with self.session.transaction("read a route's messages") as cur:
            rows = cur.execute(
                "SELECT body FROM channel_inbox WHERE state = ANY(%s) ORDER BY seq DESC"
                + (" LIMIT 1" if newest_only else ""),
                ([f"submitted:{route}", f"answered:{route}"],),
            ).fetchall()
        return [bytes(r[0]) for r in rows]

    def route_conversation(self, route: str, agent_id: str) -> str | None:
        with self.session.transaction("read a route's conversation") as cur:
            row = cur.execute(
                "SELECT conversation_id FROM channel_runtimes WHERE route = %s AND agent_id = %s",
                (route, agent_id),
            ).fetchone()
        return None if row is None else str(row[0])

    def remember_conversation(self, route: str, agent_id: str, conversation_id: str) -> None:
        with self.session.transaction("remember a route's conversation") as cur:
            cur.execute(
                "INSERT INTO channel_runtimes (route, agent_id, conversation_id) VALUES"
                " (%s, %s, %s) ON CONFLICT (route) DO UPDATE SET agent_id = EXCLUDED.agent_id,"
                " conversation_id = EXCLUDED.conversation_id", (route, agent_id, conversation_id),
            )

    def pause(self, chat: str, paused: bool) -> None:
        with self.session.transaction("pause a chat") as cur:
            if paused:
                cur.execute("INSERT INTO channel_paused (chat) VALUES (%s) ON CONFLICT DO NOTHING",
                            (chat,))
            else:
                cur.execute("DELETE FROM channel_paused WHERE chat = %s", (chat,))

    def is_paused(self, chat: str) -> bool:
        with self.session.transaction("read a chat's pause") as cur:
            return cur.execute(
                "SELECT 1 FROM channel_paused WHERE chat = %s", (chat,)
            ).fetchone() is not None

    # --- outbound --------------------------------------------------------------------------

    def reply_state(self, tool_call_id: str) -> tuple[str, bytes | None] | None:
        with self.session.transaction("read a reply's state") as cur:
            row = cur.execute(
                "SELECT state, result FROM channel_outbox WHERE tool_call_id = %s", (tool_call_id,)
            ).fetchone()
        if row is None:
            return None
        return str(row[0]), None if row[1] is None else bytes(row[1])

    def reply_sending(self, tool_call_id: str, channel: str, account: str, chat_id: str) -> None:
        with self.session.transaction("record a reply being sent") as cur:
            cur.execute(
                "INSERT INTO channel_outbox (tool_call_id, channel, account, chat_id, state,"
                " updated_at) VALUES (%s, %s, %s, %s, 'sending', clock_timestamp())"
                " ON CONFLICT (tool_call_id) DO NOTHING", (tool_call_id, channel, account, chat_id),
            )
            if cur.rowcount != 1:
                raise ReplyTaken(f"the reply of tool call {tool_call_id} is already being sent"
                                 " (by this or another gateway): it is not sent twice")

    def reply_settled(self, tool_call_id: str, state: str, result: bytes) -> None:
        with self.session.transaction("record a reply's outcome") as cur:
            cur.execute(
                "UPDATE channel_outbox SET state = %s, result = %s, updated_at = clock_timestamp()"
                " WHERE tool_call_id = %s", (state, result, tool_call_id),
            )

    def reply_forget(self, tool_call_id: str) -> None:
        with self.session.transaction("forget a reply") as cur:
            cur.execute("DELETE FROM channel_outbox WHERE tool_call_id = %s", (tool_call_id,))


def open_channel_journal(url: str, gateway: str) -> PgChannelJournal:
    """Connect now (schema migrated, the gateway registered as a worker), naming the database
    without its password when it cannot."""
    session = PgSession(url, gateway)
    session.open()
    return PgChannelJournal(session)
