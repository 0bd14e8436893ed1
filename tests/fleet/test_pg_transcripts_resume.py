"""A PostgreSQL transcript read by a new reader resumes from its last compaction
(`backends/postgres/transcript_resume.py`): for random histories (appends, snapshots replaced in
place, rollbacks, compactions keeping some or none) the resumed view is the full replay's, the
resumed reader writes on as the writer would, and it reads the kept rows and what follows only."""

from __future__ import annotations

import random
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.backends.support import assistant, user
from tether.backends.store_api import conversation_ref
from tether.errors import TranscriptCorrupt
from tether.protocol.messages import TextPart, UserMessage


@pytest.fixture
def store(pg_url: str, tmp_path: Path) -> Iterator[Any]:
    from tether.backends.postgres.agents import PgConversationStore
    from tether.backends.postgres.connection import PgSession
    from tether.backends.postgres.leases import ConversationLeases

    session = PgSession(pg_url, "resume-test")
    leases = ConversationLeases(session)
    held: dict[str, Any] = {}

    def lease_of(key: str) -> Any:
        if key not in held:
            held[key] = leases.acquire(key)
        return held[key]

    yield PgConversationStore(session, tmp_path / "home", lease_of)
    session.close()


def _fresh(store: Any, agent: str, conv: str, *, full: bool = False) -> Any:
    from tether.backends.postgres.transcripts import PgTranscript

    t = PgTranscript(store.session, conversation_ref(agent, conv), "x", lambda: None)
    if full:
        t._collect = []  # a full, collecting read (what entries() does): no resume
    return t


def _play(rng: random.Random, transcript: Any, steps: int) -> int:
    compactions = 0
    for step in range(steps):
        view = transcript.load()
        roll = rng.random()
        if roll < 0.45 or not view:
            transcript.append([user(f"m{rng.randrange(12)}", f"text {step}")])
        elif roll < 0.6:
            transcript.append([assistant(rng.choice(view).id, text=f"edit {step}")])
        elif roll < 0.7:
            transcript.rollback(rng.choice(view).id)
        else:
            kept = rng.choice([None, *[m.id for m in view]])
            summary = UserMessage(f"s{step}", (TextPart(f"summary {step}"),), 1_700_000_000_000)
            transcript.append_compaction(summary, summary=f"summary {step}",
                                         first_kept_message_id=kept, tokens_before=step)
            compactions += 1
    return compactions


@pytest.mark.parametrize("seed", range(12))
def test_a_resumed_view_is_the_full_replays(store: Any, seed: int) -> None:
    rng = random.Random(seed)
    agent = store.create_agent(model=None, system="s")
    transcript = store.transcript(agent.id, "default")
    _play(rng, transcript, 30)
    resumed, full = _fresh(store, agent.id, "default"), _fresh(store, agent.id, "default", full=True)
    assert resumed.load() == full.load() == transcript.load()
    assert resumed.last_compaction_id() == full.last_compaction_id()
    # The resumed reader writes on (its lease is the writer's) and agrees with a full read.
    writer = store.transcript(agent.id, "default")
    writer._reset()  # as a worker that never read it: the next read resumes
    _play(rng, writer, 10)
    assert _fresh(store, agent.id, "default").load() == _fresh(
        store, agent.id, "default", full=True).load() == writer.load()


def test_only_the_kept_rows_and_what_follows_are_read_in_full(store: Any) -> None:
    agent = store.create_agent(model=None, system="s")
    transcript = store.transcript(agent.id, "default")
    transcript.append([user(f"old{n}", "x" * 100) for n in range(50)])
    transcript.append([user("keep"), assistant("a1")])
    summary = UserMessage("s", (TextPart("sum"),), 1_700_000_000_000)
    transcript.append_compaction(summary, summary="sum", first_kept_message_id="keep",
                                 tokens_before=1)
    transcript.append([user("after")])
    # Damage in an evicted message body: a full read finds it, the resumed one never reads it.
    with store.session.transaction("test: damage an old row") as cur:
        cur.execute("UPDATE transcript SET line = %s WHERE seq = 3",
                    (b'{"type":"message","id":"x","parentId":null,"message":{"role":7}}\n',))
    resumed = _fresh(store, agent.id, "default")
    assert [m.id for m in resumed.load()] == ["s", "keep", "a1", "after"]
    with pytest.raises(TranscriptCorrupt, match=":4: "):
        _fresh(store, agent.id, "default", full=True).load()


def test_the_same_record_twice_before_the_compaction_is_still_damage(store: Any) -> None:
    agent = store.create_agent(model=None, system="s")
    transcript = store.transcript(agent.id, "default")
    transcript.append([user("u1"), user("u2")])
    first = transcript.entries()[0]
    key = conversation_ref(agent.id, "default")
    from psycopg.types.json import Jsonb

    from tether.protocol.messages import message_to_dict

    compaction = {"type": "compaction", "id": "c0c0c0c0", "parentId": first["id"],
                  "timestamp": "t", "summary": "sum", "firstKeptEntryId": None, "tokensBefore": 1,
                  "message": message_to_dict(UserMessage("s", (TextPart("sum"),), 1))}
    with store.session.transaction("test: a record twice, then a compaction") as cur:
        for seq, entry in ((3, first), (4, compaction)):
            cur.execute("INSERT INTO transcript (conversation, seq, entry, token) VALUES"
                        " (%s, %s, %s, 0)", (key, seq, Jsonb(entry)))
    with pytest.raises(TranscriptCorrupt, match=":4: .*recorded twice"):
        _fresh(store, agent.id, "default").load()
