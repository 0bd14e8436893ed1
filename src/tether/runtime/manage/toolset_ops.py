"""A conversation's toolset preference (reference `settingsManager.setToolsetPreference`): kept on
the agent's record, `toolset` for its default conversation and `toolsets_by_conversation` for the
others, and read back when a runtime of the conversation is built (`auto` when none was set: the
toolset the model picks). `update_toolset` and `/toolset` write it; the next turn offers it."""

from __future__ import annotations

from dataclasses import replace
from typing import TYPE_CHECKING, Any

from tether.backends.local.records import AgentRecord
from tether.backends.local.store import DEFAULT_CONVERSATION
from tether.errors import UsageError
from tether.tools.toolsets import TOOLSET_CHOICES, resolve_toolset

if TYPE_CHECKING:
    from tether.backends.store_api import ConversationStore

_BY_CONVERSATION = "toolsets_by_conversation"


def preference(agent: AgentRecord, conversation_id: str) -> str:
    """The conversation's toolset preference: its own, else (for the default conversation)
    the agent's, else `auto`."""
    extra = agent.extra
    if conversation_id != DEFAULT_CONVERSATION:
        chosen = (extra.get(_BY_CONVERSATION) or {}).get(conversation_id)
        return chosen if chosen in TOOLSET_CHOICES else "auto"
    chosen = extra.get("toolset")
    return chosen if chosen in TOOLSET_CHOICES else "auto"


def set_preference(
    store: ConversationStore, agent_id: str, conversation_id: str, chosen: Any
) -> dict[str, str]:
    """Keep `chosen` for the conversation (in `store`: the files under TETHER_HOME or the
    fleet's rows); the preference and the toolset it gives the agent's model now
    (`current_toolset_preference`, `current_toolset`)."""
    if not isinstance(chosen, str) or chosen not in TOOLSET_CHOICES:
        raise UsageError(
            f"toolset_preference must be one of {', '.join(TOOLSET_CHOICES)}, got {chosen!r}"
        )
    record = store.get_agent(agent_id)
    extra = dict(record.extra)
    if conversation_id == DEFAULT_CONVERSATION:
        extra["toolset"] = chosen
    else:
        by_conversation = dict(extra.get(_BY_CONVERSATION) or {})
        if chosen == "auto":
            by_conversation.pop(conversation_id, None)
        else:
            by_conversation[conversation_id] = chosen
        extra[_BY_CONVERSATION] = by_conversation
    store.save_agent(replace(record, extra=extra))
    return {"current_toolset_preference": chosen,
            "current_toolset": resolve_toolset(chosen, record.model)}
