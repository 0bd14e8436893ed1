"""Which agent, conversation and model a run uses (reference §2.1), and where tether keeps state.

Agent: `--agent` → `--new-agent` → this project's last agent → the global last agent → a new
one. Conversation: `--conversation default|<id>` → `--new` → otherwise a fresh conversation
every run (so two runs never race on one history). Model: `--model` → the conversation's →
the agent's → the first configured provider.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from tether.backends.local.locks import writing
from tether.backends.local.records import AgentRecord
from tether.backends.store_api import ConversationStore
from tether.errors import UsageError


def tether_home(env: Mapping[str, str]) -> Path:
    value = env.get("TETHER_HOME")
    return Path(value).expanduser() if value else Path.home() / ".tether"


@dataclass(frozen=True, slots=True)
class Session:
    agent: AgentRecord
    conversation_id: str
    model: str
    created_agent: bool


NO_MODEL = (
    "No model configured. Set ANTHROPIC_API_KEY or OPENAI_API_KEY (or OPENAI_COMPATIBLE_BASE_URL, "
    "OLLAMA_BASE_URL, LMSTUDIO_BASE_URL, LLAMA_CPP_BASE_URL), run `tether connect <provider> "
    "--api-key KEY`, or pass --model <provider>/<model>."
)


def resolve_session(
    store: ConversationStore,
    *,
    agent_id: str | None,
    new_agent: bool,
    conversation: str | None,
    new_conversation: bool,
    model: str | None,
    system: str,
    tags: list[str],
    cwd: Path,
    env: Mapping[str, str],
) -> Session:
    created = False
    subagent = env.get("TETHER_AGENT_ROLE") == "subagent"
    if subagent and conversation is None:
        conversation = "default"  # a subagent works in its agent's primary history
    if conversation is not None and conversation != "default":
        conv = store.get_conversation(conversation)
        agent = store.get_agent(conv.agent_id)
        conversation_id = conv.id
        conv_model = conv.model
    else:
        if agent_id is not None:
            agent = store.get_agent(agent_id)
        elif not new_agent and (last := _last_agent(store, cwd)) is not None:
            agent = last
        else:
            # The agent keeps the model it was made with: resuming without -m keeps using it.
            default = model or _default_model(store.home, env)
            if default is None:
                raise UsageError(NO_MODEL)  # before anything is created
            agent = store.create_agent(model=default, system=system, tags=tuple(tags))
            created = True
        if conversation == "default":
            conversation_id = store.default_conversation(agent.id).id
        else:
            conversation_id = store.create_conversation(agent.id).id
        conv_model = None
    handle = model or conv_model or agent.model or _default_model(store.home, env)
    if handle is None:
        raise UsageError(NO_MODEL)
    if not subagent:  # a child agent must never become the project's "last agent"
        _remember_agent(store, cwd, agent.id, conversation_id)
    return Session(agent, conversation_id, handle, created)


def _default_model(home: Path, env: Mapping[str, str]) -> str | None:
    from tether.providers.catalog import default_handle

    return default_handle(home, env)


def _state_file(store: ConversationStore) -> Path:
    return store.home / "state" / "last-agents.json"


def _read_state(store: ConversationStore) -> dict[str, Any]:
    try:
        data = orjson.loads(_state_file(store).read_bytes())
    except (FileNotFoundError, orjson.JSONDecodeError):
        return {}
    return data if isinstance(data, dict) else {}


def _last_agent(store: ConversationStore, cwd: Path) -> AgentRecord | None:
    from tether.errors import NotFound

    state = _read_state(store)
    projects = state.get("projects")
    projects = projects if isinstance(projects, dict) else {}
    for candidate in (projects.get(str(cwd)), state.get("global")):
        if isinstance(candidate, str):
            try:
                return store.get_agent(candidate)
            except NotFound:
                continue
    return None


RECENT_PER_FOLDER = 10  # conversations `-c/--continue` looks through (one opened and left empty)


def recent_conversations(store: ConversationStore, cwd: Path) -> list[tuple[str, str]]:
    """(agent id, conversation id) of the runs in this folder, most recent first."""
    recent = _read_state(store).get("recent")
    entries = recent.get(str(cwd)) if isinstance(recent, dict) else None
    return [(str(e[0]), str(e[1])) for e in entries or () if isinstance(e, list) and len(e) == 2]


def _remember_agent(
    store: ConversationStore, cwd: Path, agent_id: str, conversation_id: str | None = None
) -> None:
    """The LRU lives under TETHER_HOME, not in the project folder (headless runs leave no trace there)."""
    state = _read_state(store)
    projects = state.get("projects")
    projects = projects if isinstance(projects, dict) else {}
    projects[str(cwd)] = agent_id
    recent = state.get("recent")
    recent = recent if isinstance(recent, dict) else {}
    if conversation_id is not None:
        entries = [e for e in recent.get(str(cwd)) or () if e != [agent_id, conversation_id]]
        recent[str(cwd)] = [[agent_id, conversation_id], *entries][:RECENT_PER_FOLDER]
    state = {"global": agent_id, "projects": projects, "recent": recent}
    path = _state_file(store)
    with writing(path):
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"{path.name}.tmp-{os.getpid()}")
        tmp.write_bytes(orjson.dumps(state, option=orjson.OPT_INDENT_2))
        os.replace(tmp, path)
