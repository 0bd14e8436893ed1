"""Agents and conversations on the PostgreSQL store: `PgConversationStore`, the
`ConversationStore` of `backends/store_api.py` for `tether server --store postgresql://…`.

Records are the `agents` and `conversations` rows `migrate_home.py` writes (the JSON document,
its exact bytes as the local store would write the file, and the columns looked up by; a
conversation's `key` is the local store's, `default:<agent>` or `conversation:<id>`), so a
migrated home is served as it is. Each conversation's transcript is a `PgTranscript`, its writes
fenced by the lease this worker holds (`lease_of(conversation_ref)`). What is per machine by
nature stays under `home`: a conversation's scratch and cache folder and the turn lock between
this machine's processes (across machines, the lease decides who runs a turn)."""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from tether.backends.local.locks import exclusive_flock
from tether.backends.local.records import AgentRecord, ConversationRecord, utc_now_iso
from tether.backends.local.store import DEFAULT_CONVERSATION, b64url, conversation_key
from tether.backends.postgres.connection import PgSession
from tether.backends.postgres.transcripts import PgTranscript
from tether.backends.store_api import conversation_ref, document_path
from tether.errors import ConversationBusy, NotFound, StoreError

if TYPE_CHECKING:
    from tether.backends.postgres.leases import Lease
    from tether.protocol.messages import Message

_CONVERSATION_IDS_LOCK = 0x7E7E_0032  # pg_advisory_xact_lock: one new conversation id at a time


def agent_path(agent_id: str) -> str:
    return f"agents/{b64url(agent_id)}.json"


def conversation_folder(agent_id: str, conversation_id: str) -> str:
    return f"conversations/{b64url(conversation_key(agent_id, conversation_id))}"


