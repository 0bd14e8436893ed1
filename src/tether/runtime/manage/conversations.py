"""Conversations and their messages: create, list, update, full-text search and transcripts."""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

import orjson

from tether.backends.local.records import ConversationRecord, utc_now_iso
from tether.backends.local.store import DEFAULT_CONVERSATION
from tether.errors import UsageError
from tether.protocol.messages import Message, TextPart, ToolResultMessage, UserMessage

if TYPE_CHECKING:
    from tether.backends.store_api import ConversationStore

SEARCH_MODES = ("fts", "vector", "hybrid")
EDITABLE = ("summary", "archived")
_WORD = re.compile(r"\w+", re.UNICODE)


def create_conversation(
    store: ConversationStore, agent_id: str, *, summary: str | None = None, hidden: bool = False
) -> dict[str, Any]:
    """A new conversation of the agent; a `hidden` one is left out of lists unless asked for
    (the reference's `hidden` conversations: forks, a subagent's or a client's scratch)."""
    record = store.create_conversation(agent_id, extra={"hidden": True} if hidden else None)
    if summary is not None:
        record = _update(store, record, {"summary": summary})
    return record.to_dict()


def get_conversation(store: ConversationStore, conversation_id: str, agent_id: str | None = None) -> dict[str, Any]:
    return store.get_conversation(conversation_id, agent_id).to_dict()


def list_conversations(
    store: ConversationStore,
    agent_id: str,
    *,
    include_archived: bool = False,
    include_hidden: bool = False,
    limit: int = 50,
) -> list[dict[str, Any]]:
    """The agent's conversations, oldest first; archived and hidden ones only when asked for
    (the reference lists a hidden conversation only with `include_hidden: true`)."""
    if limit < 1:
        raise UsageError(f"--limit must be at least 1, got {limit}")
    store.get_agent(agent_id)  # NotFound names it
    rows = [r for r in store.list_conversations(agent_id)
            if (include_archived or not r.archived)
            and (include_hidden or r.extra.get("hidden") is not True)]
    return [r.to_dict() for r in rows[-limit:]]


def update_conversation(
    store: ConversationStore, conversation_id: str, changes: Mapping[str, Any], agent_id: str | None = None
) -> dict[str, Any]:
    return _update(store, store.get_conversation(conversation_id, agent_id), changes).to_dict()


def _update(store: ConversationStore, record: ConversationRecord, changes: Mapping[str, Any]) -> ConversationRecord:
    if not changes:
        raise UsageError(f"nothing to change on {record.id}: give {' or '.join(EDITABLE)}")
    now = utc_now_iso()
    fields: dict[str, Any] = {}
    for key, value in changes.items():
        if key == "summary":
            if value is not None and not isinstance(value, str):
                raise UsageError(f"summary must be a string or null, got {value!r}")
            fields["summary"] = value
        elif key == "archived":
            if not isinstance(value, bool):
                raise UsageError(f"archived must be true or false, got {value!r}")
            fields["archived"] = value
            fields["archived_at"] = now if value else None
        else:
            raise UsageError(f"unknown conversation field {key!r}; one may change "
                             f"{', '.join(EDITABLE)}")
    updated = replace(record, **fields, updated_at=now)
    store.save_conversation(updated)
    return updated


# --- messages ---------------------------------------------------------------------------------


def search_messages(
    store: ConversationStore,
    query: str,
    *,
    mode: str = "fts",
    agent_id: str | None = None,
    conversation_id: str | None = None,
    limit: int = 20,
) -> list[dict[str, Any]]:
    """Messages whose text holds every word of `query` (case-insensitive), newest first,
    across the local transcripts (of one agent or conversation when given)."""
    if mode not in SEARCH_MODES:
        raise UsageError(f"--mode must be one of {', '.join(SEARCH_MODES)}, got {mode!r}")
    if mode != "fts":
        raise UsageError(f"--mode {mode} needs embeddings, which only the hosted backend (a "
                         "Letta server) keeps; the local store searches with --mode fts")
    words = [w.lower() for w in _WORD.findall(query)]
    if not words:
        raise UsageError("--query needs at least one word to search for")
    if limit < 1:
        raise UsageError(f"--limit must be at least 1, got {limit}")
    hits = []
    for record in _conversations(store, agent_id, conversation_id):
        for message in _messages(store, record):
            text = message_text(message)
            lowered = text.lower()
            if all(w in lowered for w in words):
                hits.append(_hit(record, message, text))
    hits.sort(key=lambda h: h["timestamp"], reverse=True)
    return hits[:limit]


