"""Conversations and their messages: create, list, update, full-text search and transcripts."""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import replace
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson

from tether.backends.local.records import ConversationRecord, utc_now_iso
from tether.backends.local.store import DEFAULT_CONVERSATION, LocalStore
from tether.errors import UsageError
from tether.protocol.messages import Message, TextPart, ToolResultMessage, UserMessage

SEARCH_MODES = ("fts", "vector", "hybrid")
EDITABLE = ("summary", "archived")
_WORD = re.compile(r"\w+", re.UNICODE)


def create_conversation(
    home: Path, agent_id: str, *, summary: str | None = None, hidden: bool = False
) -> dict[str, Any]:
    """A new conversation of the agent; a `hidden` one is left out of lists unless asked for
    (the reference's `hidden` conversations: forks, a subagent's or a client's scratch)."""
    store = LocalStore(home)
    record = store.create_conversation(agent_id)
    if hidden:
        record = replace(record, extra={**record.extra, "hidden": True})
        store.save_conversation(record)
    if summary is not None:
        record = _update(store, record, {"summary": summary})
    return record.to_dict()


def get_conversation(home: Path, conversation_id: str, agent_id: str | None = None) -> dict[str, Any]:
    return LocalStore(home).get_conversation(conversation_id, agent_id).to_dict()


def list_conversations(
    home: Path,
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
    store = LocalStore(home)
    store.get_agent(agent_id)  # NotFound names it
    rows = [r for r in store.list_conversations(agent_id)
            if (include_archived or not r.archived)
            and (include_hidden or r.extra.get("hidden") is not True)]
    return [r.to_dict() for r in rows[-limit:]]


def update_conversation(
    home: Path, conversation_id: str, changes: Mapping[str, Any], agent_id: str | None = None
) -> dict[str, Any]:
    store = LocalStore(home)
    return _update(store, store.get_conversation(conversation_id, agent_id), changes).to_dict()


def _update(store: LocalStore, record: ConversationRecord, changes: Mapping[str, Any]) -> ConversationRecord:
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
    home: Path,
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
    for record in _conversations(home, agent_id, conversation_id):
        for message in _messages(home, record):
            text = message_text(message)
            lowered = text.lower()
            if all(w in lowered for w in words):
                hits.append(_hit(record, message, text))
    hits.sort(key=lambda h: h["timestamp"], reverse=True)
    return hits[:limit]


def transcript(home: Path, conversation_id: str, agent_id: str | None = None) -> dict[str, Any]:
    """The conversation's active view as readable text (`role: text` blocks) with its ids."""
    store = LocalStore(home)
    if conversation_id == DEFAULT_CONVERSATION and agent_id is None:
        raise UsageError("--conversation default belongs to an agent: add --agent <id>")
    record = store.get_conversation(conversation_id, agent_id)
    messages = _messages(home, record)
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
    home: Path, agent_id: str | None, conversation_id: str | None
) -> Iterator[ConversationRecord]:
    store = LocalStore(home)
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


def _messages(home: Path, record: ConversationRecord) -> list[Message]:
    """The active view, read without creating anything (a conversation never sent is empty)."""
    from tether.backends.local.transcript import Transcript

    path = LocalStore(home).conversation_dir(record.agent_id, record.id) / "messages.jsonl"
    if not path.is_file():
        return []
    return Transcript(path).load()


MESSAGE_ORDERS = ("asc", "desc")


def letta_message_page(
    home: Path, record: ConversationRecord, *, limit: int = 50, order: str = "asc",
    before: str | None = None, after: str | None = None,
) -> list[dict[str, Any]]:
    """The conversation's active view as Letta API messages: those strictly between the
    `after` and `before` message ids (either may be absent), the `limit` newest of them, in
    `order` (oldest first for "asc"). An id the page does not hold is named as unknown."""
    from tether.protocol.letta_messages import letta_messages

    if order not in MESSAGE_ORDERS:
        raise UsageError(f"query.order must be one of {', '.join(MESSAGE_ORDERS)}, got {order!r}")
    rows = letta_messages(_messages(home, record))
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
    home: Path, record: ConversationRecord, *, hidden: bool = False
) -> dict[str, Any]:
    """A new conversation of the same agent whose history is a copy of `record`'s active view
    (read under its turn lock, so never half a turn); `hidden` and `forked_from` are kept on
    the new record."""
    from tether.backends.local.transcript import Transcript

    store = LocalStore(home)
    with store.turn_lock(record.agent_id, record.id):
        messages = _messages(home, record)
        created = store.create_conversation(record.agent_id)
        created = replace(created, extra={**created.extra, "hidden": hidden,
                                          "forked_from": record.id})
        store.save_conversation(created)
        if messages:
            transcript = Transcript(
                store.conversation_dir(created.agent_id, created.id) / "messages.jsonl")
            transcript.ensure_created()
            transcript.append(messages)
    return created.to_dict()
