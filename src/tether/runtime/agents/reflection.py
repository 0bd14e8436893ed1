"""Reflection (reference §15): a `reflection` subagent reviews the recent conversation in a git
worktree of the agent's memory, and what it commits there is merged into the memory's `main`.

A pass:
    <memory parent>/memory-worktrees/reflection-<pass id>   worktree on tether/reflection/<pass id>
    child `tether -p` (the reflection type, cwd = the worktree, --permission-mode unrestricted)
    finalize: failed | dirty_uncommitted | no_changes | parent_dirty | merged | merge_conflict
The pass itself lives in `reflection_pass.py`, imported only when one is due.
The child commits its own work (`git add -A && git commit`); anything it leaves uncommitted is
reported as `dirty_uncommitted` and discarded, never committed on its behalf. The worktree and
its branch are removed after every pass, whatever the result.

Triggers (per agent, `agents/<id>/reflection.json` kept by the store: the file under
TETHER_HOME, or its row on the PostgreSQL store; written atomically):
`off`; `step-count` (a pass once N turns completed since the last successful one); and
`compaction-event` (the default: a pass after a turn during which the conversation compacted,
seen as a new `compaction` entry in its transcript). Results other than merged/no_changes
leave the pass pending and back off (`retry_after`), so a later turn tries again.
`--reflection-trigger` / `--reflection-step-count` given to a run are saved as the agent's
choice. Passes are always launched by the runtime (`--reflection-behavior` is accepted, not
used: there is no reminder mode), and one pass runs at a time per agent.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import orjson

from tether.backends.local.locks import exclusive_flock
from tether.errors import StoreError, TetherError

if TYPE_CHECKING:
    from tether.backends.store_api import ConversationStore
    from tether.runtime.agents.reflection_pass import PassResult
    from tether.runtime.session.prepared import Prepared

T = TypeVar("T")
TRIGGERS = ("off", "step-count", "compaction-event")
DEFAULT_TRIGGER = "compaction-event"
DEFAULT_STEP_COUNT = 25
SUCCESSFUL = frozenset({"merged", "no_changes"})
EXCERPT_CHARS = 24_000
CHILD_TIMEOUT_S = 600.0
RETRY_BASE_S = 60
RETRY_MAX_S = 3600


class ReflectionBusy(TetherError):
    """Another reflection pass for this agent is running (one at a time per agent)."""


# --- state -------------------------------------------------------------------------------------


@dataclass(slots=True)
class ReflectionState:
    trigger: str = DEFAULT_TRIGGER
    step_count: int = DEFAULT_STEP_COUNT
    steps_since_success: int = 0  # completed turns since the last merged/no_changes pass
    last_result: str | None = None
    last_attempt_at: str | None = None
    retry_after: str | None = None  # ISO time; no automatic pass before it
    failures: int = 0  # consecutive unsuccessful passes (the backoff exponent)
    pending: bool = False  # a trigger fired and no pass has succeeded since
    compactions_seen: dict[str, str] = field(default_factory=dict)  # conversation -> entry id

    def to_dict(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        if self.retry_after is None:
            del out["retry_after"]
        return out

    @classmethod
    def from_dict(cls, data: Any, where: str) -> ReflectionState:
        def bad(key: str, expected: str) -> StoreError:
            return StoreError(
                f"{where}: '{key}' must be {expected}; fix it or delete the file to reset reflection"
            )

        if not isinstance(data, dict):
            raise StoreError(f"{where} must hold a JSON object; delete it to reset reflection")
        state = cls()
        if data.get("trigger", DEFAULT_TRIGGER) not in TRIGGERS:
            raise bad("trigger", " | ".join(TRIGGERS))
        state.trigger = data.get("trigger", DEFAULT_TRIGGER)
        for key in ("step_count", "steps_since_success", "failures"):
            value = data.get(key, getattr(state, key))
            if (
                not isinstance(value, int)
                or isinstance(value, bool)
                or value < (key == "step_count")
            ):
                raise bad(
                    key, "a positive integer" if key == "step_count" else "a non-negative integer"
                )
            setattr(state, key, value)
        for key in ("last_result", "last_attempt_at", "retry_after"):
            value = data.get(key)
            if value is not None and not isinstance(value, str):
                raise bad(key, "a string or null")
            setattr(state, key, value)
        if retry := state.retry_after:
            try:
                datetime.fromisoformat(retry)
            except ValueError:
                raise bad("retry_after", "an ISO 8601 time") from None
        state.pending = bool(data.get("pending", False))
        seen = data.get("compactions_seen", {})
        if not isinstance(seen, dict) or not all(isinstance(v, str) for v in seen.values()):
            raise bad("compactions_seen", "an object of conversation id -> entry id")
        state.compactions_seen = dict(seen)
        return state


def agent_dir(home: Path, agent_id: str) -> Path:
    from tether.memory.memfs import memory_dir

    return memory_dir(home, agent_id).parent


def state_rel(agent_id: str) -> str:
    """The state's place in a home: `agents/<id>/reflection.json`, beside the agent's memory."""
    return agent_dir(Path(), agent_id).joinpath("reflection.json").as_posix()


def state_path(home: Path, agent_id: str) -> Path:
    return Path(home) / state_rel(agent_id)


def load_state(store: ConversationStore, agent_id: str) -> ReflectionState:
    """The agent's reflection state as the store keeps it (defaults when it has none)."""
    return _parse_state(store, agent_id, store.read_document(state_rel(agent_id)))