def transcript(store: ConversationStore, conversation_id: str, agent_id: str | None = None) -> dict[str, Any]:
    """The conversation's active view as readable text (`role: text` blocks) with its ids."""
    if conversation_id == DEFAULT_CONVERSATION and agent_id is None:
        raise UsageError("--conversation default belongs to an agent: add --agent <id>")
    record = store.get_conversation(conversation_id, agent_id)
    messages = _messages(store, record)
    blocks = []
    for message in messages:
        text = message_text(message)
        if text:
            blocks.append(f"{_role(message)}: {text}")
    return {"agent_id": record.agent_id, "conversation_id": record.id,
            "message_count": len(messages), "transcript": "\n\n".join(blocks)}


def message_text(message: Message) -> str:
    """What a reader sees of a message: its text, and a tool call's name and arguments."""
    if isinstance(message, UserMessage):
        return "".join(p.text for p in message.content if isinstance(p, TextPart))
    if isinstance(message, ToolResultMessage):
        return message.text
    parts = [message.text] if message.text else []
    for call in message.tool_calls:
        parts.append(f"[{call.name} {orjson.dumps(call.arguments).decode()}]")
    return "\n".join(parts)


def _role(message: Message) -> str:
    if isinstance(message, ToolResultMessage):
        return f"tool ({message.tool_name})"
    return message.role


def _hit(record: ConversationRecord, message: Message, text: str) -> dict[str, Any]:
    when = datetime.fromtimestamp(message.timestamp / 1000, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
    return {"id": message.id, "agent_id": record.agent_id, "conversation_id": record.id,
            "role": message.role, "date": when, "timestamp": message.timestamp, "text": text}


def _conversations(
    store: ConversationStore, agent_id: str | None, conversation_id: str | None
) -> Iterator[ConversationRecord]:
    if conversation_id is not None:
        if conversation_id == DEFAULT_CONVERSATION and agent_id is None:
            raise UsageError("--conversation default belongs to an agent: add --agent <id>")
        yield store.get_conversation(conversation_id, agent_id)
        return
    if agent_id is not None:
        yield from store.list_conversations(agent_id)
        return
    for agent in store.list_agents():
        yield from store.list_conversations(agent.id)


def _messages(store: ConversationStore, record: ConversationRecord) -> list[Message]:
    """The active view, read without creating anything (a conversation never sent is empty)."""
    return store.messages(record.agent_id, record.id)


MESSAGE_ORDERS = ("asc", "desc")


def letta_message_page(
    store: ConversationStore, record: ConversationRecord, *, limit: int = 50, order: str = "asc",
    before: str | None = None, after: str | None = None,
) -> list[dict[str, Any]]:
    """The conversation's active view as Letta API messages: those strictly between the
    `after` and `before` message ids (either may be absent), the `limit` newest of them, in
    `order` (oldest first for "asc"). An id the page does not hold is named as unknown."""
    from tether.protocol.letta_messages import letta_messages

    if order not in MESSAGE_ORDERS:
        raise UsageError(f"query.order must be one of {', '.join(MESSAGE_ORDERS)}, got {order!r}")
    rows = letta_messages(_messages(store, record))
    ids = [row["id"] for row in rows]
    start, end = 0, len(rows)
    for name, cursor in (("after", after), ("before", before)):
        if cursor is None:
            continue
        if cursor not in ids:
            raise UsageError(f"query.{name}: no message {cursor!r} in conversation {record.id}")
        if name == "after":
            start = ids.index(cursor) + 1
        else:
            end = ids.index(cursor)
    page = rows[start:end]
    page = page[:limit] if after is not None and before is None else page[-limit:]
    return page if order == "asc" else page[::-1]


def fork_conversation(
    store: ConversationStore, record: ConversationRecord, *, hidden: bool = False
) -> dict[str, Any]:
    """A new conversation of the same agent whose history is a copy of `record`'s active view
    (read under its turn lock, so never half a turn here; on a store shared by workers, a turn
    running elsewhere is copied as of its last step), made with the copy in one step; `hidden`
    and `forked_from` are kept on the new record."""
    with store.turn_lock(record.agent_id, record.id):
        messages = _messages(store, record)
        created = store.create_conversation(
            record.agent_id, extra={"hidden": hidden, "forked_from": record.id}, history=messages
        )
    return created.to_dict()
