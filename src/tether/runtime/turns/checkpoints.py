"""Effect checkpoints (reference §12.6, DESIGN §3): a durable `before` record for every effectful
tool call, the exact result once it settles (`after`), and the recovery that turns a `before`
left by a crash into an explicit unknown outcome instead of a silent re-run.

One SQLite database in WAL mode with `synchronous=FULL` ($TETHER_HOME/checkpoints.db): a row per
(conversation, tool_call_id). Every change is a compare-and-swap on `revision` and `owner`, so a
runtime that lost ownership (fenced out by a recovering successor) cannot overwrite what the
successor recorded. Ownership is only ever taken while holding the conversation's turn lock,
which the kernel frees when its holder dies: whoever holds it knows no other writer is live.
"""

from __future__ import annotations

import asyncio
import contextlib
import errno
import os
import socket
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from tether.backends.local.disk_full import disk_full
from tether.core.approvals import JudgedCall
from tether.core.execution import PreToolVerdict, ToolHooks
from tether.core.tools import Effect, ToolResult
from tether.errors import StoreError, StoreUnwritable
from tether.protocol.messages import AssistantMessage, ToolResultMessage
from tether.protocol.tool_calls import ToolCall, ToolReturn

if TYPE_CHECKING:
    import sqlite3

UNKNOWN_OUTCOME = (
    "Tool execution may have completed, but the runtime stopped before recording its result"
)
NOT_STARTED = "Turn did not complete"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS effect_checkpoints (
    conversation TEXT NOT NULL,
    tool_call_id TEXT NOT NULL,
    tool_name TEXT NOT NULL,
    arguments BLOB NOT NULL,
    phase TEXT NOT NULL CHECK (phase IN ('before', 'after', 'unknown')),
    result BLOB,
    owner TEXT NOT NULL,
    revision INTEGER NOT NULL,
    created_at REAL NOT NULL,
    updated_at REAL NOT NULL,
    PRIMARY KEY (conversation, tool_call_id)
)
"""


_NOT_RUN = "effectful tool calls cannot be recorded, so they are not run"


class EffectStoreUnavailable(StoreUnwritable):
    """The checkpoint database cannot be opened or written (read-only home, I/O error; a full
    disk is `DiskFull`, saying the same): effectful calls cannot be recorded, so they are not
    run, and the run fails."""

    def __init__(self, path: Path, exc: BaseException) -> None:
        why = getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
        super().__init__(
            f"the effect store is unavailable: checkpoint database {path} cannot be written "
            f"({why}); {_NOT_RUN}",
            getattr(exc, "errno", None) or errno.EIO,
            str(path),
        )
        self.path = path


@contextlib.contextmanager
def _store_errors(path: Path) -> Iterator[None]:
    """sqlite and OS failures of the database become EffectStoreUnavailable naming it, or
    DiskFull naming it and the disk when there is no room left."""
    import sqlite3

    try:
        yield
    except sqlite3.IntegrityError:
        raise  # a constraint (an existing row), not an unavailable store
    except (sqlite3.Error, OSError) as exc:
        consequence = f"the effect store is unavailable: {_NOT_RUN}"
        full = disk_full(path, exc, "write checkpoint database", consequence)
        raise (full or EffectStoreUnavailable(path, exc)) from exc


class CheckpointConflict(StoreError):
    """The row changed under us (revision or owner moved): this runtime was fenced out."""


class AlreadyCheckpointed(StoreError):
    """A checkpoint for this tool call exists already: running it again could repeat an effect."""


@dataclass(frozen=True, slots=True)
class Checkpoint:
    """One row: the call as it runs (the model's ToolCall, or one carrying the arguments a hook
    or an approver set), its phase, its result once settled, and who may change it."""

    conversation: str
    call: ToolCall
    phase: str
    result: dict[str, Any] | None
    owner: str
    revision: int

    @property
    def tool_call_id(self) -> str:
        return self.call.id

    @property
    def tool_name(self) -> str:
        return self.call.name

    @property
    def arguments(self) -> Mapping[str, Any]:
        return self.call.arguments


def _as_run(item: JudgedCall, verdict: PreToolVerdict) -> ToolCall:
    """The call as it will run: the model's own ToolCall unless a hook or approver changed its
    arguments, then one carrying those."""
    args = {**item.args, **(verdict.updated_args or {})}
    if args == item.call.arguments:
        return item.call
    return ToolCall(item.call.id, item.call.name, args)


def conversation_scope(agent_id: str, conversation_id: str) -> str:
    return f"{agent_id}/{conversation_id}"


def new_owner() -> str:
    return f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


class CheckpointStore:
    """The checkpoint table; thread-safe (calls run off the event loop via asyncio.to_thread)."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self._lock = threading.Lock()
        self._conn: sqlite3.Connection | None = None  # opened on first use: a text-only turn
        self._closed = False  # never touches the database

    @property
    def _db(self) -> sqlite3.Connection:
        if self._conn is None:
            if self._closed:
                raise StoreError(f"checkpoint store {self.path} is closed")
            import sqlite3  # here, not at import: most runs never open the database

            self.path.parent.mkdir(parents=True, exist_ok=True)
            conn = sqlite3.connect(
                self.path, check_same_thread=False, isolation_level=None, timeout=10
            )
            try:
                conn.execute("PRAGMA journal_mode=WAL")
                conn.execute("PRAGMA synchronous=FULL")  # a commit is on disk before the tool runs
                conn.execute(_SCHEMA)
            except BaseException:
                conn.close()  # a full disk: the next call opens it afresh
                raise
            self._conn = conn
        return self._conn

    def close(self) -> None:
        with self._lock:
            self._closed = True
            if self._conn is not None:
                self._conn.close()
                self._conn = None

    # --- writes (each one CAS-guarded) --------------------------------------------------------

    def record_before(self, conversation: str, call: ToolCall, owner: str) -> Checkpoint:
        """The durable `before` of `call`; its argument text is stored as it came."""
        import sqlite3

        now = time.time()
        try:
            with self._lock, _store_errors(self.path):
                self._db.execute(
                    "INSERT INTO effect_checkpoints (conversation, tool_call_id, tool_name, arguments,"
                    " phase, result, owner, revision, created_at, updated_at)"
                    " VALUES (?, ?, ?, ?, 'before', NULL, ?, 1, ?, ?)",
                    (conversation, call.id, call.name, call.text.encode(), owner, now, now),
                )
        except sqlite3.IntegrityError:
            raise AlreadyCheckpointed(
                f"tool call {call.id} in {conversation} already has an effect checkpoint"
            ) from None
        return Checkpoint(conversation, call, "before", None, owner, 1)

    def record_after(self, cp: Checkpoint, result: ToolReturn) -> Checkpoint:
        payload = {
            "output": result.output,
            "is_error": result.is_error,
            "stdout": list(result.stdout) if result.stdout is not None else None,
            "stderr": list(result.stderr) if result.stderr is not None else None,
        }
        return self._swap(cp, "after", payload, cp.owner)

    def mark_unknown(self, cp: Checkpoint, owner: str) -> Checkpoint:
        """Take the row over (fencing its old owner out) and settle it as unknown."""
        return self._swap(cp, "unknown", {"output": UNKNOWN_OUTCOME, "is_error": True}, owner)

    def _swap(self, cp: Checkpoint, phase: str, result: dict[str, Any], owner: str) -> Checkpoint:
        with self._lock, _store_errors(self.path):
            cur = self._db.execute(
                "UPDATE effect_checkpoints SET phase = ?, result = ?, owner = ?,"
                " revision = revision + 1, updated_at = ?"
                " WHERE conversation = ? AND tool_call_id = ? AND revision = ? AND owner = ?",
                (
                    phase,
                    orjson.dumps(result),
                    owner,
                    time.time(),
                    cp.conversation,
                    cp.tool_call_id,
                    cp.revision,
                    cp.owner,
                ),
            )
        if cur.rowcount != 1:
            raise CheckpointConflict(
                f"effect checkpoint {cp.tool_call_id} changed under runtime {cp.owner} "
                f"(expected revision {cp.revision}); another runtime owns this conversation now"
            )
        return Checkpoint(
            cp.conversation,
            cp.call,
            phase,
            result,
            owner,
            cp.revision + 1,
        )

    # --- reads ---------------------------------------------------------------------------------

    def get(self, conversation: str, tool_call_id: str) -> Checkpoint | None:
        rows = self._select(
            "WHERE conversation = ? AND tool_call_id = ?", (conversation, tool_call_id)
        )
        return rows[0] if rows else None

    def for_conversation(self, conversation: str) -> dict[str, Checkpoint]:
        return {
            cp.tool_call_id: cp for cp in self._select("WHERE conversation = ?", (conversation,))
        }

    def _select(self, where: str, params: tuple[Any, ...]) -> list[Checkpoint]:
        with self._lock, _store_errors(self.path):
            rows = self._db.execute(
                "SELECT conversation, tool_call_id, tool_name, arguments, phase, result, owner,"
                f" revision FROM effect_checkpoints {where} ORDER BY created_at",
                params,
            ).fetchall()
        return [
            Checkpoint(
                r[0],
                ToolCall.parse(r[1], r[2], bytes(r[3]).decode()),
                r[4],
                orjson.loads(r[5]) if r[5] is not None else None,
                r[6],
                r[7],
            )
            for r in rows
        ]


