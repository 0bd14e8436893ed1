"""The management core the CLI and the App Server share (runtime/manage), called directly:
conversations, memory files, and deletes that move things to the trash instead of losing them."""

from __future__ import annotations

from pathlib import Path

import pytest

from tether.backends.local.store import LocalStore
from tether.errors import ConversationBusy, NotFound, UsageError
from tether.runtime.manage import agents, conversations, memory_ops, trash


def test_conversations_create_list_update(tether_home: Path) -> None:
    agent = agents.create_agent(tether_home, name="a")["id"]
    made = conversations.create_conversation(tether_home, agent, summary="first")
    assert made["summary"] == "first" and made["agent_id"] == agent
    other = conversations.create_conversation(tether_home, agent)
    archived = conversations.update_conversation(tether_home, other["id"], {"archived": True})
    assert archived["archived"] and archived["archived_at"]
    assert [c["id"] for c in conversations.list_conversations(tether_home, agent)] == [made["id"]]
    assert len(conversations.list_conversations(tether_home, agent, include_archived=True)) == 2
    with pytest.raises(UsageError, match="unknown conversation field 'title'"):
        conversations.update_conversation(tether_home, made["id"], {"title": "x"})
    with pytest.raises(UsageError, match="archived must be true or false"):
        conversations.update_conversation(tether_home, made["id"], {"archived": "yes"})
    with pytest.raises(NotFound):
        conversations.list_conversations(tether_home, "agent-local-nope")


def test_agent_updates_refuse_unknown_fields_and_write_nothing(tether_home: Path) -> None:
    agent = agents.create_agent(tether_home, name="a")
    with pytest.raises(UsageError, match="unknown agent field 'colour'"):
        agents.update_agent(tether_home, agent["id"], {"name": "b", "colour": "red"})
    assert agents.get_agent(tether_home, agent["id"])["name"] == "a"


def test_memory_files_read_write_delete(tether_home: Path) -> None:
    agent = agents.create_agent(tether_home, blocks={"human": "likes tea"})["id"]
    assert [f["path"] for f in memory_ops.memory_files(tether_home, agent)] == ["system/human.md"]
    assert "likes tea" in memory_ops.read_memory_file(tether_home, agent, "system/human.md")["content"]
    wrote = memory_ops.write_memory_file(tether_home, agent, "notes/a.md", "hello\n", "add notes")
    assert wrote["commit"] and memory_ops.read_memory_file(tether_home, agent, "notes/a.md")["content"] == "hello\n"
    memory_ops.write_memory_file(tether_home, agent, "notes/a.md", None, "drop notes")
    with pytest.raises(NotFound):
        memory_ops.read_memory_file(tether_home, agent, "notes/a.md")
    with pytest.raises(UsageError, match="relative to the memory directory"):
        memory_ops.write_memory_file(tether_home, agent, "/etc/passwd", "x", "nope")
    memory_ops.write_memory_file(tether_home, agent, "system/ro.md",
                                 "---\ndescription: x\nread_only: true\n---\nfixed\n", "ro")
    with pytest.raises(UsageError, match="read_only"):
        memory_ops.write_memory_file(tether_home, agent, "system/ro.md", "changed", "try")


def test_deleting_moves_everything_to_the_trash(tether_home: Path) -> None:
    agent = agents.create_agent(tether_home, blocks={"human": "x"})["id"]
    conv = conversations.create_conversation(tether_home, agent)["id"]
    store = LocalStore(tether_home)
    store.transcript(agent, conv)  # a transcript on disk
    with store.turn_lock(agent, conv), pytest.raises(ConversationBusy):
        trash.delete_agent(tether_home, agent)
    assert agents.get_agent(tether_home, agent)
    gone = trash.delete_agent(tether_home, agent)
    with pytest.raises(NotFound):
        agents.get_agent(tether_home, agent)
    kept = Path(gone["trash"])
    assert (kept / "agent.json").is_file() and (kept / "agent" / "memory" / ".git").is_dir()
    assert list((kept / "conversations").glob("*/messages.jsonl"))


def test_deleting_a_conversation_keeps_its_transcript(tether_home: Path) -> None:
    agent = agents.create_agent(tether_home)["id"]
    conv = conversations.create_conversation(tether_home, agent)["id"]
    LocalStore(tether_home).transcript(agent, conv)
    gone = trash.delete_conversation(tether_home, conv)
    assert (Path(gone["trash"]) / "conversation" / "messages.jsonl").is_file()
    with pytest.raises(NotFound):
        conversations.get_conversation(tether_home, conv)
    with pytest.raises(UsageError, match="primary history"):
        trash.delete_conversation(tether_home, "default", agent)
