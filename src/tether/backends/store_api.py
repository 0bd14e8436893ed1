"""The one store interface the runtime and the backends use for agents, conversations and
transcripts (issue 31 item 1): `ConversationStore` and the `TranscriptLog` it hands out.

Two implementations satisfy it: the embedded default, `backends/local/store.py` `LocalStore`
(files under TETHER_HOME, `backends/local/transcript.py`), and `tether server --store
postgresql://…`'s `backends/postgres/agents.py` `PgConversationStore` (rows; transcript appends
fenced by the conversation's lease, `backends/postgres/transcripts.py`). Which one a process
uses is chosen in one place, `server/runtime_start.py` `open_store`; nothing else branches on
it. So are the small documents kept beside the records (agents' secrets, reflection state:
`read_document`, `update_document`). Both keep what is per machine by nature (a conversation's scratch and cache folder,
`conversation_dir`, and the in-process turn lock) under `home`.

A transcript's rows across the PostgreSQL store are keyed by `conversation_ref(agent, id)`, the
key the leases, the input queue and the effect checkpoints use too.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from tether.errors import StoreError

if TYPE_CHECKING:
    from tether.backends.local.records import AgentRecord, ConversationRecord
    from tether.protocol.messages import Message


def conversation_ref(agent_id: str, conversation_id: str) -> str:
    """The store-wide key of one conversation (`<agent>/<conversation>`): the lease's, the
    queue's, the checkpoints' and the transcript rows'."""
    return f"{agent_id}/{conversation_id}"


def document_path(rel: str, where: object) -> str:
    """`rel` when it names a document inside a home (relative, no `.` or `..` parts), else
    StoreError naming it and `where`."""
    parts = rel.split("/")
    if not rel or rel.startswith("/") or any(p in ("", ".", "..") for p in parts):
        raise StoreError(f"{rel!r} does not name a document inside {where}")
    return rel


class TranscriptLog(Protocol):
    """One conversation's append-only history (reference §4.3): entries in order, an active view
    replayed from them (message snapshots replaced in place, compactions, rollbacks). An append
    returns only once durable (fsynced, or committed); a write the store refuses raises."""

    def ensure_created(self, cwd: str | None = None) -> None: ...

    def load(self) -> list[Message]: ...

    def tail(self, limit: int) -> list[Message]: ...

    def header(self) -> dict[str, Any] | None: ...

    def last_compaction_id(self) -> str | None: ...

    def entries(self) -> list[dict[str, Any]]: ...

    def written_bytes(self) -> bytes: ...

    def append(self, messages: Sequence[Message]) -> None: ...

    def rollback(self, message_id: str) -> None: ...

    def append_compaction(
        self,
        summary_message: Message,
        *,
        summary: str,
        first_kept_message_id: str | None,
        tokens_before: int,
        details: Mapping[str, Any] | None = None,
    ) -> str: ...


class ConversationStore(Protocol):
    """Agent and conversation records and each conversation's transcript."""

    home: Path

    def create_agent(
        self,
        *,
        model: str | None,
        system: str,
        name: str = "tether",
        description: str = "",
        tags: tuple[str, ...] | list[str] = (),
    ) -> AgentRecord: ...

    def get_agent(self, agent_id: str) -> AgentRecord: ...

    def list_agents(self) -> list[AgentRecord]: ...

    def save_agent(self, record: AgentRecord) -> None: ...

    def create_conversation(
        self,
        agent_id: str,
        *,
        extra: Mapping[str, Any] | None = None,
        history: Sequence[Message] = (),
    ) -> ConversationRecord:
        """A new conversation (`local-conv-<n>`, never an id used before) whose record carries
        `extra` and whose transcript starts with `history` (a fork's copy), made as one step: a
        reader sees it whole or not at all."""
        ...

    def default_conversation(self, agent_id: str) -> ConversationRecord: ...

    def get_conversation(
        self, conversation_id: str, agent_id: str | None = None
    ) -> ConversationRecord: ...

    def list_conversations(self, agent_id: str) -> list[ConversationRecord]: ...

    def save_conversation(self, record: ConversationRecord) -> None: ...

    def delete_conversation(self, agent_id: str, conversation_id: str) -> None:
        """Remove the conversation's record and transcript (its folder here too). The caller
        holds its turn lock; a store shared by workers also refuses (`ConversationBusy`) while
        it has unfinished input anywhere, and fences out the worker holding it."""
        ...

    def delete_agent(self, agent_id: str) -> list[str]:
        """Remove the agent's record and every conversation of it (as `delete_conversation`,
        all or nothing); the ids of the conversations removed. The caller holds their locks."""
        ...

    def transcript(
        self, agent_id: str, conversation_id: str, *, cwd: str | None = None
    ) -> TranscriptLog: ...

    def forget(self, agent_id: str, conversation_id: str) -> None:
        """Drop what this process holds in memory of the conversation (its transcript's view,
        kept between sends); the next use reads it again. A released runtime's is dropped."""
        ...

    def messages(self, agent_id: str, conversation_id: str) -> list[Message]:
        """The conversation's active view, read without creating anything (a conversation never
        sent to has none)."""
        ...

    def conversation_dir(self, agent_id: str, conversation_id: str) -> Path: ...

    def read_document(self, rel: str) -> bytes | None:
        """A small document the runtime keeps beside the records, by its path in a home
        (`secrets.json`, `agents/<id>/reflection.json`); None when there is none."""
        ...

    def update_document(self, rel: str, change: Callable[[bytes | None], bytes]) -> bytes:
        """Replace the document with `change(current)` as one atomic step: two writers' changes
        never interleave (each sees the other's). What it holds after."""
        ...

    def turn_lock(
        self, agent_id: str, conversation_id: str, wait: float = 0
    ) -> AbstractContextManager[None]: ...


__all__ = ["ConversationStore", "TranscriptLog", "conversation_ref", "document_path"]