# --- the turn engine's side: ToolHooks ---------------------------------------------------------


class CheckpointHooks:
    """ToolHooks that checkpoint effectful calls around the (optional) settings hooks.

    `before` runs the inner hooks first (a blocked call has no effect to checkpoint), then
    writes the durable `before`; if that write fails, the call is answered with what happened
    (the effect store is unavailable) without running, and `on_unavailable` is told.
    `after` records the exact result before the inner hooks add their feedback."""

    def __init__(
        self,
        store: CheckpointStore,
        conversation: str,
        owner: str,
        inner: ToolHooks | None = None,
        on_start: Callable[[str], None] | None = None,
        on_end: Callable[[str], None] | None = None,
    ) -> None:
        self.store = store
        self.conversation = conversation
        self.owner = owner
        self.inner = inner
        self.on_start = on_start
        self.on_end = on_end
        self._open: dict[str, Checkpoint] = {}
        # Set on the first failure of the store; a frontend's `on_unavailable` ends the turn and
        # fails the run, and every later effectful call in this turn is refused without running.
        self.unavailable: str | None = None
        self.on_unavailable: Callable[[str], None] | None = None

    async def before(self, call: JudgedCall) -> PreToolVerdict:
        verdict = await self.inner.before(call) if self.inner is not None else PreToolVerdict()
        if verdict.blocked is not None or verdict.result is not None or call.tool is None:
            return verdict  # nothing will run, so there is no effect to checkpoint
        if call.tool.effect is not Effect.READ:
            if self.unavailable is not None:  # refused once: nothing effectful runs after
                return PreToolVerdict(result=ToolResult(f"Error: {self.unavailable}.", True))
            try:
                cp = await asyncio.to_thread(
                    self.store.record_before, self.conversation, _as_run(call, verdict), self.owner
                )
            except AlreadyCheckpointed:
                return PreToolVerdict(blocked=f"{UNKNOWN_OUTCOME}; it is not run again.")
            except (EffectStoreUnavailable, OSError) as exc:
                why = self._fail(exc)
                return PreToolVerdict(result=ToolResult(f"Error: {why}.", True))
            except StoreError as exc:
                return PreToolVerdict(
                    blocked=f"could not record the effect checkpoint ({exc}); not run."
                )
            self._open[call.tool_call_id] = cp
        if self.on_start is not None:
            self.on_start(call.tool_call_id)
        return verdict

    async def after(
        self, call: JudgedCall, result: ToolReturn
    ) -> str | ToolReturn | None:
        cp = self._open.pop(call.tool_call_id, None)
        if cp is not None:
            try:
                await asyncio.to_thread(self.store.record_after, cp, result)
            except (EffectStoreUnavailable, OSError) as exc:
                self._fail(exc)  # the model keeps the result; the run fails
        if self.on_end is not None:
            self.on_end(call.tool_call_id)
        if self.inner is None:
            return None
        return await self.inner.after(call, result)

    def _fail(self, exc: BaseException) -> str:
        """Remember the first store failure and tell the frontend (which ends the run failed)."""
        if self.unavailable is None:
            self.unavailable = (
                str(exc) if isinstance(exc, StoreUnwritable)  # DiskFull too
                else str(EffectStoreUnavailable(self.store.path, exc))
            )
            if self.on_unavailable is not None:
                self.on_unavailable(self.unavailable)
        return self.unavailable

    async def settle_leftovers(self, results: Mapping[str, ToolReturn]) -> None:
        """Close checkpoints whose call was answered without running after all (the engine's
        re-check denied rewritten arguments): the answer the model got is the exact result."""
        for call_id in list(self._open):
            result = results.get(call_id)
            if result is not None:
                cp = self._open.pop(call_id)
                await asyncio.to_thread(self.store.record_after, cp, result)
                if self.on_end is not None:
                    self.on_end(call_id)


