"""Records, layout and atomic writes of the local store under TETHER_HOME (reference §4.1–§4.2)."""

from __future__ import annotations

import base64
import os
from dataclasses import replace
from pathlib import Path

import orjson
import pytest

from tests.backends.support import user
from tether.backends.local import locks
from tether.backends.local.records import AgentRecord, ConversationRecord
from tether.backends.local.store import LocalStore, b64url
from tether.errors import NotFound, ProtocolError, StoreError


@pytest.fixture
def store(tether_home: Path) -> LocalStore:
    return LocalStore(tether_home)


def _unb64(name: str) -> str:
    return base64.urlsafe_b64decode(name + "=" * (-len(name) % 4)).decode()


def test_nothing_is_created_until_written(tether_home: Path) -> None:
    LocalStore(tether_home)
    assert not tether_home.exists()


def test_agent_round_trip_and_layout(store: LocalStore, tether_home: Path) -> None:
    agent = store.create_agent(model="anthropic/claude", system="be useful", tags=("a", "b"))
    assert agent.id.startswith("agent-local-") and agent.name == "tether"
    path = tether_home / "agents" / f"{b64url(agent.id)}.json"
    on_disk = orjson.loads(path.read_bytes())
    assert on_disk == {
        "id": agent.id,
        "name": "tether",
        "description": "",
        "system": "be useful",
        "tags": ["a", "b"],
        "model": "anthropic/claude",
        "model_settings": {},
        "created_at": agent.created_at,
        "updated_at": agent.updated_at,
    }
    assert agent.created_at.endswith("Z") and "T" in agent.created_at
    assert store.get_agent(agent.id) == agent
    renamed = replace(agent, name="renamed")
    store.save_agent(renamed)
    assert store.get_agent(agent.id) == renamed


def test_unknown_record_keys_survive_a_save(store: LocalStore, tether_home: Path) -> None:
    agent = store.create_agent(model=None, system="s")
    path = tether_home / "agents" / f"{b64url(agent.id)}.json"
    d = orjson.loads(path.read_bytes())
    d["compaction_settings"] = {"mode": "all"}
    path.write_bytes(orjson.dumps(d))
    store.save_agent(replace(store.get_agent(agent.id), name="x"))
    assert orjson.loads(path.read_bytes())["compaction_settings"] == {"mode": "all"}


def test_list_agents_sorted_by_creation(store: LocalStore) -> None:
    made = [store.create_agent(model=None, system=str(i)) for i in range(5)]
    assert [a.id for a in store.list_agents()] == [a.id for a in made]


def test_missing_agent_names_id_and_command(store: LocalStore) -> None:
    with pytest.raises(NotFound) as exc:
        store.get_agent("agent-local-nope")
    assert "agent-local-nope" in str(exc.value) and "tether agents list" in str(exc.value)


@pytest.mark.parametrize(
    ("change", "field"),
    [({"name": None}, "name"), ({"tags": "x"}, "tags"), ({"model_settings": []}, "model_settings")],
)
def test_bad_agent_record_names_file_and_field(
    store: LocalStore, tether_home: Path, change: dict, field: str
) -> None:
    agent = store.create_agent(model=None, system="s")
    path = tether_home / "agents" / f"{b64url(agent.id)}.json"
    path.write_bytes(orjson.dumps({**orjson.loads(path.read_bytes()), **change}))
    with pytest.raises(ProtocolError) as exc:
        store.get_agent(agent.id)
    assert str(path) in str(exc.value) and repr(field) in str(exc.value)


def test_record_from_dict_reports_missing_fields() -> None:
    with pytest.raises(ProtocolError, match=r"f\.json: conversation record lacks the field 'id'"):
        ConversationRecord.from_dict({}, "f.json")
    with pytest.raises(ProtocolError, match="archived"):
        ConversationRecord.from_dict(
            {
                "id": "c",
                "agent_id": "a",
                "archived": "no",
                "archived_at": None,
                "created_at": "t",
                "updated_at": "t",
                "last_message_at": None,
                "summary": None,
                "in_context_message_ids": [],
            },
            "f.json",
        )
    with pytest.raises(ProtocolError, match="must be a JSON object"):
        AgentRecord.from_dict([], "f.json")


def test_a_crashed_write_leaves_a_tmp_file_that_is_ignored(
    store: LocalStore, tether_home: Path
) -> None:
    agent = store.create_agent(model=None, system="s")
    path = tether_home / "agents" / f"{b64url(agent.id)}.json"
    intact = path.read_bytes()
    # What a crash between "write temp" and "rename" leaves behind, for this agent and another.
    path.with_name(f"{path.name}.tmp-4242-deadbeef").write_bytes(b'{"id": "half')
    (tether_home / "agents" / f"{b64url('agent-local-x')}.json.tmp-1-ab").write_bytes(b"{")
    assert store.get_agent(agent.id) == agent
    assert [a.id for a in store.list_agents()] == [agent.id]
    assert path.read_bytes() == intact