class PgConversationStore:
    def __init__(
        self, session: PgSession, home: Path, lease_of: Callable[[str], Lease | None]
    ) -> None:
        self.session = session
        self.home = Path(home)
        self.lease_of = lease_of
        self._transcripts: dict[tuple[str, str], PgTranscript] = {}

    @property
    def where(self) -> str:
        from tether.backends.postgres.connection import redact

        return f"the PostgreSQL store {redact(self.session.url)}"

    # --- agents -------------------------------------------------------------------------------

    def create_agent(
        self,
        *,
        model: str | None,
        system: str,
        name: str = "tether",
        description: str = "",
        tags: tuple[str, ...] | list[str] = (),
    ) -> AgentRecord:
        now = utc_now_iso()
        record = AgentRecord(
            id=f"agent-local-{uuid.uuid4()}", name=name, description=description, system=system,
            tags=tuple(tags), model=model, model_settings={}, created_at=now, updated_at=now,
        )
        self.save_agent(record)
        return record

    def get_agent(self, agent_id: str) -> AgentRecord:
        with self.session.transaction("read an agent") as cur:
            row = cur.execute("SELECT raw FROM agents WHERE id = %s", (agent_id,)).fetchone()
        if row is None:
            raise NotFound(
                f"No agent {agent_id!r} in {self.where}; list the agents there, or create one"
            )
        return AgentRecord.from_dict(orjson.loads(bytes(row[0])), f"agent {agent_id} in {self.where}")

    def list_agents(self) -> list[AgentRecord]:
        with self.session.transaction("list agents") as cur:
            rows = cur.execute("SELECT id, raw FROM agents").fetchall()
        records = [AgentRecord.from_dict(orjson.loads(bytes(raw)), f"agent {i} in {self.where}")
                   for i, raw in rows]
        return sorted(records, key=lambda r: (r.created_at, r.id))

    def save_agent(self, record: AgentRecord) -> None:
        from psycopg.types.json import Jsonb

        from tether.backends.postgres.migrate_local import _jsonb_safe

        doc = record.to_dict()
        with self.session.transaction("save an agent") as cur:
            cur.execute(
                "INSERT INTO agents (id, name, model, updated_at, path, document, raw)"
                " VALUES (%s, %s, %s, %s, %s, %s, %s) ON CONFLICT (id) DO UPDATE SET"
                " name = EXCLUDED.name, model = EXCLUDED.model, updated_at = EXCLUDED.updated_at,"
                " document = EXCLUDED.document, raw = EXCLUDED.raw",
                (record.id, record.name, record.model, record.updated_at, agent_path(record.id),
                 Jsonb(_jsonb_safe(doc)), _dump(doc)),
            )

    # --- conversations ------------------------------------------------------------------------

    def create_conversation(
        self,
        agent_id: str,
        *,
        extra: Mapping[str, Any] | None = None,
        history: Sequence[Message] = (),
    ) -> ConversationRecord:
        """A new `local-conv-<n>`, n past every id the store has used (records, and the leases,
        which outlive a deleted conversation), with `history` as its first transcript rows in
        the same transaction (token 0: written before any worker held it)."""
        self.get_agent(agent_id)
        with self.session.transaction("create a conversation") as cur:
            cur.execute("SELECT pg_advisory_xact_lock(%s)", (_CONVERSATION_IDS_LOCK,))
            row = cur.execute(
                "SELECT COALESCE(max(n), 0) FROM ("
                " SELECT substring(id FROM '^local-conv-([0-9]+)$')::bigint AS n"
                " FROM conversations UNION ALL"
                " SELECT substring(conversation FROM '/local-conv-([0-9]+)$')::bigint"
                " FROM conversation_leases) AS used"
            ).fetchone()
            n = int(row[0]) + 1 if row else 1
            record = _new_conversation(f"local-conv-{n}", agent_id)
            if extra:
                record = replace(record, extra={**record.extra, **extra})
            self._upsert(cur, record)
            if history:
                _write_history(cur, conversation_ref(agent_id, record.id),
                               conversation_folder(agent_id, record.id) + "/messages.jsonl",
                               history)
        return record

    def default_conversation(self, agent_id: str) -> ConversationRecord:
        self.get_agent(agent_id)
        record = _new_conversation(DEFAULT_CONVERSATION, agent_id)
        with self.session.transaction("create a conversation") as cur:
            self._upsert(cur, record, keep=True)  # another worker's, if first, wins
            row = cur.execute(
                "SELECT raw FROM conversations WHERE key = %s",
                (conversation_key(agent_id, DEFAULT_CONVERSATION),),
            ).fetchone()
        assert row is not None
        return self._record(bytes(row[0]), DEFAULT_CONVERSATION)

    def get_conversation(
        self, conversation_id: str, agent_id: str | None = None
    ) -> ConversationRecord:
        if conversation_id == DEFAULT_CONVERSATION:
            if agent_id is None:
                raise StoreError(
                    "The conversation `default` belongs to an agent: name the agent too "
                    "(e.g. --agent <id> --conversation default)"
                )
            return self.default_conversation(agent_id)
        with self.session.transaction("read a conversation") as cur:
            row = cur.execute(
                "SELECT raw FROM conversations WHERE key = %s",
                (conversation_key("", conversation_id),),
            ).fetchone()
        if row is None:
            raise NotFound(
                f"No conversation {conversation_id!r} in {self.where}; pass an existing "
                "local-conv-<n> id, `default` with an agent, or start a new conversation"
            )
        record = self._record(bytes(row[0]), conversation_id)
        if agent_id is not None and record.agent_id != agent_id:
            raise NotFound(
                f"Conversation {conversation_id!r} belongs to agent {record.agent_id!r}, "
                f"not {agent_id!r}"
            )
        return record

    def list_conversations(self, agent_id: str) -> list[ConversationRecord]:
        with self.session.transaction("list conversations") as cur:
            rows = cur.execute(
                "SELECT id, raw FROM conversations WHERE agent_id = %s", (agent_id,)
            ).fetchall()
        records = [self._record(bytes(raw), str(i)) for i, raw in rows]
        return sorted(records, key=lambda r: (r.created_at, r.id))

    def save_conversation(self, record: ConversationRecord) -> None:
        with self.session.transaction("save a conversation") as cur:
            self._upsert(cur, record)

    def delete_conversation(self, agent_id: str, conversation_id: str) -> None:
        self._delete(agent_id, [conversation_id], agent=False)

    def delete_agent(self, agent_id: str) -> list[str]:
        conversations = [c.id for c in self.list_conversations(agent_id)]
        return self._delete(agent_id, conversations, agent=True)

    def _delete(self, agent_id: str, conversations: list[str], *, agent: bool) -> list[str]:
        """One transaction: refused while any of them has input queued or running on any
        worker; else each holder is fenced out (its token moves on, so its next write or renewal
        is refused and its runtime stops) and the records and transcripts go. The lease rows
        stay: a token never goes back, and an id with one is never handed out again."""
        refs = [conversation_ref(agent_id, c) for c in conversations]
        with self.session.transaction("delete conversations") as cur:
            if agent:
                rows = cur.execute(
                    "SELECT conversation FROM conversation_leases WHERE conversation LIKE %s",
                    (_like_prefix(agent_id) + "/%",),
                ).fetchall()
                refs = sorted(set(refs) | {str(r[0]) for r in rows})
            cur.execute(
                "SELECT 1 FROM conversation_leases WHERE conversation = ANY(%s) FOR UPDATE",
                (refs,),
            )
            busy = cur.execute(
                "SELECT conversation, owner, state FROM inputs WHERE conversation = ANY(%s)"
                " AND state IN ('queued', 'started') LIMIT 1", (refs,),
            ).fetchone()
            if busy is not None:
                conversation = str(busy[0]).split("/", 1)[1]
                what = "runs a turn" if busy[2] == "started" else "has queued input"
                raise ConversationBusy(
                    conversation, f"conversation {conversation} {what} on worker {busy[1]};"
                    " abort it there (or wait for it), then delete",
                )
            cur.execute(
                "UPDATE conversation_leases SET holder = %s, token = token + 1,"
                " expires_at = clock_timestamp() - interval '1 ms' WHERE conversation = ANY(%s)",
                (self.session.worker, refs),
            )
            cur.execute("DELETE FROM transcript WHERE conversation = ANY(%s)", (refs,))
            cur.execute("DELETE FROM transcript_files WHERE conversation = ANY(%s)", (refs,))
            cur.execute(
                "DELETE FROM conversations WHERE key = ANY(%s)",
                ([conversation_key(agent_id, c) for c in conversations],),
            )
            if agent:
                cur.execute("DELETE FROM conversations WHERE agent_id = %s", (agent_id,))
                cur.execute("DELETE FROM agents WHERE id = %s", (agent_id,))
            _forget_migrated(cur, [conversation_folder(agent_id, c) for c in conversations]
                             + ([agent_path(agent_id), f"agents/{agent_id}/reflection.json"]
                                if agent else []))
        for conversation_id in conversations:
            self._transcripts.pop((agent_id, conversation_id), None)
            shutil.rmtree(self.conversation_dir(agent_id, conversation_id), ignore_errors=True)
        return conversations

    def _upsert(self, cur: Any, record: ConversationRecord, *, keep: bool = False) -> None:
        from psycopg.types.json import Jsonb

        from tether.backends.postgres.migrate_local import _jsonb_safe

        doc = record.to_dict()
        on_conflict = "DO NOTHING" if keep else (
            "DO UPDATE SET archived = EXCLUDED.archived, updated_at = EXCLUDED.updated_at,"
            " document = EXCLUDED.document, raw = EXCLUDED.raw"
        )
        cur.execute(
            "INSERT INTO conversations (key, id, agent_id, archived, updated_at, path, document,"
            " raw) VALUES (%s, %s, %s, %s, %s, %s, %s, %s) ON CONFLICT (key) " + on_conflict,
            (conversation_key(record.agent_id, record.id), record.id, record.agent_id,
             bool(record.archived), record.updated_at,
             conversation_folder(record.agent_id, record.id) + "/conversation.json",
             Jsonb(_jsonb_safe(doc)), _dump(doc)),
        )

    def _record(self, raw: bytes, conversation_id: str) -> ConversationRecord:
        return ConversationRecord.from_dict(
            orjson.loads(raw), f"conversation {conversation_id} in {self.where}"
        )

    # --- transcripts, folders and the turn lock -----------------------------------------------

    def transcript(
        self, agent_id: str, conversation_id: str, *, cwd: str | None = None
    ) -> PgTranscript:
        """The conversation's transcript rows (the header row made on first use); the record is
        checked (NotFound, wrong agent) on the first call for a pair only, as locally."""
        cached = self._transcripts.get((agent_id, conversation_id))
        if cached is not None:
            return cached
        self.get_conversation(conversation_id, agent_id)
        transcript = self._log(agent_id, conversation_id)
        transcript.ensure_created(cwd)
        self._transcripts[(agent_id, conversation_id)] = transcript
        return transcript

    def forget(self, agent_id: str, conversation_id: str) -> None:
        self._transcripts.pop((agent_id, conversation_id), None)

    def messages(self, agent_id: str, conversation_id: str) -> list[Message]:
        """The active view of the conversation's rows; none (and nothing made) without any."""
        cached = self._transcripts.get((agent_id, conversation_id))
        if cached is not None:
            return cached.load()
        return self._log(agent_id, conversation_id).load()

    def _log(self, agent_id: str, conversation_id: str) -> PgTranscript:
        key = conversation_ref(agent_id, conversation_id)
        return PgTranscript(
            self.session, key, conversation_folder(agent_id, conversation_id) + "/messages.jsonl",
            lambda: self.lease_of(key),
        )

    # --- documents beside the records -------------------------------------------------------

    def read_document(self, rel: str) -> bytes | None:
        """The `home_files` row `store migrate` copies the file into (so a migrated home's
        documents are served, and copied back, as they are)."""
        rel = document_path(rel, self.where)
        with self.session.transaction("read a document") as cur:
            row = cur.execute("SELECT content FROM home_files WHERE path = %s", (rel,)).fetchone()
        return bytes(row[0]) if row is not None and row[0] is not None else None

    def update_document(self, rel: str, change: Callable[[bytes | None], bytes]) -> bytes:
        """The row rewritten in one transaction holding it locked (a new one 0600)."""
        rel = document_path(rel, self.where)
        with self.session.transaction("change a document") as cur:
            cur.execute(
                "INSERT INTO home_files (path, mode, content) VALUES (%s, %s, NULL)"
                " ON CONFLICT DO NOTHING", (rel, stat.S_IFREG | 0o600),
            )
            row = cur.execute(
                "SELECT content FROM home_files WHERE path = %s FOR UPDATE", (rel,)
            ).fetchone()
            after = change(bytes(row[0]) if row is not None and row[0] is not None else None)
            cur.execute("UPDATE home_files SET content = %s WHERE path = %s", (after, rel))
        return after

    def conversation_dir(self, agent_id: str, conversation_id: str) -> Path:
        """This machine's folder for the conversation (scratch, caches); no transcript in it."""
        return self.home / conversation_folder(agent_id, conversation_id)

    @contextlib.contextmanager
    def turn_lock(self, agent_id: str, conversation_id: str, wait: float = 0) -> Iterator[None]:
        path = self.conversation_dir(agent_id, conversation_id) / "turn.lock"
        with exclusive_flock(path, wait=wait, busy=lambda: ConversationBusy(conversation_id)):
            yield


