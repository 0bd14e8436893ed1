"""Reflection (reference §15): a `reflection` subagent reviews the recent conversation in a git
worktree of the agent's memory, and what it commits there is merged into the memory's `main`.

A pass:
    <memory parent>/memory-worktrees/reflection-<pass id>   worktree on tether/reflection/<pass id>
    child `tether -p` (the reflection type, cwd = the worktree, --permission-mode unrestricted)
    finalize: failed | dirty_uncommitted | no_changes | parent_dirty | merged | merge_conflict
The child commits its own work (`git add -A && git commit`); anything it leaves uncommitted is
reported as `dirty_uncommitted` and discarded, never committed on its behalf. The worktree and
its branch are removed after every pass, whatever the result.

Triggers (per agent, `$TETHER_HOME/agents/<id>/reflection.json`, written atomically):
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
import os
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson

from tether.backends.local.locks import exclusive_flock
from tether.errors import StoreError, TetherError

TRIGGERS = ("off", "step-count", "compaction-event")
DEFAULT_TRIGGER = "compaction-event"
DEFAULT_STEP_COUNT = 25
RESULTS = ("no_changes", "dirty_uncommitted", "failed", "parent_dirty", "merged", "merge_conflict")
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


def state_path(home: Path, agent_id: str) -> Path:
    return agent_dir(home, agent_id) / "reflection.json"


def load_state(home: Path, agent_id: str) -> ReflectionState:
    path = state_path(home, agent_id)
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        return ReflectionState()
    try:
        data = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise StoreError(f"{path} is not JSON ({exc}); delete it to reset reflection") from None
    return ReflectionState.from_dict(data, str(path))


def save_state(home: Path, agent_id: str, state: ReflectionState) -> None:
    from tether.backends.local.locks import write_atomic

    path = state_path(home, agent_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(path, orjson.dumps(state.to_dict(), option=orjson.OPT_INDENT_2) + b"\n")


@contextlib.contextmanager
def updating_state(home: Path, agent_id: str) -> Iterator[ReflectionState]:
    """Read, let the body change, write back: one read-modify-write at a time per agent."""
    with _flock(agent_dir(home, agent_id) / "reflection.state.lock", wait=10.0):
        state = load_state(home, agent_id)
        yield state
        save_state(home, agent_id, state)


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


# --- the transcript excerpt ---------------------------------------------------------------------


def transcript_excerpt(messages: Sequence[Any], limit: int = EXCERPT_CHARS) -> str:
    """The conversation's active view as plain text, newest kept when it is too long."""
    from tether.protocol.messages import AssistantMessage, TextPart, ToolCallPart, ToolResultMessage

    def text_of(parts: Sequence[Any], cap: int) -> str:
        text = "\n".join(p.text for p in parts if isinstance(p, TextPart)).strip()
        return text if len(text) <= cap else text[:cap] + " […]"

    blocks: list[str] = []
    for message in messages:
        if isinstance(message, AssistantMessage):
            lines = [f"assistant: {t}"] if (t := text_of(message.content, 4000)) else []
            for part in message.content:
                if isinstance(part, ToolCallPart):
                    args = orjson.dumps(part.arguments).decode()
                    lines.append(f"assistant called {part.name}({args[:600]})")
            if lines:
                blocks.append("\n".join(lines))
        elif isinstance(message, ToolResultMessage):
            status = " (error)" if message.is_error else ""
            blocks.append(f"tool {message.tool_name}{status}: {text_of(message.content, 1500)}")
        else:
            blocks.append(f"user: {text_of(getattr(message, 'content', ()), 6000)}")
    kept: list[str] = []
    used = 0
    for block in reversed(blocks):
        if used + len(block) > limit:
            kept.append("[earlier messages omitted]")
            break
        kept.append(block)
        used += len(block) + 2
    return "\n\n".join(reversed(kept))


def excerpt_budget(env: Mapping[str, str]) -> int:
    """Characters of conversation the child's prompt may carry: at most a quarter of the
    child's context window (at ~4 characters a token) when TETHER_CONTEXT_WINDOW sets one, so
    the child does not start by compacting its own task."""
    try:
        window = int(env.get("TETHER_CONTEXT_WINDOW") or 0)
    except ValueError:
        window = 0
    return min(EXCERPT_CHARS, window) if window > 0 else EXCERPT_CHARS


def last_compaction_id(entries: Sequence[Mapping[str, Any]]) -> str | None:
    for entry in reversed(entries):
        if entry.get("type") == "compaction" and isinstance(entry.get("id"), str):
            return str(entry["id"])
    return None


def reflection_prompt(branch: str, paths: Sequence[str], excerpt: str) -> str:
    listing = "\n".join(f"- {p}" for p in paths) or "(no memory files yet)"
    return (
        "Review the recent conversation below and update the memory files in your current "
        "working directory.\n\n"
        f"The working directory is a git worktree of the agent's memory repository (branch "
        f"{branch}). Memory files are Markdown with a frontmatter `description`; files under "
        "system/ are shown to the agent in its system prompt on every turn. Record durable "
        "lessons, preferences and facts concisely; edit existing files rather than repeating "
        "them. When you are done, commit your changes in this directory "
        '(`git add -A && git commit -m "<what you recorded>"`): uncommitted changes are '
        "discarded. If nothing is worth recording, change nothing.\n\n"
        f"Current memory files:\n{listing}\n\n"
        f"<conversation>\n{excerpt}\n</conversation>\n"
    )


