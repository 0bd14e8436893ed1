"""What every protocol v2 request family is made of: the `Request` row (fields, handler, scope
rule, the payload a failure carries), the scope rules, and the `Call` a handler receives, whose
lookups answer a scoped client exactly as they answer a nonexistent id (no existence oracle).

A request is `{type: "<name>", request_id, …fields}` answered by one `<name>_response`
`{request_id, success, …payload, error?}` (reference §12.3); the frames are built in
`v2_frames.py`. Handlers are plain functions over `runtime/manage/` (the functions the CLI
calls), returning the payload or raising `RequestFailed` / a `TetherError`.
"""

from __future__ import annotations

import enum
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tether.errors import NotFound, StoreError
from tether.server.frame_reader import FrameError, Reader

if TYPE_CHECKING:
    from tether.backends.local.records import AgentRecord, ConversationRecord
    from tether.backends.store_api import ConversationStore
    from tether.server.app_server import AppServer, Connection
    from tether.server.auth import Grant


class Scope(enum.Enum):
    """Who may send a request, checked before its handler runs."""

    OPEN = "any client (reads nothing owned by an agent)"
    UNSCOPED = "an unscoped connection only (it reaches tether-wide state)"
    AGENT = "the frame's agent_id must be granted and exist (one answer for both)"
    LISTED = "any client; the answer lists only what its token grants"
    OWN = "the handler checks the object's agent through Call (one answer for absent and hidden)"


Handler = Callable[["Call"], "dict[str, Any] | Awaitable[dict[str, Any]]"]


@dataclass(frozen=True, slots=True)
class Request:
    """One request frame type: its fields (besides `type` and `request_id`), what its handler
    needs, who may send it, and the payload fields its response carries when it fails."""

    fields: frozenset[str]
    handler: Handler
    scope: Scope
    failed: Mapping[str, Any] = field(default_factory=dict)
    # Runs git, a clone, a folder walk or the store's round trips: off the event loop (in a
    # worker thread; it may read, never change, what the loop owns).
    blocking: bool = False
    # Frame fields repeated in a failed response ("field", or "field>response_field").
    echo: tuple[str, ...] = ()
    # False: no `<type>_response` (terminal frames answer with their own frames); a failure is
    # an `error` frame naming the frame type, and request_id is optional.
    answered: bool = True
    # False: answered only to say tether has nothing behind it (its capability stays false).
    supported: bool = True


def request(
    fields: str,
    handler: Handler,
    scope: Scope,
    failed: Mapping[str, Any] | None = None,
    *,
    blocking: bool = False,
    echo: tuple[str, ...] = (),
    answered: bool = True,
    supported: bool = True,
) -> Request:
    return Request(
        frozenset(fields.split()), handler, scope, dict(failed or {}), blocking, echo, answered,
        supported,
    )


class RequestFailed(Exception):
    """The request was understood and cannot be done; `str()` is the response's `error`."""


def not_found(noun: str) -> RequestFailed:
    """The one answer for an id that does not exist and for one the token does not grant."""
    return RequestFailed(f"{noun}_id: no such {noun} (or this connection's token does not grant it)")


@dataclass(frozen=True, slots=True)
class RequestFrame:
    """A request frame whose fields have been checked against its row."""

    kind: str
    request_id: str | None  # None only for frames that get no response (terminals)
    msg: Mapping[str, Any]


