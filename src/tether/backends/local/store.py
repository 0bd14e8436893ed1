"""The durable local store under TETHER_HOME: agent and conversation records, conversation
transcripts, the cross-process id counter and the per-conversation turn lock (reference §4.1).

    agents/<b64url(agentId)>.json
    conversations/<b64url(key)>/conversation.json | messages.jsonl | manifest.json | turn.lock
    counters.json (+ counters.lock)
    secrets.json, agents/<id>/reflection.json (+ .lock): documents, `read_document`

key = `default:<agentId>` for an agent's primary history (whose record id is `default`), else
`conversation:<id>`. Records are replaced atomically; nothing is created until first written.
"""

from __future__ import annotations

import base64
import contextlib
import shutil
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

import orjson

from tether.backends.local.locks import create_exclusive, exclusive_flock, write_atomic, writing
from tether.backends.local.records import AgentRecord, ConversationRecord, utc_now_iso
from tether.backends.local.transcript import Transcript
from tether.errors import ConversationBusy, NotFound, ProtocolError, StoreError
from tether.protocol.messages import Message

SCHEMA_VERSION = 2
MESSAGE_FORMAT = "pi-session-entry-jsonl"
DEFAULT_CONVERSATION = "default"
# A counter lock is held for microseconds; waiting this long means a stuck holder.
_COUNTER_WAIT_S = 10.0


def b64url(text: str) -> str:
    return base64.urlsafe_b64encode(text.encode()).rstrip(b"=").decode("ascii")


def conversation_key(agent_id: str, conversation_id: str) -> str:
    if conversation_id == DEFAULT_CONVERSATION:
        return f"default:{agent_id}"
    return f"conversation:{conversation_id}"