def test_a_failed_replace_keeps_the_old_record(
    store: LocalStore, tether_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    agent = store.create_agent(model=None, system="old")

    def crash(*args: object) -> None:
        raise OSError("disk went away")

    monkeypatch.setattr(locks.os, "replace", crash)
    with pytest.raises(OSError):
        store.save_agent(replace(agent, system="new"))
    monkeypatch.undo()
    assert store.get_agent(agent.id).system == "old"
    assert list((tether_home / "agents").iterdir()) == [
        tether_home / "agents" / f"{b64url(agent.id)}.json"
    ]


def test_conversations_get_counter_ids_and_keys(store: LocalStore, tether_home: Path) -> None:
    agent = store.create_agent(model=None, system="s")
    first, second = store.create_conversation(agent.id), store.create_conversation(agent.id)
    assert (first.id, second.id) == ("local-conv-1", "local-conv-2")
    assert orjson.loads((tether_home / "counters.json").read_bytes()) == {"conversation": 2}
    folders = {_unb64(p.name) for p in (tether_home / "conversations").iterdir()}
    assert folders == {"conversation:local-conv-1", "conversation:local-conv-2"}
    assert store.get_conversation("local-conv-2") == second
    assert store.get_conversation("local-conv-2", agent.id) == second
    assert [c.id for c in store.list_conversations(agent.id)] == ["local-conv-1", "local-conv-2"]
    with pytest.raises(NotFound):
        store.create_conversation("agent-local-missing")


def test_lost_counters_never_reuse_an_id(store: LocalStore, tether_home: Path) -> None:
    agent = store.create_agent(model=None, system="s")
    store.create_conversation(agent.id)
    (tether_home / "counters.json").unlink()
    assert store.create_conversation(agent.id).id == "local-conv-2"


def test_default_conversation(store: LocalStore, tether_home: Path) -> None:
    agent = store.create_agent(model=None, system="s")
    default = store.default_conversation(agent.id)
    assert default.id == "default" and default.agent_id == agent.id
    assert store.default_conversation(agent.id) == default  # created once
    folder = tether_home / "conversations" / b64url(f"default:{agent.id}")
    assert (folder / "conversation.json").exists()
    assert store.get_conversation("default", agent.id) == default
    with pytest.raises(StoreError, match="belongs to an agent"):
        store.get_conversation("default")
    other = store.create_agent(model=None, system="s")
    assert store.default_conversation(other.id).agent_id == other.id
    assert [c.id for c in store.list_conversations(agent.id)] == ["default"]


def test_unknown_or_foreign_conversation_is_not_found(store: LocalStore) -> None:
    a, b = store.create_agent(model=None, system="s"), store.create_agent(model=None, system="s")
    conv = store.create_conversation(a.id)
    with pytest.raises(NotFound, match="local-conv-99"):
        store.get_conversation("local-conv-99")
    with pytest.raises(NotFound, match="belongs to agent"):
        store.get_conversation(conv.id, b.id)
    with pytest.raises(NotFound):
        store.transcript(b.id, conv.id)


def test_save_conversation(store: LocalStore) -> None:
    agent = store.create_agent(model=None, system="s")
    conv = store.create_conversation(agent.id)
    changed = replace(conv, summary="about tests", in_context_message_ids=("m1",), model="x/y")
    store.save_conversation(changed)
    assert store.get_conversation(conv.id) == changed


def test_transcript_creates_manifest_and_header(store: LocalStore, tether_home: Path) -> None:
    agent = store.create_agent(model=None, system="s")
    conv = store.create_conversation(agent.id)
    t = store.transcript(agent.id, conv.id, cwd="/work")
    folder = tether_home / "conversations" / b64url(f"conversation:{conv.id}")
    manifest = orjson.loads((folder / "manifest.json").read_bytes())
    assert manifest["schema_version"] == 2
    assert manifest["message_format"] == "pi-session-entry-jsonl"
    assert manifest["provider_stack"] == "tether" and "created_at" in manifest
    header = orjson.loads((folder / "messages.jsonl").read_bytes())
    assert header["type"] == "session" and header["cwd"] == "/work"
    t.append([user("u1")])
    assert store.transcript(agent.id, conv.id) is t
    assert LocalStore(tether_home).transcript(agent.id, conv.id).load() == [user("u1")]
    # The default conversation's transcript lives under its own key.
    store.transcript(agent.id, "default").append([user("d1")])
    default_folder = tether_home / "conversations" / b64url(f"default:{agent.id}")
    assert (default_folder / "messages.jsonl").exists()


def test_other_schema_version_needs_migration(store: LocalStore, tether_home: Path) -> None:
    agent = store.create_agent(model=None, system="s")
    conv = store.create_conversation(agent.id)
    store.transcript(agent.id, conv.id)
    manifest = tether_home / "conversations" / b64url(f"conversation:{conv.id}") / "manifest.json"
    manifest.write_bytes(orjson.dumps({"schema_version": 1}))
    with pytest.raises(StoreError) as exc:
        LocalStore(tether_home).transcript(agent.id, conv.id)
    assert str(manifest) in str(exc.value) and "migration" in str(exc.value)


def test_unversioned_transcript_needs_migration(store: LocalStore, tether_home: Path) -> None:
    agent = store.create_agent(model=None, system="s")
    conv = store.create_conversation(agent.id)
    store.transcript(agent.id, conv.id)
    folder = tether_home / "conversations" / b64url(f"conversation:{conv.id}")
    os.unlink(folder / "manifest.json")
    with pytest.raises(StoreError, match="migration"):
        LocalStore(tether_home).transcript(agent.id, conv.id)
