"""Deleting is moving aside: a deleted agent or conversation goes to `$TETHER_HOME/trash/`
whole (records, transcripts, memory with its history), never removed, and only while no turn
holds one of its conversations."""

from __future__ import annotations

import contextlib
import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from tether.backends.local.store import DEFAULT_CONVERSATION, LocalStore, b64url


def delete_agent(home: Path, agent_id: str) -> dict[str, Any]:
    store = LocalStore(home)
    record = store.get_agent(agent_id)
    conversations = [c.id for c in store.list_conversations(record.id)]
    if DEFAULT_CONVERSATION not in conversations:
        conversations.append(DEFAULT_CONVERSATION)
    bin_ = _bin(home, record.id)
    with contextlib.ExitStack() as held:
        for conversation in conversations:
            if store.conversation_dir(record.id, conversation).is_dir():
                held.enter_context(store.turn_lock(record.id, conversation))
        moved = []
        for conversation in conversations:
            moved += _move(store.conversation_dir(record.id, conversation),
                           bin_ / "conversations" / b64url(conversation))
        moved += _move(home / "agents" / record.id, bin_ / "agent")
        moved += _move(home / "agents" / f"{b64url(record.id)}.json", bin_ / "agent.json")
    return {"id": record.id, "deleted": True, "trash": str(bin_), "moved": len(moved)}


def delete_conversation(home: Path, conversation_id: str, agent_id: str | None = None) -> dict[str, Any]:
    store = LocalStore(home)
    if conversation_id == DEFAULT_CONVERSATION:
        from tether.errors import UsageError

        raise UsageError("the `default` conversation is the agent's primary history; delete "
                         "the agent, or archive conversations instead")
    record = store.get_conversation(conversation_id, agent_id)
    bin_ = _bin(home, record.id)
    directory = store.conversation_dir(record.agent_id, record.id)
    with store.turn_lock(record.agent_id, record.id):
        _move(directory, bin_ / "conversation")
    return {"id": record.id, "agent_id": record.agent_id, "deleted": True, "trash": str(bin_)}


def _bin(home: Path, name: str) -> Path:
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S%fZ")
    path = home / "trash" / f"{stamp}-{name}"
    path.mkdir(parents=True, exist_ok=False)
    return path


def _move(source: Path, target: Path) -> list[Path]:
    if not source.exists():
        return []
    target.parent.mkdir(parents=True, exist_ok=True)
    os.replace(source, target)  # same file system: one rename, nothing copied or lost
    return [target]
