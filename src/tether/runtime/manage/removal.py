"""Deleting agents and conversations from the store (`backends/store_api.py`): refused while
any process runs a turn on them (the store's turn lock; on a store shared by workers, input
unfinished on any worker), and their schedules removed with them. An agent's
committed memory outlives it: its repository is bundled into `memory-backups/` (beside a copy
of the agent record) before anything is removed, and a backup that fails refuses the delete."""

from __future__ import annotations

import contextlib
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from tether.backends.local.locks import write_atomic
from tether.backends.local.store import DEFAULT_CONVERSATION
from tether.errors import UsageError

if TYPE_CHECKING:
    from tether.backends.local.records import AgentRecord
    from tether.backends.store_api import ConversationStore
    from tether.runtime.cron.store import CronStore


def delete_conversation(
    store: ConversationStore, conversation_id: str, agent_id: str | None = None
) -> dict[str, Any]:
    """Remove a conversation (record, transcript, attachments). `default` is the agent's own
    conversation and goes only with the agent. ConversationBusy while a turn runs (here, or
    on a store shared by workers, anywhere)."""
    if conversation_id == DEFAULT_CONVERSATION:
        raise UsageError(
            "the default conversation belongs to its agent and is deleted only with it"
        )
    record = store.get_conversation(conversation_id, agent_id)
    with store.turn_lock(record.agent_id, record.id):
        store.delete_conversation(record.agent_id, record.id)
    return {"agent_id": record.agent_id, "conversation_id": record.id, "deleted": True}


def delete_agent(
    store: ConversationStore, agent_id: str, schedules: CronStore
) -> dict[str, Any]:
    """Remove the agent, every conversation of it, its memory repository, its scheduled tasks
    (from `schedules`, the caller's: the home's cron.db, or the fleet's on the PostgreSQL store)
    and its secrets. Nothing is removed when any of its conversations is running a turn. On a
    store shared by workers, the repository this machine holds is bundled and removed; the
    store's copy (`memory_repos`) stays there, as a backup every worker can reach."""
    from tether.memory.memfs import memory_dir

    home = store.home
    record = store.get_agent(agent_id)
    conversations = [c.id for c in store.list_conversations(record.id)]
    if (store.conversation_dir(record.id, DEFAULT_CONVERSATION).is_dir()
            and DEFAULT_CONVERSATION not in conversations):
        conversations.append(DEFAULT_CONVERSATION)
    with contextlib.ExitStack() as locks:
        for conversation_id in conversations:  # all or nothing: busy anywhere refuses
            locks.enter_context(store.turn_lock(record.id, conversation_id))
        backup = _keep_memory(home, record)
        conversations = store.delete_agent(record.id)
    shutil.rmtree(memory_dir(home, record.id), ignore_errors=True)
    from tether.runtime.manage.cron_ops import delete_agent_tasks

    removed = delete_agent_tasks(schedules, record.id)
    from tether.runtime.manage.secrets_ops import forget_agent

    forget_agent(store, record.id)  # its secrets go with it
    return {"agent_id": record.id, "deleted": True, "conversations": conversations,
            "schedules_deleted": removed, "memory_backup": backup}


def _keep_memory(home: Path, record: AgentRecord) -> str | None:
    """Bundle the agent's memory repo (every ref) and write its record beside the bundle, so a
    committed memory change is never lost with the agent; the bundle's path, or None when the
    agent never had a memory repo. Raises (and so refuses the delete) when the backup fails."""
    from tether.memory.history import backups_dir, create_backup
    from tether.memory.memfs import MemFS, memory_dir

    root = memory_dir(home, record.id)
    if not (root / ".git" / "HEAD").is_file():
        return None
    memfs = MemFS(root, agent_id=record.id)
    if memfs.revision() is None:
        return None
    backup = create_backup(memfs, "the agent was deleted")
    write_atomic(backups_dir(memfs) / f"{backup.id}.agent.json",
                 orjson.dumps(record.to_dict(), option=orjson.OPT_INDENT_2) + b"\n")
    return str(backup.path)