class LocalStore:
    def __init__(self, home: Path) -> None:
        self.home = Path(home)
        # One Transcript per (agent, conversation) so its in-memory view survives between sends.
        self._transcripts: dict[tuple[str, str], Transcript] = {}

    # --- agents -----------------------------------------------------------------------------

    def _agent_path(self, agent_id: str) -> Path:
        return self.home / "agents" / f"{b64url(agent_id)}.json"

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
            id=f"agent-local-{uuid.uuid4()}",
            name=name,
            description=description,
            system=system,
            tags=tuple(tags),
            model=model,
            model_settings={},
            created_at=now,
            updated_at=now,
        )
        self.save_agent(record)
        return record

    def get_agent(self, agent_id: str) -> AgentRecord:
        path = self._agent_path(agent_id)
        data = _read_json(path)
        if data is None:
            raise NotFound(
                f"No agent {agent_id!r} in {self.home}; run `tether agents list` to see the "
                "agents there, or start without --agent to create one"
            )
        return AgentRecord.from_dict(data, str(path))

    def list_agents(self) -> list[AgentRecord]:
        records = []
        for path in sorted((self.home / "agents").glob("*.json")):
            data = _read_json(path)
            if data is not None:  # deleted while listing
                records.append(AgentRecord.from_dict(data, str(path)))
        return sorted(records, key=lambda r: (r.created_at, r.id))

    def save_agent(self, record: AgentRecord) -> None:
        write_atomic(self._agent_path(record.id), _dump(record.to_dict()))

    # --- conversations ----------------------------------------------------------------------

    def conversation_dir(self, agent_id: str, conversation_id: str) -> Path:
        return self.home / "conversations" / b64url(conversation_key(agent_id, conversation_id))

    def create_conversation(
        self,
        agent_id: str,
        *,
        extra: Mapping[str, Any] | None = None,
        history: Sequence[Message] = (),
    ) -> ConversationRecord:
        """A new `local-conv-<n>` (the counter under its lock, the folder claimed under it), its
        transcript holding `history` before the record is written: a lister never sees a fork
        without its copy."""
        self.get_agent(agent_id)
        with self._counters() as counters:
            n = _count(counters, "conversation", self.home / "counters.json")
            while True:
                n += 1
                directory = self.conversation_dir(agent_id, f"local-conv-{n}")
                try:
                    # Claiming the folder under the counter lock keeps ids unique even if
                    # counters.json was lost or rolled back.
                    with writing(directory, "create"):
                        directory.mkdir(parents=True)
                    break
                except FileExistsError:
                    continue
            counters["conversation"] = n
        record = _new_conversation(f"local-conv-{n}", agent_id)
        if extra:
            record = replace(record, extra={**record.extra, **extra})
        if history:
            self._check_manifest(directory, directory / "messages.jsonl")
            transcript = Transcript(directory / "messages.jsonl")
            transcript.ensure_created()
            transcript.append(history)
        self.save_conversation(record)
        return record

    def default_conversation(self, agent_id: str) -> ConversationRecord:
        """The agent's primary conversation (id `default`), created on first use."""
        self.get_agent(agent_id)
        path = self.conversation_dir(agent_id, DEFAULT_CONVERSATION) / "conversation.json"
        data = _read_json(path)
        if data is None:
            record = _new_conversation(DEFAULT_CONVERSATION, agent_id)
            if create_exclusive(path, _dump(record.to_dict())):
                return record
            data = _read_json(path)  # another process created it first: theirs wins
            if data is None:
                raise StoreError(f"{path}: vanished while being created; try again")
        return ConversationRecord.from_dict(data, str(path))

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
        path = self.conversation_dir("", conversation_id) / "conversation.json"
        data = _read_json(path)
        if data is None:
            raise NotFound(
                f"No conversation {conversation_id!r} in {self.home}; pass an existing "
                "local-conv-<n> id, `default` with an agent, or start a new conversation"
            )
        record = ConversationRecord.from_dict(data, str(path))
        if agent_id is not None and record.agent_id != agent_id:
            raise NotFound(
                f"Conversation {conversation_id!r} belongs to agent {record.agent_id!r}, "
                f"not {agent_id!r}"
            )
        return record

    def list_conversations(self, agent_id: str) -> list[ConversationRecord]:
        records = []
        for path in sorted((self.home / "conversations").glob("*/conversation.json")):
            data = _read_json(path)
            if data is None:
                continue
            record = ConversationRecord.from_dict(data, str(path))
            if record.agent_id == agent_id:
                records.append(record)
        return sorted(records, key=lambda r: (r.created_at, r.id))

    def save_conversation(self, record: ConversationRecord) -> None:
        path = self.conversation_dir(record.agent_id, record.id) / "conversation.json"
        write_atomic(path, _dump(record.to_dict()))

    def delete_conversation(self, agent_id: str, conversation_id: str) -> None:
        """Remove the conversation's folder (record, transcript, attachments); the caller holds
        its turn lock."""
        self._transcripts.pop((agent_id, conversation_id), None)
        shutil.rmtree(self.conversation_dir(agent_id, conversation_id), ignore_errors=True)

    def delete_agent(self, agent_id: str) -> list[str]:
        """Remove the agent's record, then each of its conversations' folders (its `default`
        one too when it was ever written)."""
        conversations = [c.id for c in self.list_conversations(agent_id)]
        if (self.conversation_dir(agent_id, DEFAULT_CONVERSATION).is_dir()
                and DEFAULT_CONVERSATION not in conversations):
            conversations.append(DEFAULT_CONVERSATION)
        self._agent_path(agent_id).unlink(missing_ok=True)
        for conversation_id in conversations:
            self.delete_conversation(agent_id, conversation_id)
        return conversations

    # --- transcripts and locks --------------------------------------------------------------

    def transcript(
        self, agent_id: str, conversation_id: str, *, cwd: str | None = None
    ) -> Transcript:
        """That conversation's messages.jsonl, created (manifest + header) on first use.

        `cwd` goes into a new file's session header (default: the process's cwd). The record
        is checked (NotFound, wrong agent) on the first call for a pair only: a conversation's
        agent never changes, and the backend asks on every
        send (re-reading conversation.json each time was ~0.1 ms of every server turn); a
        conversation deleted through this store is forgotten here."""
        cached = self._transcripts.get((agent_id, conversation_id))
        if cached is not None:
            return cached
        self.get_conversation(conversation_id, agent_id)  # NotFound / wrong agent
        directory = self.conversation_dir(agent_id, conversation_id)
        path = directory / "messages.jsonl"
        self._check_manifest(directory, path)
        transcript = Transcript(path)
        transcript.ensure_created(cwd)
        self._transcripts[(agent_id, conversation_id)] = transcript
        return transcript

    def forget(self, agent_id: str, conversation_id: str) -> None:
        self._transcripts.pop((agent_id, conversation_id), None)

    def messages(self, agent_id: str, conversation_id: str) -> list[Message]:
        """The active view of messages.jsonl, read without creating anything."""
        cached = self._transcripts.get((agent_id, conversation_id))
        if cached is not None:
            return cached.load()
        path = self.conversation_dir(agent_id, conversation_id) / "messages.jsonl"
        if not path.is_file():
            return []
        return Transcript(path).load()

    def _check_manifest(self, directory: Path, messages: Path) -> None:
        path = directory / "manifest.json"
        data = _read_json(path)
        if data is None:
            if messages.exists():
                raise StoreError(
                    f"{messages} has no manifest.json (an unversioned transcript): it needs "
                    f"migration to schema_version {SCHEMA_VERSION} before tether can use it; "
                    "move the conversation folder aside to start fresh"
                )
            manifest = {
                "schema_version": SCHEMA_VERSION,
                "message_format": MESSAGE_FORMAT,
                "provider_stack": "tether",
                "created_at": utc_now_iso(),
            }
            if create_exclusive(path, _dump(manifest)):
                return
            data = _read_json(path)
        version = data.get("schema_version") if isinstance(data, dict) else None
        if version != SCHEMA_VERSION:
            raise StoreError(
                f"{path}: transcript schema_version {version!r} needs migration to "
                f"{SCHEMA_VERSION} before this tether can read it; "
                "move the conversation folder aside to start fresh"
            )
        if isinstance(data, dict) and data.get("message_format") != MESSAGE_FORMAT:
            raise StoreError(
                f"{path}: message_format {data.get('message_format')!r} is not "
                f"{MESSAGE_FORMAT!r}; tether cannot read this transcript"
            )

    @contextlib.contextmanager
    def turn_lock(self, agent_id: str, conversation_id: str, wait: float = 0) -> Iterator[None]:
        """Hold the conversation's turn lock (one turn at a time, across processes).

        Waits up to `wait` seconds for another holder, then raises ConversationBusy."""
        path = self.conversation_dir(agent_id, conversation_id) / "turn.lock"
        with exclusive_flock(path, wait=wait, busy=lambda: ConversationBusy(conversation_id)):
            yield

    # --- documents beside the records ----------------------------------------------------

    def read_document(self, rel: str) -> bytes | None:
        path = self._document(rel)
        try:
            return path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise StoreError(f"cannot read {path}: {exc}") from None

    def update_document(self, rel: str, change: Callable[[bytes | None], bytes]) -> bytes:
        """Rewritten whole and atomically (0600) under `<path>.lock`."""
        path = self._document(rel)
        with exclusive_flock(path.with_name(path.name + ".lock"), wait=10, busy=lambda: StoreError(
                f"{path} is busy (another writer holds {path.name}.lock); try again")):
            after = change(self.read_document(rel))
            write_atomic(path, after)
        return after

    def _document(self, rel: str) -> Path:
        from tether.backends.store_api import document_path

        return self.home / document_path(rel, self.home)

    def next_counter(self, name: str) -> int:
        """The next value of a named cross-process counter in counters.json (first is 1)."""
        with self._counters() as counters:
            n = _count(counters, name, self.home / "counters.json") + 1
            counters[name] = n
        return n

    @contextlib.contextmanager
    def _counters(self) -> Iterator[dict[str, Any]]:
        """counters.json under its flock; the dict is written back when the body succeeds."""
        lock = self.home / "counters.lock"
        path = self.home / "counters.json"

        def busy() -> StoreError:
            return StoreError(
                f"{lock} stayed locked for {_COUNTER_WAIT_S:.0f}s; is a tether stuck?"
            )

        with exclusive_flock(lock, wait=_COUNTER_WAIT_S, busy=busy):
            data = _read_json(path)
            if data is None:
                data = {}
            if not isinstance(data, dict):
                raise StoreError(f"{path}: must be a JSON object of counters")
            yield data
            write_atomic(path, _dump(data))


def _count(counters: dict[str, Any], name: str, path: Path) -> int:
    n = counters.get(name, 0)
    if not isinstance(n, int) or isinstance(n, bool) or n < 0:
        raise StoreError(f"{path}: counter {name!r} must be a non-negative integer, got {n!r}")
    return n


def _new_conversation(conversation_id: str, agent_id: str) -> ConversationRecord:
    now = utc_now_iso()
    return ConversationRecord(
        id=conversation_id,
        agent_id=agent_id,
        archived=False,
        archived_at=None,
        created_at=now,
        updated_at=now,
        last_message_at=None,
        summary=None,
        in_context_message_ids=(),
    )


def _read_json(path: Path) -> Any:
    """The decoded file, or None if it does not exist; bad JSON names the file."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return None
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise ProtocolError(f"{path}: not valid JSON ({exc}); repair or remove the file") from None


def _dump(obj: Any) -> bytes:
    return orjson.dumps(obj, option=orjson.OPT_INDENT_2) + b"\n"
