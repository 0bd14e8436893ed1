"""Effect checkpoints on PostgreSQL: the runtime's `CheckpointStore` methods (`record_before`,
`record_after`, `mark_unknown`, `get`, `for_conversation`) over one table, each change a
compare-and-swap on (revision, owner) as in SQLite, and in a fleet fenced too: while a
conversation has a lease, only its holder writes that conversation's checkpoints (the lease row
share-locked in the same statement, one round trip), so a worker whose lease moved cannot record an `after`
over what its successor settled. The runtime's record type and its two errors are passed in
(`CheckpointShape`), so this L2 adapter never imports L3 and the runtime's recovery code runs
on it unchanged."""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar

import orjson

from tether.backends.postgres import logs
from tether.backends.postgres.connection import LeaseLost, PgSession
from tether.errors import StoreError
from tether.protocol.tool_calls import ToolCall, ToolReturn


class CheckpointConflict(StoreError):
    """The row changed under its writer (revision or owner moved)."""


class AlreadyCheckpointed(StoreError):
    """The tool call has a checkpoint already: running it again could repeat an effect."""


class CheckpointRecord(Protocol):
    @property
    def conversation(self) -> str: ...
    @property
    def call(self) -> ToolCall: ...
    @property
    def owner(self) -> str: ...
    @property
    def revision(self) -> int: ...


C = TypeVar("C", bound=CheckpointRecord)


@dataclass(frozen=True, slots=True)
class CheckpointShape(Generic[C]):
    """The runtime's side: its record constructor (conversation, call, phase, result, owner,
    revision), its errors, and an unknown outcome's text."""

    make: Callable[..., C]
    unknown_output: str
    already: type[Exception] = field(default=AlreadyCheckpointed)
    conflict: type[Exception] = field(default=CheckpointConflict)


class PgCheckpointStore(Generic[C]):
    """`effect_checkpoints` in the store at `session.url`. Thread-safe (the session's lock)."""

    def __init__(self, session: PgSession, shape: CheckpointShape[C]) -> None:
        self.session = session
        self.shape = shape

    def close(self) -> None:
        self.session.close()

    def record_before(self, conversation: str, call: ToolCall, owner: str) -> C:
        with self.session.statement("record an effect checkpoint") as cur:
            row = cur.execute(
                _FENCED.format(write=(
                    "INSERT INTO effect_checkpoints (conversation, tool_call_id, tool_name,"
                    " arguments, phase, result, owner, revision)"
                    " SELECT %(c)s, %(id)s, %(name)s, %(args)s, 'before', NULL, %(owner)s, 1"
                    " WHERE NOT EXISTS (SELECT FROM lease WHERE holder <> %(owner)s)"
                    " ON CONFLICT DO NOTHING RETURNING 1"
                )),
                {"c": conversation, "id": call.id, "name": call.name,
                 "args": call.text.encode(), "owner": owner},
            ).fetchone()
        if _written(row, conversation, owner) != 1:
            raise self.shape.already(
                f"tool call {call.id} in {conversation} already has an effect checkpoint"
            )
        return self.shape.make(conversation, call, "before", None, owner, 1)

    def record_after(self, cp: C, result: ToolReturn) -> C:
        payload = {
            "output": result.output,
            "is_error": result.is_error,
            "stdout": list(result.stdout) if result.stdout is not None else None,
            "stderr": list(result.stderr) if result.stderr is not None else None,
        }
        return self._swap(cp, "after", payload, cp.owner)

    def mark_unknown(self, cp: C, owner: str) -> C:
        """Take the row over (fencing its old owner out) and settle it as unknown."""
        return self._swap(cp, "unknown", {"output": self.shape.unknown_output, "is_error": True}, owner)

    def _swap(self, cp: C, phase: str, result: dict[str, Any], owner: str) -> C:
        with self.session.statement("settle an effect checkpoint") as cur:
            row = cur.execute(
                _FENCED.format(write=(
                    "UPDATE effect_checkpoints SET phase = %(phase)s, result = %(result)s,"
                    " owner = %(owner)s, revision = revision + 1, updated_at = clock_timestamp()"
                    " WHERE conversation = %(c)s AND tool_call_id = %(id)s"
                    " AND revision = %(revision)s AND owner = %(was)s"
                    " AND NOT EXISTS (SELECT FROM lease WHERE holder <> %(owner)s) RETURNING 1"
                )),
                {"phase": phase, "result": orjson.dumps(result), "owner": owner,
                 "c": cp.conversation, "id": cp.call.id, "revision": cp.revision,
                 "was": cp.owner},
            ).fetchone()
        if _written(row, cp.conversation, owner) != 1:
            raise self.shape.conflict(
                f"effect checkpoint {cp.call.id} changed under runtime {cp.owner} "
                f"(expected revision {cp.revision}); another runtime owns this conversation now"
            )
        return self.shape.make(cp.conversation, cp.call, phase, result, owner, cp.revision + 1)

    def get(self, conversation: str, tool_call_id: str) -> C | None:
        rows = self._select("AND tool_call_id = %s", (conversation, tool_call_id))
        return rows[0] if rows else None

    def for_conversation(self, conversation: str) -> dict[str, C]:
        return {cp.call.id: cp for cp in self._select("", (conversation,))}

    def _select(self, extra: str, params: tuple[Any, ...]) -> list[C]:
        with self.session.transaction("read effect checkpoints") as cur:
            rows = cur.execute(
                "SELECT conversation, tool_call_id, tool_name, arguments, phase, result, owner,"
                f" revision FROM effect_checkpoints WHERE conversation = %s {extra}"
                " ORDER BY created_at, tool_call_id", params,
            ).fetchall()
        return [
            self.shape.make(r[0], ToolCall.parse(r[1], r[2], bytes(r[3]).decode()), r[4],
                            orjson.loads(r[5]) if r[5] is not None else None, r[6], int(r[7]))
            for r in rows
        ]


# One statement, so one round trip and its own transaction: the conversation's lease row (if
# any) share-locked, the write made only while no other worker holds it, and what was found.
_FENCED = (
    "WITH lease AS (SELECT holder, token FROM conversation_leases WHERE conversation = %(c)s"
    " FOR SHARE), written AS ({write})"
    " SELECT (SELECT holder FROM lease), (SELECT token FROM lease), (SELECT count(*) FROM written)"
)


def _written(row: Any, conversation: str, owner: str) -> int:
    """The rows `_FENCED` wrote (`row`: holder, token, count written); `LeaseLost` when the
    conversation's lease is another worker's (while it has one, only its holder writes)."""
    assert row is not None  # an aggregate: always one row
    if row[0] is not None and row[0] != owner:
        refused = LeaseLost(conversation, None, int(row[1]), str(row[0]), worker=owner)
        logs.event("write_refused", str(refused), logging.WARNING, conversation=conversation,
                   worker=owner, token=None, current_token=refused.current, what="checkpoint")
        raise refused
    return int(row[2])
