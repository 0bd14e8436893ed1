"""Which existing agent or conversation a Task (`Agent`) call may run its subagent in (§11).

The grant: a parent agent reaches itself and the agents it created (tagged `parent:<parent
id>`, as every subagent is), nothing else, as the parent's own store holds them (TETHER_HOME's
files, or the fleet's PostgreSQL store for a server conversation or `tether -p --store`).
`agent_id` runs the child as that agent in a new conversation (made here, in that store,
before the child starts), `conversation_id` continues that conversation (`default` with an
`agent_id`: that agent's primary history). Refused: a target
outside the grant — unknown and unreachable are told apart by nothing, so the model learns no
other agent's existence —, the parent's own conversation (it is mid-turn), a cloud parent
(its agents live on the Letta server), and any type but `general-purpose`, as the reference.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tether.errors import NotFound

if TYPE_CHECKING:
    from tether.backends.store_api import ConversationStore

TARGET_TYPES = ("general-purpose",)


class TargetRefused(ValueError):
    """The Task call's agent_id / conversation_id cannot be used; the message says why."""


@dataclass(frozen=True, slots=True)
class Target:
    agent_id: str
    conversation_id: str  # `default`: the agent's primary history

    def argv(self) -> list[str]:
        """The child's flags: `--conversation <id>`, or `--agent <id> --conversation default`."""
        if self.conversation_id == "default":
            return ["--agent", self.agent_id, "--conversation", "default"]
        return ["--conversation", self.conversation_id]


def target_conversation(
    args: Mapping[str, Any], *, kind: str, parent_agent: str, parent_conversation: str,
    store: ConversationStore, backend: str | None,
) -> Target | None:
    """The agent and conversation the child continues (created for a bare `agent_id`), or None when the
    call names no target. Looked up in, and created through, the parent's `store`: the files
    under TETHER_HOME, or a fleet's PostgreSQL store, where the child then runs too."""
    agent_id = args.get("agent_id") or None
    conversation_id = args.get("conversation_id") or None
    if agent_id is None and conversation_id is None:
        return None
    for key, value in (("agent_id", agent_id), ("conversation_id", conversation_id)):
        if value is not None and not isinstance(value, str):
            raise TargetRefused(f"{key} must be a string, got {value!r}")
    if kind not in TARGET_TYPES:
        raise TargetRefused(f"agent_id / conversation_id run a subagent as an existing agent: "
                            f"only subagent_type {' or '.join(TARGET_TYPES)} can, not {kind!r}")
    if backend == "cloud":
        raise TargetRefused("agent_id / conversation_id target local agents; this agent runs on "
                            "a Letta server (--backend cloud)")
    from tether.backends.local.store import DEFAULT_CONVERSATION

    outside = TargetRefused(
        f"{'conversation ' + repr(conversation_id) if conversation_id else 'agent ' + repr(agent_id)}"
        f" is not one this agent may reach: a subagent can target this agent ({parent_agent}) "
        f"or an agent it created (tagged parent:{parent_agent})"
    )
    try:
        if conversation_id is not None and conversation_id != DEFAULT_CONVERSATION:
            conv = store.get_conversation(conversation_id)
            if agent_id is not None and conv.agent_id != agent_id:
                raise outside
            agent_id = conv.agent_id
        elif conversation_id == DEFAULT_CONVERSATION and agent_id is None:
            raise TargetRefused("conversation_id 'default' is an agent's primary history: give "
                                "agent_id too")
        assert agent_id is not None
        agent = store.get_agent(agent_id)
    except NotFound:
        raise outside from None
    if agent.id != parent_agent and f"parent:{parent_agent}" not in agent.tags:
        raise outside
    if agent.id == parent_agent and conversation_id == parent_conversation:
        raise TargetRefused("that is this agent's own conversation, which is mid-turn; give "
                            "agent_id alone for a new conversation")
    if conversation_id is None:
        return Target(agent.id, store.create_conversation(agent.id).id)
    return Target(agent.id, conversation_id)
