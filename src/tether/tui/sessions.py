"""Which conversation and model the interactive session is on, and switching between them.

No Textual here: `--resume` resolution, `/new`, `/resume`, `/model` and the history shown on
reopening are plain functions over the local store and `Prepared`, so they test without a screen.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from pathlib import Path

from tether.backends.local.store import LocalStore
from tether.backends.store_api import ConversationStore
from tether.protocol.messages import Message, TextPart, UserMessage
from tether.runtime.session.flags import RunFlags
from tether.runtime.session.prepared import Prepared
from tether.runtime.session.session import tether_home


@dataclass(frozen=True, slots=True)
class ConversationSummary:
    id: str
    messages: int
    preview: str  # the first user prompt, one line
    modified: float  # messages.jsonl mtime (0: never written)


def _transcript_path(store: ConversationStore, agent_id: str, conversation_id: str) -> Path:
    return store.conversation_dir(agent_id, conversation_id) / "messages.jsonl"


def summarize(store: ConversationStore, agent_id: str) -> list[ConversationSummary]:
    """This agent's conversations, most recently written first; reading never creates files."""
    out: list[ConversationSummary] = []
    for record in store.list_conversations(agent_id):
        path = _transcript_path(store, agent_id, record.id)
        if not path.exists():
            out.append(ConversationSummary(record.id, 0, "", 0.0))
            continue
        messages = store.transcript(agent_id, record.id).load()
        out.append(
            ConversationSummary(record.id, len(messages), _first_prompt(messages), path.stat().st_mtime)
        )
    return sorted(out, key=lambda s: (s.modified, s.id), reverse=True)


def _first_prompt(messages: list[Message]) -> str:
    for m in messages:
        if isinstance(m, UserMessage):
            text = " ".join(p.text for p in m.content if isinstance(p, TextPart)).strip()
            if text:
                return " ".join(text.split())[:80]
    return ""


def apply_resume(flags: RunFlags, env: dict[str, str] | None = None, cwd: Path | None = None) -> bool:
    """`--resume`: point the flags at the agent's most recent conversation that has messages.

    The agent is `--agent`, else the one this project (or any project) used last. With nothing
    to resume the run simply starts a new conversation, as a plain `tether` would (returns False)."""
    if not flags.resume:
        return False
    from tether.runtime.session.session import _last_agent  # the same LRU `prepare` consults

    env = dict(os.environ) if env is None else env
    store = LocalStore(tether_home(env))
    if flags.agent is not None:
        agent_id: str | None = flags.agent
    else:
        last = _last_agent(store, cwd or Path.cwd())
        agent_id = last.id if last is not None else None
    if agent_id is None:
        return False
    for summary in summarize(store, agent_id):
        if summary.messages:
            flags.agent, flags.conversation = (agent_id, "default") if summary.id == "default" else (None, summary.id)
            return True
    return False


def history(prepared: Prepared) -> list[Message]:
    """The current conversation's messages, without creating its transcript."""
    session = prepared.session
    if not _transcript_path(prepared.store, session.agent.id, session.conversation_id).exists():
        return []
    return prepared.store.transcript(session.agent.id, session.conversation_id).load()


def switch_conversation(prepared: Prepared, conversation_id: str) -> None:
    """Later turns go to this conversation of the same agent (NotFound if it is not one)."""
    record = prepared.store.get_conversation(conversation_id, prepared.session.agent.id)
    prepared.session = replace(prepared.session, conversation_id=record.id)


def new_conversation(prepared: Prepared) -> str:
    record = prepared.store.create_conversation(prepared.session.agent.id)
    prepared.session = replace(prepared.session, conversation_id=record.id)
    return record.id


def switch_model(prepared: Prepared, handle: str) -> None:
    """Later sends use `handle`; a bad handle or a missing key raises before anything changes."""
    from tether.backends.local.backend import LocalBackend
    from tether.errors import UsageError
    from tether.providers.catalog import parse_handle, resolve_provider

    backend = prepared.backend
    if not isinstance(backend, LocalBackend):
        raise UsageError("the hosted agent's model is set on its Letta server; "
                         "this session cannot switch it")
    provider = resolve_provider(handle, prepared.store.home, prepared.env)
    provider_name, model_id = parse_handle(handle)
    backend.provider, backend.provider_name, backend.model_id = provider, provider_name, model_id
    prepared.session = replace(prepared.session, model=handle)


def model_choices(prepared: Prepared) -> list[str]:
    """The current handle, then each configured provider's default model (for the /model list)."""
    from tether.providers.catalog import DEFAULT_ORDER, PRESETS
    from tether.providers.credentials import find_credential, load_credentials

    records = load_credentials(prepared.store.home)
    out = [prepared.session.model]
    for prefix in DEFAULT_ORDER:
        preset = PRESETS[prefix]
        env_var = preset.base_url_env if preset.local else preset.key_env
        if find_credential(records, prefix) is not None or prepared.env.get(env_var):
            handle = f"{prefix}/{preset.default_model}"
            if handle not in out:
                out.append(handle)
    return out