def update_state(
    store: ConversationStore, agent_id: str, change: Callable[[ReflectionState], T]
) -> T:
    """Read, let `change` alter the state, write it back, as one atomic step of the store (one
    read-modify-write at a time per agent, across processes and workers); what `change` said."""
    said: list[T] = []

    def rewrite(raw: bytes | None) -> bytes:
        state = _parse_state(store, agent_id, raw)
        said.append(change(state))
        return orjson.dumps(state.to_dict(), option=orjson.OPT_INDENT_2) + b"\n"

    store.update_document(state_rel(agent_id), rewrite)
    return said[-1]


def _parse_state(store: ConversationStore, agent_id: str, raw: bytes | None) -> ReflectionState:
    if raw is None:
        return ReflectionState()
    where = f"{state_path(store.home, agent_id)}"
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise StoreError(f"{where} is not JSON ({exc}); delete it to reset reflection") from None
    return ReflectionState.from_dict(data, where)


def iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, UTC).isoformat(timespec="seconds")


def pass_due(state: ReflectionState, now: float) -> bool:
    """Whether the trigger asks for a pass now (a pending retry waits for `retry_after`)."""
    if state.trigger == "off":
        return False
    if (
        state.retry_after is not None
        and now < datetime.fromisoformat(state.retry_after).timestamp()
    ):
        return False
    if state.trigger == "step-count":
        return state.steps_since_success >= state.step_count
    return state.pending


def record_result(state: ReflectionState, result: str, now: float) -> None:
    state.last_result = result
    state.last_attempt_at = iso(now)
    if result in SUCCESSFUL:
        state.steps_since_success = 0
        state.failures = 0
        state.pending = False
        state.retry_after = None
    else:
        state.failures += 1
        state.pending = True
        state.retry_after = iso(now + min(RETRY_BASE_S * 2 ** (state.failures - 1), RETRY_MAX_S))


# --- what the trigger reads of a transcript ---------------------------------------------
def last_compaction_id(entries: Sequence[Mapping[str, Any]]) -> str | None:
    for entry in reversed(entries):
        if entry.get("type") == "compaction" and isinstance(entry.get("id"), str):
            return str(entry["id"])
    return None


# --- the post-turn trigger ----------------------------------------------------------------------


