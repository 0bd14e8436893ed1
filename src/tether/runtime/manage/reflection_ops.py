"""An agent's reflection settings from outside a run (the trigger and its step count), read and
written through `runtime/agents/reflection.py`'s per-agent state, as `--reflection-trigger` saves them."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tether.errors import UsageError

if TYPE_CHECKING:
    from tether.backends.store_api import ConversationStore


def get_settings(store: ConversationStore, agent_id: str) -> dict[str, Any]:
    from tether.runtime.agents.reflection import load_state

    agent = store.get_agent(agent_id)
    state = load_state(store, agent.id)
    return {"agent_id": agent.id, "trigger": state.trigger, "step_count": state.step_count}


def set_settings(store: ConversationStore, agent_id: str, trigger: Any, step_count: Any) -> dict[str, Any]:
    from tether.runtime.agents.reflection import TRIGGERS, update_state

    if trigger not in TRIGGERS:
        raise UsageError(f"settings.trigger must be one of {', '.join(TRIGGERS)}, got {trigger!r}")
    if isinstance(step_count, bool) or not isinstance(step_count, int) or step_count < 1:
        raise UsageError(f"settings.step_count must be a positive integer, got {step_count!r}")
    agent = store.get_agent(agent_id)
    def settle(state: Any) -> None:
        state.trigger, state.step_count = trigger, step_count

    update_state(store, agent.id, settle)
    return get_settings(store, agent.id)