def _new_conversation(conversation_id: str, agent_id: str) -> ConversationRecord:
    now = utc_now_iso()
    return ConversationRecord(
        id=conversation_id, agent_id=agent_id, archived=False, archived_at=None, created_at=now,
        updated_at=now, last_message_at=None, summary=None, in_context_message_ids=(),
    )


def _write_history(cur: Any, key: str, path: str, history: Sequence[Message]) -> None:
    """A new transcript: its header row and one row per message, as `PgTranscript.append`
    would write them, with token 0 (no lease yet: nobody else knows the conversation)."""
    from psycopg.types.json import Jsonb

    from tether.backends.local.entry_format import message_entries, session_header
    from tether.backends.postgres.migrate_local import _jsonb_safe

    cur.execute(
        "INSERT INTO transcript_files (conversation, path, header, torn) VALUES (%s, %s, %s, '')",
        (key, path, session_header(None)),
    )
    taken: set[str] = set()

    def new_id(seen: set[str]) -> str:
        while True:
            eid = os.urandom(4).hex()
            if eid not in taken and eid not in seen:
                taken.add(eid)
                seen.add(eid)
                return eid

    lines = [line for _, _, line in message_entries(history, {}, None, new_id)]
    cur.executemany(
        "INSERT INTO transcript (conversation, seq, entry, token, line) VALUES (%s, %s, %s, 0, %s)",
        [(key, seq, Jsonb(_jsonb_safe(orjson.loads(line))), line)
         for seq, line in enumerate(lines, 1)],
    )


def _forget_migrated(cur: Any, paths: list[str]) -> None:
    """What `tether store migrate` copied in under `paths` (files, folders and their digests):
    gone with what was deleted, so a copy back neither restores it nor fails its check."""
    for path in paths:
        pattern = _like_prefix(path) + "/%"
        cur.execute("DELETE FROM home_files WHERE path = %s OR path LIKE %s", (path, pattern))
        cur.execute("DELETE FROM home_digests WHERE path = %s OR path LIKE %s", (path, pattern))


def _like_prefix(text: str) -> str:
    """`text` for a LIKE pattern, its wildcards escaped."""
    return text.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")


def _dump(obj: Any) -> bytes:
    """The bytes the local store writes for a record (so a home copied back is the same)."""
    return orjson.dumps(obj, option=orjson.OPT_INDENT_2) + b"\n"