class ReflectionTrigger:
    """Checked after each successful turn of a run: counts the turn, notices compactions, runs
    a pass when the agent's trigger says so."""

    def __init__(self, prepared: Prepared, warn: Callable[[str], None]) -> None:
        self.prepared = prepared
        self.warn = warn
        flags = prepared.flags
        self.trigger_flag: str | None = getattr(flags, "reflection_trigger", None)
        self.step_flag: int | None = getattr(flags, "reflection_step_count", None)
        # Turns counted but not yet written (see _count_turn); added at the next write.
        self.unsaved_steps = 0

    async def after_turn(self, abort: asyncio.Event | None = None) -> PassResult | None:
        p = self.prepared
        if p.env.get("TETHER_AGENT_ROLE") == "subagent":
            return None  # children (reflection's own included) never reflect
        home, agent = p.store.home, p.session.agent
        conv = p.session.conversation_id
        try:
            # The last compaction from the cached transcript (only what was appended since it
            # was last read), on the loop; the state's flock, read and fsynced write in a worker
            # thread: on the loop they stalled every conversation of an App Server.
            latest = p.store.transcript(agent.id, conv).last_compaction_id()
            due = await asyncio.to_thread(self._count_turn, conv, latest)
            if not due:
                return None
            from tether.runtime.agents.reflection_pass import run_pass

            messages = p.store.transcript(agent.id, p.session.conversation_id).load()
            result = await run_pass(
                home,
                agent.id,
                agent_name=agent.name,
                messages=messages,
                model=p.session.model,
                abort=abort,
            )
        except ReflectionBusy:
            return None
        except (TetherError, OSError) as exc:
            self.warn(f"reflection skipped: {exc}")
            return None
        await asyncio.to_thread(
            update_state, p.store, agent.id,
            lambda state: record_result(state, result.result, time.time()),
        )
        if not result.ok:
            self.warn(f"reflection {result.result}: {result.message} (will retry later)")
        return result

    def _count_turn(self, conv: str, latest: str | None) -> bool:
        """Count the finished turn and note a new compaction; whether a pass is due now.

        The turn counter is read only by the `step-count` trigger. Under any other trigger a
        turn that changes nothing else is counted in memory and written with the next change:
        rewriting the state (two fsyncs under the agent's lock) after every turn capped an
        agent's turns per second across all its conversations in the App Server. A crash loses
        at most those uncounted turns of a counter that trigger never reads."""
        p = self.prepared
        store, agent_id = p.store, p.session.agent.id
        if self._unchanged(load_state(store, agent_id), conv, latest):  # replaced atomically
            self.unsaved_steps += 1
            return False

        def count(state: ReflectionState) -> bool:
            if self.trigger_flag is not None:
                state.trigger = self.trigger_flag
            if self.step_flag is not None:
                state.step_count = self.step_flag
            state.steps_since_success += 1 + self.unsaved_steps
            if (state.trigger == "compaction-event" and latest is not None
                    and state.compactions_seen.get(conv) != latest):
                state.compactions_seen[conv] = latest
                state.pending = True
            return pass_due(state, time.time())

        due = update_state(store, agent_id, count)
        self.unsaved_steps = 0
        return due

    def _unchanged(self, state: ReflectionState, conv: str, latest: str | None) -> bool:
        """Whether this turn changes nothing but the turn counter, under a trigger that never
        reads it, with no pass due."""
        if self.trigger_flag not in (None, state.trigger) or self.step_flag not in (None, state.step_count):
            return False
        if state.trigger == "step-count":
            return False
        if state.trigger == "compaction-event" and latest is not None and state.compactions_seen.get(conv) != latest:
            return False
        return not pass_due(state, time.time())


def attach_reflection(prepared: Prepared) -> None:
    """The post-turn trigger, for frontends that call `services.reflection.after_turn()`."""
    import sys

    prepared.services.reflection = ReflectionTrigger(
        prepared, lambda m: print(f"tether: {m}", file=sys.stderr)
    )


def _flock(path: Path, *, wait: float, busy: str = "") -> contextlib.AbstractContextManager[None]:
    message = busy or f"{path} stayed locked; is a tether stuck?"
    return exclusive_flock(path, wait=wait, busy=lambda: ReflectionBusy(message))
