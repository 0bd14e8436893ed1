"""The management core the CLI and the App Server share (runtime/manage), called directly:
conversations and agent updates."""

from __future__ import annotations

from pathlib import Path

import pytest

from tether.backends.local.store import LocalStore
from tether.errors import NotFound, UsageError
from tether.runtime.manage import agents, conversations


def test_conversations_create_list_update(tether_home: Path) -> None:
    agent = agents.create_agent(LocalStore(tether_home), name="a")["id"]
    made = conversations.create_conversation(LocalStore(tether_home), agent, summary="first")
    assert made["summary"] == "first" and made["agent_id"] == agent
    other = conversations.create_conversation(LocalStore(tether_home), agent)
    archived = conversations.update_conversation(LocalStore(tether_home), other["id"], {"archived": True})
    assert archived["archived"] and archived["archived_at"]
    assert [c["id"] for c in conversations.list_conversations(LocalStore(tether_home), agent)] == [made["id"]]
    assert len(conversations.list_conversations(LocalStore(tether_home), agent, include_archived=True)) == 2
    with pytest.raises(UsageError, match="unknown conversation field 'title'"):
        conversations.update_conversation(LocalStore(tether_home), made["id"], {"title": "x"})
    with pytest.raises(UsageError, match="archived must be true or false"):
        conversations.update_conversation(LocalStore(tether_home), made["id"], {"archived": "yes"})
    with pytest.raises(NotFound):
        conversations.list_conversations(LocalStore(tether_home), "agent-local-nope")


def test_agent_updates_refuse_unknown_fields_and_write_nothing(tether_home: Path) -> None:
    agent = agents.create_agent(LocalStore(tether_home), name="a")
    with pytest.raises(UsageError, match="unknown agent field 'colour'"):
        agents.update_agent(LocalStore(tether_home), agent["id"], {"name": "b", "colour": "red"})
    assert agents.get_agent(LocalStore(tether_home), agent["id"])["name"] == "a"

