"""The one store interface (`backends/store_api.py`), held to the same contract by both of its
implementations: the local store (files under TETHER_HOME) and the PostgreSQL store (rows in a
real database, transcript appends fenced by the conversation's lease). Each case runs on both;
what only one of them can do (a fenced append refused) is tested on that one below."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.backends.support import assistant, result, user
from tether.backends.store_api import ConversationStore, TranscriptLog, conversation_ref
from tether.errors import NotFound, StoreError, TranscriptCorrupt
from tether.protocol.messages import TextPart, UserMessage


@dataclass
class Impl:
    """One implementation under test, and how to damage its transcripts from outside."""

    store: ConversationStore
    reopen: Callable[[], ConversationStore]  # a second process's view of the same store
    raw_line: Callable[[str, str, bytes], None]  # append bytes as a committed entry line
    torn_tail: Callable[[str, str, bytes], None]  # leave bytes as a crash's torn tail


def _local(home: Path) -> Impl:
    from tether.backends.local.store import LocalStore

    def path(agent: str, conv: str) -> Path:
        return LocalStore(home).conversation_dir(agent, conv) / "messages.jsonl"

    def raw_line(agent: str, conv: str, line: bytes) -> None:
        with path(agent, conv).open("ab") as f:
            f.write(line)

    return Impl(LocalStore(home), lambda: LocalStore(home), raw_line, raw_line)


@pytest.fixture(params=["local", "postgresql"])
def impl(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Impl]:
    if request.param == "local":
        yield _local(tmp_path / "home")
        return
    pg_url = request.getfixturevalue("pg_url")
    from tether.backends.postgres.agents import PgConversationStore
    from tether.backends.postgres.connection import PgSession
    from tether.backends.postgres.leases import ConversationLeases

    sessions: list[PgSession] = []
    held: dict[str, Any] = {}  # the leases of the worker the stores stand for

    def open_store() -> PgConversationStore:
        session = PgSession(pg_url, f"contract-{len(sessions)}")
        sessions.append(session)

        def lease_of(key: str) -> Any:
            if key not in held:
                held[key] = ConversationLeases(sessions[0]).acquire(key)
            return held[key]

        return PgConversationStore(session, tmp_path / "home", lease_of)

    first = open_store()

    def raw_line(agent: str, conv: str, line: bytes) -> None:
        key = conversation_ref(agent, conv)
        with first.session.transaction("test: a raw row") as cur:
            row = cur.execute("SELECT COALESCE(max(seq), 0) FROM transcript WHERE conversation = %s",
                              (key,)).fetchone()
            from psycopg.types.json import Jsonb

            cur.execute("INSERT INTO transcript (conversation, seq, entry, token, line)"
                        " VALUES (%s, %s, %s, 0, %s)",
                        (key, row[0] + 1, Jsonb(orjson.loads(line)), line))

    def torn_tail(agent: str, conv: str, tail: bytes) -> None:
        with first.session.transaction("test: a torn tail") as cur:
            cur.execute("UPDATE transcript_files SET torn = %s WHERE conversation = %s",
                        (tail, conversation_ref(agent, conv)))

    yield Impl(first, open_store, raw_line, torn_tail)
    for session in sessions:
        session.close()


def _conversation(store: ConversationStore) -> tuple[str, str, TranscriptLog]:
    agent = store.create_agent(model="openai/gpt-test", system="be brief")
    conv = store.create_conversation(agent.id)
    return agent.id, conv.id, store.transcript(agent.id, conv.id, cwd="/work/project")


def test_appends_read_back_in_order_by_a_second_reader(impl: Impl) -> None:
    agent, conv, transcript = _conversation(impl.store)
    first = [user("u1", "fix it"), assistant("a1", ("c1", "Bash"))]
    transcript.append(first)
    transcript.append([result("r1", "c1"), assistant("a2", text="done")])
    want = [*first, result("r1", "c1"), assistant("a2", text="done")]
    assert transcript.load() == want
    other = impl.reopen().transcript(agent, conv)
    assert other.load() == want
    assert other.tail(2) == want[-2:]
    assert other.header() is not None and other.header()["cwd"] == "/work/project"
    assert [e["message"]["id"] for e in other.entries()] == ["u1", "a1", "r1", "a2"]


def test_a_changed_snapshot_replaces_in_place_and_an_unchanged_one_writes_nothing(impl: Impl) -> None:
    agent, conv, transcript = _conversation(impl.store)
    transcript.append([user("u1"), assistant("a1", stop=None)])
    transcript.append([assistant("a1", stop=None)])  # unchanged: no entry
    transcript.append([assistant("a1", text="final")])
    assert len(transcript.entries()) == 3
    fresh = impl.reopen().transcript(agent, conv)
    assert fresh.load() == [user("u1"), assistant("a1", text="final")]


def test_rollback_drops_a_message_durably(impl: Impl) -> None:
    agent, conv, transcript = _conversation(impl.store)
    transcript.append([user("u1"), assistant("a1", stop=None)])
    transcript.rollback("a1")
    assert transcript.load() == [user("u1")]
    assert impl.reopen().transcript(agent, conv).load() == [user("u1")]


def test_a_compaction_is_where_a_new_reader_resumes(impl: Impl) -> None:
    agent, conv, transcript = _conversation(impl.store)
    transcript.append([user("u1"), assistant("a1"), user("u2"), assistant("a2")])
    summary = UserMessage("s1", (TextPart("summary of u1, a1"),), 1_700_000_000_003)
    eid = transcript.append_compaction(summary, summary="u1, a1", first_kept_message_id="u2",
                                       tokens_before=1000)
    transcript.append([user("u3")])
    want = [summary, user("u2"), assistant("a2"), user("u3")]
    assert transcript.load() == want
    fresh = impl.reopen().transcript(agent, conv)
    assert fresh.load() == want
    assert fresh.last_compaction_id() == eid


def test_the_same_record_twice_is_damage_named_by_line(impl: Impl) -> None:
    agent, conv, transcript = _conversation(impl.store)
    transcript.append([user("u1"), assistant("a1")])
    second = transcript.entries()[1]
    impl.raw_line(agent, conv, orjson.dumps(second) + b"\n")
    with pytest.raises(TranscriptCorrupt, match=":4: conversation transcript is damaged"):
        impl.reopen().transcript(agent, conv).load()


def test_a_torn_tail_is_left_out_and_dropped_by_the_next_append(impl: Impl) -> None:
    agent, conv, transcript = _conversation(impl.store)
    transcript.append([user("u1")])
    impl.torn_tail(agent, conv, b'{"type":"message","id":"dead')
    fresh = impl.reopen().transcript(agent, conv)
    assert fresh.load() == [user("u1")]
    fresh.append([assistant("a1")])
    assert b"dead" not in fresh.written_bytes()
    assert impl.reopen().transcript(agent, conv).load() == [user("u1"), assistant("a1")]


def test_agents_and_conversations_are_listed_and_checked(impl: Impl) -> None:
    store = impl.store
    one = store.create_agent(model=None, system="s", name="one")
    two = store.create_agent(model="openai/x", system="s", name="two", tags=["t"])
    convs = [store.create_conversation(one.id) for _ in range(2)]
    default = store.default_conversation(one.id)
    assert default.id == "default" and store.default_conversation(one.id) == default
    other = impl.reopen()
    assert [a.id for a in other.list_agents()] == [one.id, two.id]
    assert other.get_agent(two.id).tags == ("t",)
    listed = [c.id for c in other.list_conversations(one.id)]
    assert sorted(listed) == sorted([c.id for c in convs] + ["default"])
    assert len(set(listed)) == 3
    assert other.list_conversations(two.id) == []
    with pytest.raises(NotFound):
        other.get_conversation(convs[0].id, two.id)
    with pytest.raises(NotFound):
        other.get_agent("agent-local-nope")
    renamed = other.get_agent(one.id)
    from dataclasses import replace

    other.save_agent(replace(renamed, name="uno"))
    assert store.get_agent(one.id).name == "uno"
    archived = replace(convs[1], archived=True)
    store.save_conversation(archived)
    assert other.get_conversation(convs[1].id, one.id).archived is True


# --- the PostgreSQL store only ----------------------------------------------------------------


def test_pg_append_without_the_lease_or_after_it_moved_is_refused(pg_url: str, tmp_path: Path) -> None:
    from tether.backends.postgres.agents import PgConversationStore
    from tether.backends.postgres.connection import LeaseLost, PgSession
    from tether.backends.postgres.leases import ConversationLeases

    mine, theirs = PgSession(pg_url, "w-mine"), PgSession(pg_url, "w-theirs")
    held: dict[str, Any] = {}
    store = PgConversationStore(mine, tmp_path / "home", held.get)
    agent = store.create_agent(model=None, system="s")
    transcript = store.transcript(agent.id, "default")
    key = conversation_ref(agent.id, "default")
    with pytest.raises(LeaseLost, match="does not hold its lease"):
        transcript.append([user("u0")])
    held[key] = ConversationLeases(mine, ttl_s=0.2).acquire(key)
    transcript.append([user("u1")])
    import time

    time.sleep(0.3)  # past the ttl: the lease is free to take
    taken = ConversationLeases(theirs).acquire(key)
    assert taken is not None and taken.token == held[key].token + 1
    with pytest.raises(LeaseLost, match="no longer current"):
        transcript.append([assistant("a1")])
    with mine.transaction("read") as cur:
        rows = cur.execute("SELECT entry->'message'->>'id', token FROM transcript"
                           " WHERE conversation = %s ORDER BY seq", (key,)).fetchall()
    assert rows == [("u1", held[key].token)]
    mine.close()
    theirs.close()


def test_conversations_created_at_once_by_two_processes_get_distinct_ids(impl: Impl) -> None:
    from concurrent.futures import ThreadPoolExecutor

    agent = impl.store.create_agent(model=None, system="s")
    stores = [impl.store, impl.reopen()]
    with ThreadPoolExecutor(4) as pool:
        made = list(pool.map(lambda n: stores[n % 2].create_conversation(agent.id).id, range(16)))
    assert len(set(made)) == 16
    assert sorted(c.id for c in impl.reopen().list_conversations(agent.id)) == sorted(made)


def test_a_conversation_made_with_history_reads_it_back_whole(impl: Impl) -> None:
    agent = impl.store.create_agent(model=None, system="s")
    history = [user("u1", "fix it"), assistant("a1", ("c1", "Bash")), result("r1", "c1")]
    made = impl.store.create_conversation(agent.id, extra={"forked_from": "local-conv-0"},
                                          history=history)
    other = impl.reopen()
    assert other.get_conversation(made.id, agent.id).extra["forked_from"] == "local-conv-0"
    assert other.messages(agent.id, made.id) == history
    follow = other.transcript(agent.id, made.id)  # an append continues after the copy
    follow.append([assistant("a2", text="done")])
    assert impl.reopen().messages(agent.id, made.id) == [*history, assistant("a2", text="done")]


def test_reading_messages_creates_nothing(impl: Impl) -> None:
    agent = impl.store.create_agent(model=None, system="s")
    conv = impl.store.create_conversation(agent.id)
    assert impl.store.messages(agent.id, conv.id) == []
    assert impl.reopen().transcript(agent.id, conv.id).header() is not None  # made on first use
    assert impl.store.messages(agent.id, conv.id) == []


def test_deleted_conversations_and_agents_are_gone_and_their_ids_never_come_back(impl: Impl) -> None:
    store = impl.store
    agent = store.create_agent(model=None, system="s")
    keep, gone = store.create_conversation(agent.id), store.create_conversation(agent.id)
    store.transcript(agent.id, gone.id).append([user("u1")])
    store.delete_conversation(agent.id, gone.id)
    other = impl.reopen()
    with pytest.raises(NotFound):
        other.get_conversation(gone.id, agent.id)
    assert other.messages(agent.id, gone.id) == []
    assert [c.id for c in other.list_conversations(agent.id)] == [keep.id]
    third = other.create_conversation(agent.id)
    assert third.id not in (keep.id, gone.id)

    store.default_conversation(agent.id)
    removed = other.delete_agent(agent.id)
    assert sorted(removed) == sorted([keep.id, third.id, "default"])
    with pytest.raises(NotFound):
        store.get_agent(agent.id)
    assert store.list_conversations(agent.id) == []
    assert [a.id for a in impl.reopen().list_agents()] == []


def test_pg_delete_is_refused_while_input_is_unfinished_and_fences_the_holder(
    pg_url: str, tmp_path: Path
) -> None:
    from tether.backends.postgres.agents import PgConversationStore
    from tether.backends.postgres.connection import LeaseLost, PgSession
    from tether.backends.postgres.leases import ConversationLeases
    from tether.errors import ConversationBusy

    owner, other = PgSession(pg_url, "w-owner"), PgSession(pg_url, "w-other")
    held: dict[str, Any] = {}
    store = PgConversationStore(owner, tmp_path / "a", held.get)
    agent = store.create_agent(model=None, system="s")
    conv = store.create_conversation(agent.id)
    key = conversation_ref(agent.id, conv.id)
    held[key] = lease = ConversationLeases(owner).acquire(key)
    store.transcript(agent.id, conv.id).append([user("u1")])
    with owner.transaction("test: a queued input") as cur:
        cur.execute("INSERT INTO inputs (conversation, item_id, source, disposition, state, body,"
                    " owner) VALUES (%s, 'i1', 'user', 'queued', 'queued', '\\x00', 'w-owner')",
                    (key,))
    elsewhere = PgConversationStore(other, tmp_path / "b", lambda _key: None)
    with pytest.raises(ConversationBusy, match="has queued input on worker w-owner"):
        elsewhere.delete_conversation(agent.id, conv.id)
    assert elsewhere.messages(agent.id, conv.id) == [user("u1")]  # nothing went

    with owner.transaction("test: the input ran") as cur:
        cur.execute("UPDATE inputs SET state = 'done' WHERE conversation = %s", (key,))
    elsewhere.delete_conversation(agent.id, conv.id)
    with pytest.raises(LeaseLost):
        ConversationLeases(owner).renew(lease)  # the owner is fenced out: it stops there
    with pytest.raises(NotFound):
        store.get_conversation(conv.id, agent.id)
    owner.close()
    other.close()


def test_a_document_changes_atomically_and_is_seen_by_another_process(impl: Impl) -> None:
    from concurrent.futures import ThreadPoolExecutor

    assert impl.store.read_document("agents/a-1/reflection.json") is None
    impl.store.update_document("secrets.json", lambda _raw: b'{"other": {"KEEP": "me"}}')
    stores = [impl.store, impl.reopen()]

    def add(n: int) -> None:  # read-modify-write from two processes at once: none is lost
        def change(raw: bytes | None) -> bytes:
            held = orjson.loads(raw) if raw is not None else []
            return orjson.dumps([*held, n])

        stores[n % 2].update_document("agents/a-1/reflection.json", change)

    with ThreadPoolExecutor(4) as pool:
        list(pool.map(add, range(12)))
    got = impl.reopen().read_document("agents/a-1/reflection.json")
    assert got is not None and sorted(orjson.loads(got)) == list(range(12))
    assert impl.reopen().read_document("secrets.json") == b'{"other": {"KEEP": "me"}}'
    for bad in ("../outside.json", "/etc/passwd", "agents/../../x", "", "a//b"):
        with pytest.raises(StoreError, match="does not name a document"):
            impl.store.update_document(bad, lambda _raw: b"x")
        with pytest.raises(StoreError, match="does not name a document"):
            impl.store.read_document(bad)
