"""An agent's memory from outside a run: backups, restores, pending merges and token counts."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from tether.errors import UsageError

if TYPE_CHECKING:
    from tether.backends.store_api import ConversationStore
    from tether.memory.memfs import MemFS


def open_memory(store: ConversationStore, agent_id: str, *, create: bool = False) -> MemFS:
    """The agent's memory repository (NotFound for an unknown agent; UsageError when it has no
    memory yet and `create` is false)."""
    from tether.memory.memfs import MemFS, memory_dir

    agent = store.get_agent(agent_id)
    memfs = MemFS(memory_dir(store.home, agent.id), agent_id=agent.id, agent_name=agent.name)
    if create:
        memfs.ensure_created()
    elif not memfs.exists or memfs.revision() is None:
        raise UsageError(f"agent {agent.id} has no memory yet (it is created on its first run)")
    return memfs


def backup(store: ConversationStore, agent_id: str, reason: str = "manual backup") -> dict[str, Any]:
    from tether.memory.history import create_backup

    memfs = open_memory(store, agent_id)
    return {"agent_id": agent_id, **create_backup(memfs, reason).to_dict()}


def backups(store: ConversationStore, agent_id: str) -> list[dict[str, Any]]:
    from tether.memory.history import list_backups

    return [{"agent_id": agent_id, **b.to_dict()} for b in list_backups(open_memory(store, agent_id))]


def restore(store: ConversationStore, agent_id: str, source: str, *, force: bool = False) -> dict[str, Any]:
    from tether.memory.history import find_backup, restore_backup
    from tether.memory.memfs import MemFS, memory_dir

    agent = store.get_agent(agent_id)
    memfs = MemFS(memory_dir(store.home, agent.id), agent_id=agent.id, agent_name=agent.name)
    backup = find_backup(memfs, source)  # backups live beside the repo: they outlive its loss
    if not memfs.exists:
        memfs.root.mkdir(parents=True, exist_ok=True)
        memfs.git("init", "-q", "-b", "main")
    return {"agent_id": agent_id, **restore_backup(memfs, backup, force=force)}


def pending(store: ConversationStore, agent_id: str) -> dict[str, Any]:
    from tether.memory.history import pending_merges

    return {"agent_id": agent_id, "pending": pending_merges(open_memory(store, agent_id))}


def resolve(
    store: ConversationStore, agent_id: str, resolutions: Mapping[str, Any], branch: str | None = None
) -> dict[str, Any]:
    """Finish a pending merge: `branch`, or the only one there is."""
    from tether.memory.history import pending_merges, resolve_merge

    if not isinstance(resolutions, Mapping):
        raise UsageError('--resolutions must be a JSON object {"<path>": <text> | null | '
                         '{"take": "ours"|"theirs"}}')
    memfs = open_memory(store, agent_id)
    if branch is None:
        waiting = [p["branch"] for p in pending_merges(memfs)]
        if not waiting:
            raise UsageError(f"agent {agent_id} has no pending memory merge to resolve")
        if len(waiting) > 1:
            raise UsageError(f"agent {agent_id} has {len(waiting)} pending merges "
                             f"({', '.join(waiting)}); name one with --branch")
        branch = waiting[0]
    return {"agent_id": agent_id, **resolve_merge(memfs, branch, resolutions)}


def tokens(store: ConversationStore, agent_id: str) -> dict[str, Any]:
    """The estimated tokens (chars/4, as the context estimate counts) of each committed file,
    and the total of the `system/` blocks that reach the prompt."""
    memfs = open_memory(store, agent_id)
    files = []
    for path, data in sorted(memfs.read_head_tree().items()):
        chars = len(data.decode("utf-8", errors="replace"))
        files.append({"path": path, "chars": chars, "tokens": math.ceil(chars / 4),
                      "in_prompt": path.startswith("system/") and path.endswith(".md")})
    return {"agent_id": agent_id, "revision": memfs.revision(),
            "system_tokens": sum(f["tokens"] for f in files if f["in_prompt"]),
            "total_tokens": sum(f["tokens"] for f in files), "files": files}

