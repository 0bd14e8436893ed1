"""A reflection pass (reference §15): the memory worktree, the `reflection` child run in it, and
merging what the child committed into the memory's `main`. When a pass is due is decided in
`runtime/agents/reflection.py`, which imports this module only then.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson

from tether.runtime.agents.reflection import CHILD_TIMEOUT_S, EXCERPT_CHARS, SUCCESSFUL, _flock

# --- the transcript excerpt ---------------------------------------------------------------------


def transcript_excerpt(messages: Sequence[Any], limit: int = EXCERPT_CHARS) -> str:
    """The conversation's active view as plain text, newest kept when it is too long."""
    from tether.protocol.messages import AssistantMessage, TextPart, ToolResultMessage
    from tether.protocol.tool_calls import ToolCall

    def text_of(parts: Sequence[Any], cap: int) -> str:
        text = "\n".join(p.text for p in parts if isinstance(p, TextPart)).strip()
        return text if len(text) <= cap else text[:cap] + " […]"

    blocks: list[str] = []
    for message in messages:
        if isinstance(message, AssistantMessage):
            lines = [f"assistant: {t}"] if (t := text_of(message.content, 4000)) else []
            for part in message.content:
                if isinstance(part, ToolCall):
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
        result = "failed"
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
                # A branch main could not take is kept (its commits are a memory change)
                # until `tether memory resolve` merges it.
                memfs.remove_worktree(worktree, None if result in KEEP_BRANCH else branch)
    return PassResult(
        result, agent_id, pass_id, branch, message, memfs.revision(), outcome.agent_id
    )


KEEP_BRANCH = ("merge_conflict", "parent_dirty")  # committed work that could not go in yet


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
                f"`tether memory resolve` to merge {branch} (kept) or `tether dream` again"
            )
        how = memfs.merge_branch(branch, f"reflection: merge {branch}")
    if how == "conflict":
        return "merge_conflict", (
            f"{branch} conflicts with main; the merge was aborted and main is unchanged "
            "(the branch is kept: `tether memory resolve` merges it)"
        )
    return "merged", f"merged {branch} into main ({how})"


async def spawn_reflection_child(job: ChildJob, abort: asyncio.Event | None) -> ChildOutcome:
    """The reflection type as a child `tether -p` in the worktree (runtime/agents/subagents' argv)."""
    from tether.runtime.agents.subagents import (
        ParentScope,
        child_argv,
        die_with_parent,
        discover_types,
    )
    from tether.runtime.session.session import tether_home
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