# --- recovery ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class RecoveredEffect:
    """A crashed turn's call answered from its checkpoint: the answer and how it is known."""

    answer: ToolReturn
    outcome: str  # "unknown" | "exact"

    @property
    def tool_call_id(self) -> str:
        return self.answer.tool_call_id

    @property
    def tool_name(self) -> str:
        return self.answer.tool_name

    @property
    def output(self) -> str:
        return self.answer.output

    @property
    def is_error(self) -> bool:
        return self.answer.is_error


def recover_open_calls(
    store: CheckpointStore, conversation: str, owner: str, messages: list[Any]
) -> tuple[list[RecoveredEffect], list[ToolResultMessage]]:
    """Answer the tool calls a crashed turn left open, from their checkpoints.

    Call only while holding the conversation's turn lock. Looks at the calls of the latest
    finished assistant message that have no result; if any of them has a checkpoint, every open
    call there is answered in call order: `after` → its exact result, `before` → UNKNOWN (the row
    is taken over and settled as unknown), no row → not started. Returns what was recovered and
    the tool results to append to the transcript; nothing is ever re-run."""
    open_calls = _open_tool_calls(messages)
    if not open_calls:
        return [], []
    checkpoints = store.for_conversation(conversation)
    if not any(call.id in checkpoints for call in open_calls):
        return [], []  # nothing effectful started: the backend's own settlement answers them
    recovered: list[RecoveredEffect] = []
    results: list[ToolResultMessage] = []
    now = int(time.time() * 1000)
    for call in open_calls:
        cp = checkpoints.get(call.id)
        outcome: str | None = None
        if cp is None:
            output, is_error = NOT_STARTED, True
        elif cp.phase == "after" and cp.result is not None:
            output, is_error = str(cp.result.get("output", "")), bool(cp.result.get("is_error"))
            outcome = "exact"
        else:
            if cp.phase == "before":
                store.mark_unknown(cp, owner)
            output, is_error, outcome = UNKNOWN_OUTCOME, True, "unknown"
        answer = ToolReturn(call.id, call.name, output, is_error)
        if outcome is not None:
            recovered.append(RecoveredEffect(answer, outcome))
        results.append(answer.to_message(now))
    return recovered, results


def open_tool_calls(messages: list[Any]) -> list[Any]:
    """Calls of the latest finished assistant message that no tool result answers yet."""
    return _open_tool_calls(messages)


def _open_tool_calls(messages: list[Any]) -> list[Any]:
    answered: set[str] = set()
    for message in reversed(messages):
        if isinstance(message, ToolResultMessage):
            answered.add(message.tool_call_id)
        elif isinstance(message, AssistantMessage):
            if message.stop_reason is None:
                continue  # never finished: the backend drops it
            return [c for c in message.tool_calls if c.id not in answered]
        else:
            return []
    return []