# --- one pass -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ChildOutcome:
    ok: bool
    detail: str  # the child's final report, or why it failed
    agent_id: str | None = None


@dataclass(frozen=True, slots=True)
class ChildJob:
    worktree: Path
    branch: str
    prompt: str
    agent_id: str
    agent_name: str
    model: str
    log_path: Path


Child = Callable[[ChildJob, "asyncio.Event | None"], Awaitable[ChildOutcome]]


@dataclass(frozen=True, slots=True)
class PassResult:
    result: str
    agent_id: str
    pass_id: str
    branch: str
    message: str
    commit: str | None = None  # main's HEAD after the pass
    child_agent_id: str | None = None

    @property
    def ok(self) -> bool:
        return self.result in SUCCESSFUL

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


async def run_pass(
    home: Path,
    agent_id: str,
    *,
    agent_name: str,
    messages: Sequence[Any],
    model: str,
    abort: asyncio.Event | None = None,
    child: Child | None = None,
) -> PassResult:
    """One reflection pass over `messages` (the conversation's active view); raises
    ReflectionBusy when a pass for this agent is already running."""
    from tether.memory.memfs import MemFS

    memfs = MemFS.open(home, agent_id, agent_name=agent_name)
    pass_id = f"{datetime.now(UTC):%Y%m%d-%H%M%S}-{os.urandom(3).hex()}"
    branch = f"tether/reflection/{pass_id}"
    worktree = memfs.root.parent / "memory-worktrees" / f"reflection-{pass_id}"
    with _flock(
        memfs.root.parent / "reflection.lock",
        wait=0.0,
        busy=f"a reflection pass for agent {agent_id} is already running",
    ):
        with memfs.writing():
            memfs.add_worktree(worktree, branch)
        try:
            job = ChildJob(
                worktree,
                branch,
                reflection_prompt(
                    branch,
                    memfs.head_paths(),
                    transcript_excerpt(messages, excerpt_budget(os.environ)),
                ),
                agent_id,
                agent_name,
                model,
                memfs.root.parent / "reflection.log",
            )
            outcome = await (child or spawn_reflection_child)(job, abort)
            result, message = await asyncio.to_thread(_finalize, memfs, worktree, branch, outcome)
        finally:
            with memfs.writing():
                memfs.remove_worktree(worktree, branch)
    return PassResult(
        result, agent_id, pass_id, branch, message, memfs.revision(), outcome.agent_id
    )


def _finalize(memfs: Any, worktree: Path, branch: str, outcome: ChildOutcome) -> tuple[str, str]:
    from tether.memory.memfs import MemFS

    if not outcome.ok:
        return "failed", f"the reflection subagent failed: {outcome.detail}"
    left = MemFS(worktree, agent_id=memfs.agent_id).status_lines()
    if left:
        names = ", ".join(line[3:] for line in left[:5]) + (" …" if len(left) > 5 else "")
        return "dirty_uncommitted", f"the subagent left uncommitted changes (discarded): {names}"
    tip = memfs.branch_revision(branch)
    if tip is None or memfs.is_ancestor(tip, "HEAD"):
        return "no_changes", "the subagent committed nothing new"
    with memfs.writing():
        if memfs.status_lines():
            return "parent_dirty", (
                f"{memfs.root} has uncommitted changes; commit or discard them, then run "
                "`tether dream` again"
            )
        how = memfs.merge_branch(branch, f"reflection: merge {branch}")
    if how == "conflict":
        return "merge_conflict", (
            f"{branch} conflicts with main; the merge was aborted and main is unchanged"
        )
    return "merged", f"merged {branch} into main ({how})"