class Call:
    """One request being answered: the frame's fields, the connection, and the lookups that
    apply its token's scope."""

    def __init__(self, server: AppServer, conn: Connection, frame: RequestFrame) -> None:
        self.server = server
        self.conn = conn
        self.frame = frame
        self.read = Reader(dict(frame.msg), frame.kind, frame.request_id)
        self.agent_record: AgentRecord | None = None
        self.notices: list[tuple[dict[str, Any], str | None, str | None]] = []
        self.replies: list[dict[str, Any]] = []  # frames for this connection, before the answer

    @property
    def grant(self) -> Grant:
        return self.conn.grant

    @property
    def store(self) -> ConversationStore:
        """The server's store (`runtime_start.open_store`): what every request reads and writes."""
        return self.server.ctx.store

    @property
    def home(self) -> Path:
        return self.server.ctx.store.home

    @property
    def env(self) -> dict[str, str]:
        return self.server.ctx.env

    # --- fields -------------------------------------------------------------------------------

    def text(self, name: str) -> str:
        return self.read.required_str(name)

    def opt_text(self, name: str) -> str | None:
        return self.read.opt_str(name)

    def obj(self, name: str) -> dict[str, Any]:
        return self.read.obj(name) or {}

    def flag(self, name: str, default: bool = False) -> bool:
        value = self.frame.msg.get(name)
        if value is None:
            return default
        if not isinstance(value, bool):
            raise self.read.fail(name, "must be true or false")
        return value

    def count(self, name: str, default: int, *, least: int = 1, most: int = 10_000) -> int:
        value = self.frame.msg.get(name)
        if value is None:
            return default
        if isinstance(value, bool) or not isinstance(value, int) or not least <= value <= most:
            raise self.read.fail(name, f"must be a whole number from {least} to {most}")
        return value

    # --- scope --------------------------------------------------------------------------------

    def sees_agent(self, agent_id: str) -> bool:
        return sees_agent(self.server, self.grant, agent_id)

    def sees_conversation(self, record: ConversationRecord) -> bool:
        return self.grant.refusal(record.agent_id, record.id) is None

    def agent(self, agent_id: str, *, change: bool = False) -> AgentRecord:
        """The agent, when the token grants it and it exists; the same answer otherwise. To
        `change` it, a token limited to conversations is refused whatever the id."""
        if change and self.grant.conversations is not None:
            raise RequestFailed(
                f"{self.frame.kind}: this connection's token is scoped to conversations; "
                "it may not change or delete agents"
            )
        if not self.sees_agent(agent_id):
            raise not_found("agent")
        try:
            return self.server.ctx.store.get_agent(agent_id)
        except NotFound:
            raise not_found("agent") from None

    def conversation(self, conversation_id: str, agent_id: str | None = None) -> ConversationRecord:
        """The conversation, when the token grants it (and its agent) and it exists."""
        if self.grant.conversations is not None and conversation_id not in self.grant.conversations:
            raise not_found("conversation")
        if conversation_id == "default" and agent_id is None:
            raise self.read.fail("agent_id", "is required with conversation_id 'default'")
        if agent_id is not None and not self.sees_agent(agent_id):
            raise not_found("conversation")
        try:
            record = self.server.ctx.store.get_conversation(conversation_id, agent_id)
        except NotFound:
            raise not_found("conversation") from None
        if not self.sees_conversation(record):
            raise not_found("conversation")
        return record

    def require_unscoped(self) -> None:
        if self.grant.scoped:
            raise RequestFailed(
                f"{self.frame.kind}: this connection's token is scoped to agents or "
                "conversations; this request reaches tether-wide state and needs an unscoped token"
            )

    def notify(
        self, kind: str, *, agent_id: str, conversation_id: str | None = None, **fields: Any
    ) -> None:
        """Tell every connection that may see the agent (and conversation) what changed, once
        the request is answered (handlers may run in a thread; frames go out on the loop)."""
        from tether.server import v2_frames

        if conversation_id is not None:
            fields["conversation_id"] = conversation_id
        frame = v2_frames.state_updated(kind, agent_id=agent_id, **fields)
        self.notices.append((frame, agent_id, conversation_id))

    def notify_all(self, kind: str, **fields: Any) -> None:
        """Tell every connection of a change to tether-wide state (global skills)."""
        from tether.server import v2_frames

        self.notices.append((v2_frames.state_updated(kind, **fields), None, None))

    def send_notices(self) -> None:
        for frame in self.replies:
            self.conn.send_frame(frame)
        self.replies.clear()
        for frame, agent_id, conversation_id in self.notices:
            for conn in list(self.server.connections):
                if conn.closed:
                    continue
                if agent_id is not None and not sees_agent(self.server, conn.grant, agent_id):
                    continue
                if conversation_id is not None and conn.grant.refusal(agent_id, conversation_id):
                    continue
                conn.send_frame(frame)
        self.notices.clear()


def sees_agent(server: AppServer, grant: Grant, agent_id: str) -> bool:
    """Whether `grant` reaches the agent: named in its `agents`, or, for a token limited to
    conversations only, the agent of one of them."""
    if grant.agents is not None:
        return agent_id in grant.agents
    if grant.conversations is None:
        return True
    store = server.ctx.store
    for conversation_id in grant.conversations:
        try:
            if store.get_conversation(conversation_id).agent_id == agent_id:
                return True
        except StoreError:  # gone, or `default` (which names no agent by itself)
            continue
    return False


def check_fields(
    kind: str, row: Request, msg: Mapping[str, Any], request_id: str | None
) -> str | None:
    """The request_id of a request frame whose fields all belong to its row."""
    reader = Reader(dict(msg), kind, request_id)
    reader.known(set(row.fields) | {"type", "request_id"})
    if request_id is None and row.answered:
        raise FrameError(
            f"{kind}: 'request_id' is required (a non-empty string)",
            request_id=None, frame_type=kind,
        )
    return request_id
