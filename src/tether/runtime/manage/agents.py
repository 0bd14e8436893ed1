"""Agents: create, read, list (name, query, tags), update and the memory blocks they carry."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

from tether.backends.local.records import AgentRecord, utc_now_iso
from tether.errors import UsageError

if TYPE_CHECKING:
    from tether.backends.store_api import ConversationStore

# Fields an update may set, and what each must be.
EDITABLE = ("name", "description", "system", "tags", "model", "model_settings")
DEFAULT_NAME = "tether"


def create_agent(
    store: ConversationStore,
    *,
    name: str | None = None,
    model: str | None = None,
    description: str = "",
    system: str | None = None,
    tags: Sequence[str] = (),
    memfs: bool = True,
    blocks: Mapping[str, str] | None = None,
) -> dict[str, Any]:
    """A new agent record; with `memfs`, its memory repository too, holding `blocks`
    (label -> text) as `system/<label>.md` in one commit."""
    from tether.core.prompt import DEFAULT_SYSTEM

    fields = _checked({"name": name if name is not None else DEFAULT_NAME,
                       "description": description, "tags": list(tags), "model": model,
                       "system": system if system is not None else DEFAULT_SYSTEM})
    if blocks and not memfs:
        raise UsageError("memory blocks need the agent's memory: drop --no-memfs")
    block_files = {_block_path(label): text for label, text in (blocks or {}).items()}
    record = store.create_agent(
        model=fields["model"], system=fields["system"], name=fields["name"],
        description=fields["description"], tags=tuple(fields["tags"]),
    )
    if memfs:
        _seed_memory(store, record, block_files)
    return agent_view(store, record, include_blocks=bool(blocks))


def get_agent(store: ConversationStore, agent_id: str, *, include_blocks: bool = False) -> dict[str, Any]:
    return agent_view(store, store.get_agent(agent_id), include_blocks=include_blocks)


def list_agents(
    store: ConversationStore,
    *,
    name: str | None = None,
    query: str | None = None,
    tags: Sequence[str] = (),
    match_all_tags: bool = False,
    include_blocks: bool = False,
    limit: int = 20,
) -> list[dict[str, Any]]:
    """Agents newest last (the last `limit`), filtered: `name` exact (case-insensitive),
    `query` a substring of the id, name, description or a tag, `tags` any (or all) of them."""
    if limit < 1:
        raise UsageError(f"--limit must be at least 1, got {limit}")
    wanted = [t for t in tags if t]
    found = []
    for record in store.list_agents():
        if name is not None and record.name.lower() != name.lower():
            continue
        if query and not _matches(record, query):
            continue
        if wanted:
            have = set(record.tags)
            hits = [t in have for t in wanted]
            if not (all(hits) if match_all_tags else any(hits)):
                continue
        found.append(record)
    return [agent_view(store, r, include_blocks=include_blocks) for r in found[-limit:]]


def update_agent(store: ConversationStore, agent_id: str, changes: Mapping[str, Any]) -> dict[str, Any]:
    """Set the named fields (a subset of EDITABLE) on the agent; anything else is refused."""
    if not changes:
        raise UsageError(f"nothing to change on {agent_id}: give at least one of "
                         f"{', '.join(EDITABLE)}")
    record = store.get_agent(agent_id)
    fields = _checked(changes)
    if "tags" in fields:
        fields["tags"] = tuple(fields["tags"])
    updated = replace(record, **fields, updated_at=utc_now_iso())
    store.save_agent(updated)
    return agent_view(store, updated)


def agent_view(store: ConversationStore, record: AgentRecord, *, include_blocks: bool = False) -> dict[str, Any]:
    """The record's JSON; with `include_blocks`, `blocks` as the reference lists them
    ({label, value, description, read_only}) from the committed memory."""
    data = record.to_dict()
    if include_blocks:
        data["blocks"] = memory_blocks(store, record)
    return data


def memory_blocks(store: ConversationStore, record: AgentRecord) -> list[dict[str, Any]]:
    from tether.memory import blocks
    from tether.memory.memfs import MemFS, memory_dir

    memfs = MemFS(memory_dir(store.home, record.id), agent_id=record.id, agent_name=record.name)
    if not memfs.exists:
        return []
    out = []
    for path, data in sorted(memfs.read_head_tree("system").items()):
        if not path.endswith(".md"):
            continue
        parsed = blocks.parse(data.decode("utf-8", errors="replace"))
        out.append({"label": blocks.label(path)[len("system/"):], "value": parsed.body,
                    "description": parsed.description, "read_only": parsed.read_only})
    return out


def _seed_memory(store: ConversationStore, record: AgentRecord, files: Mapping[str, str]) -> None:
    from tether.memory import blocks
    from tether.memory.memfs import MemFS

    memfs = MemFS.open(store.home, record.id, agent_name=record.name)
    if not files:
        return
    with memfs.writing():
        for path, text in files.items():
            memfs.write_working(path, blocks.render(blocks.new_file(f"the {path[7:-3]} block",
                                                                    text)))
        memfs.commit(files, "memory: initial blocks")


def _block_path(label: str) -> str:
    from tether.memory.memfs import MemFSError, normalize_path

    try:
        return normalize_path(f"system/{label}", "block label")
    except MemFSError as exc:
        raise UsageError(str(exc)) from None


def _matches(record: AgentRecord, query: str) -> bool:
    needle = query.lower()
    return any(needle in text.lower()
               for text in (record.id, record.name, record.description, *record.tags))


def _checked(fields: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in fields.items():
        if key not in EDITABLE:
            raise UsageError(f"unknown agent field {key!r}; an agent has {', '.join(EDITABLE)}")
        if key == "tags":
            if not isinstance(value, (list, tuple)) or not all(
                isinstance(t, str) and t.strip() and "," not in t for t in value
            ):
                raise UsageError(f"tags must be a list of non-empty strings without commas, "
                                 f"got {value!r}")
            out[key] = [t.strip() for t in value]
        elif key == "model_settings":
            if not isinstance(value, dict):
                raise UsageError(f"model_settings must be an object, got {value!r}")
            out[key] = dict(value)
        elif key == "model":
            if value is not None and (not isinstance(value, str) or "/" not in value.strip()
                                      or value.strip().startswith("/")):
                raise UsageError(f"model must be a handle like anthropic/claude-sonnet-4-5 "
                                 f"(provider/model), got {value!r}")
            out[key] = value.strip() if isinstance(value, str) else None
        elif key == "name":
            if not isinstance(value, str) or not value.strip():
                raise UsageError(f"name must be a non-empty string, got {value!r}")
            out[key] = value.strip()
        else:
            if not isinstance(value, str):
                raise UsageError(f"{key} must be a string, got {value!r}")
            out[key] = value
    return out