async def spawn_reflection_child(job: ChildJob, abort: asyncio.Event | None) -> ChildOutcome:
    """The reflection type as a child `tether -p` in the worktree (runtime/subagents' argv)."""
    from tether.runtime.session import tether_home
    from tether.runtime.subagents import ParentScope, child_argv, die_with_parent, discover_types
    from tether.tools.process_group import kill_group

    home = tether_home(os.environ)
    kind = discover_types(home, job.worktree, project_trusted=False).get("reflection")
    if kind is None:
        return ChildOutcome(False, "no 'reflection' subagent type is defined")
    if kind.tools is not None and "Write" not in kind.tools:
        # New memory files need Write; the reference's child makes them with its shell.
        kind = dataclasses.replace(kind, tools=(*kind.tools, "Write"))
    scope = ParentScope(
        agent_id=job.agent_id, conversation_id="", model=job.model, cwd=job.worktree
    )
    argv = [*child_argv(kind, scope, job.model), "--no-skills", "--reflection-trigger", "off"]
    email = f"{job.agent_id}@tether.local"
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(
        TETHER_AGENT_ROLE="subagent",
        TETHER_PARENT_AGENT_ID=job.agent_id,
        USER_CWD=str(job.worktree),
        TETHER_MOD_CAPABILITY_PROFILE="providers-only",
        # The child's own git commits get the memory repo's hardening and identity.
        GIT_CONFIG_GLOBAL=os.devnull,
        GIT_CONFIG_NOSYSTEM="1",
        GIT_TERMINAL_PROMPT="0",
        GIT_AUTHOR_NAME=job.agent_name or job.agent_id,
        GIT_AUTHOR_EMAIL=email,
        GIT_COMMITTER_NAME=job.agent_name or job.agent_id,
        GIT_COMMITTER_EMAIL=email,
    )
    proc = await asyncio.create_subprocess_exec(
        *argv,
        cwd=job.worktree,
        env=env,
        start_new_session=True,
        preexec_fn=die_with_parent(),
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    talk = asyncio.ensure_future(proc.communicate(job.prompt.encode()))
    stop = asyncio.ensure_future(abort.wait()) if abort is not None else None
    timeout = float(os.environ.get("TETHER_REFLECTION_TIMEOUT") or CHILD_TIMEOUT_S)
    await asyncio.wait(
        {talk, *([stop] if stop else [])}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED
    )
    if stop is not None:
        stop.cancel()
    stopped = None
    if not talk.done():
        stopped = (
            "interrupted"
            if abort is not None and abort.is_set()
            else f"timed out after {timeout:.0f}s"
        )
        await kill_group(proc.pid)
    stdout, stderr = await talk
    with contextlib.suppress(OSError):
        job.log_path.write_bytes(stdout)
    if stopped:
        return ChildOutcome(False, stopped)
    return read_child_stream(stdout, stderr, proc.returncode)


def read_child_stream(stdout: bytes, stderr: bytes, code: int | None) -> ChildOutcome:
    agent_id: str | None = None
    for line in stdout.splitlines():
        try:
            event = orjson.loads(line)
        except orjson.JSONDecodeError:
            continue
        if not isinstance(event, dict):
            continue
        if event.get("type") == "system" and event.get("subtype") == "init":
            agent_id = event.get("agent_id")
        elif event.get("type") == "result":
            ok = event.get("subtype") == "success" and code == 0
            report = str(event.get("result") or "")
            return ChildOutcome(
                ok, report if ok else f"ended with {event.get('subtype')}: {report}", agent_id
            )
        elif event.get("type") == "error":
            return ChildOutcome(False, str(event.get("message") or "error"), agent_id)
    why = stderr.decode(errors="replace").strip().splitlines()
    return ChildOutcome(False, why[-1] if why else f"no result (exit code {code})", agent_id)


# --- the post-turn trigger ----------------------------------------------------------------------


class ReflectionTrigger:
    """Checked after each successful turn of a run: counts the turn, notices compactions, runs
    a pass when the agent's trigger says so."""

    def __init__(self, prepared: Any, warn: Callable[[str], None]) -> None:
        self.prepared = prepared
        self.warn = warn
        flags = prepared.flags
        self.trigger_flag: str | None = getattr(flags, "reflection_trigger", None)
        self.step_flag: int | None = getattr(flags, "reflection_step_count", None)

    async def after_turn(self, abort: asyncio.Event | None = None) -> PassResult | None:
        p = self.prepared
        if p.env.get("TETHER_AGENT_ROLE") == "subagent":
            return None  # children (reflection's own included) never reflect
        home, agent = p.store.home, p.session.agent
        try:
            with updating_state(home, agent.id) as state:
                if self.trigger_flag is not None:
                    state.trigger = self.trigger_flag
                if self.step_flag is not None:
                    state.step_count = self.step_flag
                state.steps_since_success += 1
                if state.trigger == "compaction-event":
                    conv = p.session.conversation_id
                    entries = p.store.transcript(agent.id, conv).entries()
                    latest = last_compaction_id(entries)
                    if latest is not None and state.compactions_seen.get(conv) != latest:
                        state.compactions_seen[conv] = latest
                        state.pending = True
                due = pass_due(state, time.time())
            if not due:
                return None
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
        with updating_state(home, agent.id) as state:
            record_result(state, result.result, time.time())
        if not result.ok:
            self.warn(f"reflection {result.result}: {result.message} (will retry later)")
        return result


def attach_reflection(prepared: Any) -> None:
    """The post-turn trigger, for frontends that call `services["reflection"].after_turn()`."""
    import sys

    prepared.services["reflection"] = ReflectionTrigger(
        prepared, lambda m: print(f"tether: {m}", file=sys.stderr)
    )


def _flock(path: Path, *, wait: float, busy: str = "") -> contextlib.AbstractContextManager[None]:
    message = busy or f"{path} stayed locked; is a tether stuck?"
    return exclusive_flock(path, wait=wait, busy=lambda: ReflectionBusy(message))
