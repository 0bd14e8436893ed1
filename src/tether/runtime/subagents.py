"""Subagents: child `tether` processes doing delegated work for the Task (`Agent`) tool (§11).

A child is `tether -p --output-format stream-json` with the prompt on stdin, a new agent whose
system prompt is the subagent type's, and `--permission-mode unrestricted`. The grant is
bounded: the child runs only after the parent admitted the Task call (in `standard` mode that
takes an approval, a rule or `--yolo`), it reads the same settings files (so settings deny
rules bind it), it inherits the parent's CLI allow/deny lists, its tools are limited to its
type's, and the parent's hooks fire for its tool calls because the child loads the same user
settings. Results come from the child's `result` / `error` events; a stream lost before either
is retried once.
"""

from __future__ import annotations

import asyncio
import itertools
import os
import signal
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any
from xml.sax.saxutils import escape

import orjson

from tether.core.tools import ToolResult
from tether.errors import ToolFailure, UsageError

REPORT_CAP = 30_000
MAX_RUNNING = 32


@dataclass(frozen=True, slots=True)
class SubagentType:
    name: str
    description: str
    tools: tuple[str, ...] | None  # None: all tools
    system: str
    model: str | None = None
    source: str = "bundled"


def parse_type(text: str, source: str) -> SubagentType:
    """Markdown with a small YAML-style frontmatter (`key: value` lines; tools as a csv)."""
    if not text.startswith("---\n"):
        raise UsageError(f"{source}: a subagent type starts with '---' frontmatter")
    head, sep, body = text[4:].partition("\n---\n")
    if not sep:
        raise UsageError(f"{source}: the frontmatter is not closed with '---'")
    meta: dict[str, str] = {}
    for n, line in enumerate(head.splitlines(), start=2):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        key, colon, value = line.partition(":")
        if not colon:
            raise UsageError(f"{source}:{n}: expected 'key: value'")
        meta[key.strip()] = value.strip().strip("\"'")
    if not meta.get("name"):
        raise UsageError(f"{source}: frontmatter needs a 'name'")
    tools_field = meta.get("tools", "all")
    tools = None if tools_field in ("all", "*", "") else tuple(t.strip() for t in tools_field.split(",") if t.strip())
    return SubagentType(meta["name"], meta.get("description", ""), tools, body.strip(), meta.get("model") or None, source)


def discover_types(home: Path, cwd: Path, *, project_trusted: bool) -> dict[str, SubagentType]:
    """Bundled types, then `~/.tether/agents/*.md`, then (trusted projects) `.tether/agents/*.md`."""
    types: dict[str, SubagentType] = {}
    for entry in resources.files("tether.runtime").joinpath("subagent_types").iterdir():
        if entry.name.endswith(".md"):
            t = parse_type(entry.read_text(encoding="utf-8"), f"bundled:{entry.name}")
            types[t.name] = t
    dirs = [home / "agents"] + ([cwd / ".tether" / "agents"] if project_trusted else [])
    for directory in dirs:
        if directory.is_dir():
            for path in sorted(directory.glob("*.md")):
                t = parse_type(path.read_text(encoding="utf-8"), str(path))
                types[t.name] = SubagentType(t.name, t.description, t.tools, t.system, t.model, str(path))
    return types


@dataclass(frozen=True, slots=True)
class ParentScope:
    """What the parent run passes down, captured before a child is spawned."""

    agent_id: str
    conversation_id: str
    model: str
    cwd: Path
    allowed_tools: tuple[str, ...] = ()
    disallowed_tools: tuple[str, ...] = ()
    max_turns: int | None = None
    trusted: bool = False  # the parent applied this folder's project settings


@dataclass(slots=True)
class SubagentTask:
    id: str
    type: str
    description: str
    log_path: Path
    started_at: float = field(default_factory=time.time)
    agent_id: str | None = None
    conversation_id: str | None = None
    report: str = ""
    error: str | None = None
    tool_uses: int = 0
    total_tokens: int = 0
    finished_at: float | None = None
    stopped: bool = False
    _proc: asyncio.subprocess.Process | None = None
    _done: asyncio.Event = field(default_factory=asyncio.Event)
    _runner: asyncio.Task[None] | None = None

    @property
    def running(self) -> bool:
        return not self._done.is_set()

    def status(self) -> str:
        if self.running:
            return "running"
        if self.stopped:
            return "interrupted"
        return "failed" if self.error is not None else "completed"

    @property
    def duration_ms(self) -> int:
        return int(((self.finished_at or time.time()) - self.started_at) * 1000)


def child_command() -> list[str]:
    return [sys.executable, "-m", "tether"]


def child_argv(kind: SubagentType, scope: ParentScope, model: str | None) -> list[str]:
    argv = [
        *child_command(), "-p", "--output-format", "stream-json", "--permission-mode", "unrestricted",
        "--new-agent", "--system-custom", kind.system, "--tags", f"type:{kind.name},parent:{scope.agent_id}",
        "--model", model or kind.model or scope.model,
    ]
    if kind.tools is not None:
        argv += ["--tools", ",".join(kind.tools)]
    if scope.allowed_tools:
        argv += ["--allowedTools", ",".join(scope.allowed_tools)]
    if scope.disallowed_tools:
        argv += ["--disallowedTools", ",".join(scope.disallowed_tools)]
    if scope.max_turns is not None:
        argv += ["--max-turns", str(scope.max_turns)]
    if scope.trusted:
        argv.append("--trust")
    return argv


Notify = Callable[[str], None]


class Subagents:
    """The subagent tasks of one parent run: the service behind Agent, TaskOutput and TaskStop."""

    def __init__(
        self,
        scope: ParentScope,
        types: Mapping[str, SubagentType],
        scratch: Path,
        *,
        on_stop: Callable[[SubagentTask], Any] | None = None,
    ) -> None:
        self.scope = scope
        self.types = dict(types)
        self.scratch = scratch
        self.on_stop = on_stop  # SubagentStop hooks
        self.notify: Notify | None = None  # set by frontends that can deliver notifications
        self._tasks: dict[str, SubagentTask] = {}
        self._counter = itertools.count(1)

    # --- the Agent tool ---------------------------------------------------------------------

    async def launch(self, args: Mapping[str, Any], abort: asyncio.Event) -> ToolResult:
        kind = self.types.get(str(args.get("subagent_type")))
        if kind is None:
            names = ", ".join(sorted(self.types))
            return ToolResult(f"Unknown subagent_type {args.get('subagent_type')!r}. Available: {names}", True)
        if args.get("agent_id") or args.get("conversation_id"):
            return ToolResult("Deploying onto an existing agent or conversation is not supported yet.", True)
        if sum(t.running for t in self._tasks.values()) >= MAX_RUNNING:
            return ToolResult(f"Too many subagents: {MAX_RUNNING} are already running; stop one with TaskStop.", True)
        model = args.get("model") if isinstance(args.get("model"), str) else None
        background = args.get("run_in_background", True) is not False
        task_id = f"task_{next(self._counter)}"
        task = SubagentTask(task_id, kind.name, str(args.get("description", "")), self._log_path(task_id))
        self._tasks[task.id] = task
        argv = child_argv(kind, self.scope, model)
        prompt = str(args["prompt"])
        if not background:
            runner = asyncio.ensure_future(self._run(task, argv, prompt))
            stop = asyncio.ensure_future(abort.wait())
            await asyncio.wait({runner, stop}, return_when=asyncio.FIRST_COMPLETED)
            stop.cancel()
            if not runner.done():
                await self.stop(task.id)
                await runner
                return ToolResult("Interrupted by user", True)
            return ToolResult(self._foreground_text(task), task.error is not None)
        task._runner = asyncio.ensure_future(self._run(task, argv, prompt, notify=True))
        return ToolResult(
            f"Task running in background with task ID: {task.id}\n"
            f"Output file: {task.log_path}\n"
            "You will be notified when it completes; use TaskOutput to check on it or TaskStop to stop it."
        )

    def _log_path(self, task_id: str) -> Path:
        self.scratch.mkdir(parents=True, exist_ok=True, mode=0o700)
        return self.scratch / f"{task_id}.log"

    def _foreground_text(self, task: SubagentTask) -> str:
        report = task.report if task.error is None else f"Error: {task.error}"
        if len(report) > REPORT_CAP:
            report = report[:REPORT_CAP] + "\n[report truncated]"
        return (
            f"subagent_type={task.type}, subagent_id={task.id}, agent_id={task.agent_id}, "
            f"conversation_id={task.conversation_id}, status={task.status()}\n\n{report}\n\nOutput file: {task.log_path}"
        )

    # --- running a child --------------------------------------------------------------------

    async def _run(self, task: SubagentTask, argv: list[str], prompt: str, *, notify: bool = False) -> None:
        try:
            for attempt in (1, 2):
                outcome = await self._attempt(task, argv, prompt)
                if outcome != "lost" or task.stopped:
                    break
                if attempt == 2:
                    task.error = "the subagent's output stream ended without a result (after one retry)"
        except Exception as exc:  # the parent must get an answer, never a hung task
            task.error = f"{type(exc).__name__}: {exc}"
        finally:
            task.finished_at = time.time()
            task._done.set()
        if task.stopped and task.error is None:
            task.error = "Interrupted by user"
        if self.on_stop is not None:
            try:
                result = self.on_stop(task)
                if asyncio.iscoroutine(result):
                    await result
            except Exception:  # SubagentStop hooks are fire-and-forget
                pass
        if notify and self.notify is not None:
            self.notify(self.notification(task))

    async def _attempt(self, task: SubagentTask, argv: list[str], prompt: str) -> str:
        env = {**os.environ, "TETHER_AGENT_ROLE": "subagent", "TETHER_PARENT_AGENT_ID": self.scope.agent_id,
               "USER_CWD": str(self.scope.cwd)}
        proc = await asyncio.create_subprocess_exec(
            *argv, cwd=self.scope.cwd, env=env, start_new_session=True,
            stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        )
        task._proc = proc
        assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
        proc.stdin.write(prompt.encode())
        await proc.stdin.drain()
        proc.stdin.close()
        ended = "lost"
        with open(task.log_path, "ab", buffering=0) as log:
            os.chmod(task.log_path, 0o600)
            async for line in proc.stdout:
                log.write(line)
                ended = self._observe(task, line) or ended
        stderr = (await proc.stderr.read()).decode(errors="replace").strip()
        await proc.wait()
        if ended == "lost" and proc.returncode not in (0, None) and stderr and not task.stopped:
            task.error = stderr.splitlines()[-1]  # a startup error: retrying will not help
            return "error"
        return ended

    def _observe(self, task: SubagentTask, line: bytes) -> str | None:
        try:
            event = orjson.loads(line)
        except orjson.JSONDecodeError:
            return None
        if not isinstance(event, dict):
            return None
        kind = event.get("type")
        if kind == "system" and event.get("subtype") == "init":
            task.agent_id, task.conversation_id = event.get("agent_id"), event.get("conversation_id")
        elif kind == "message" and event.get("message_type") == "tool_call_message":
            task.tool_uses += 1
        elif kind == "result":
            task.report = str(event.get("result") or "")
            usage = event.get("usage")
            task.total_tokens = int(usage.get("total_tokens") or 0) if isinstance(usage, dict) else 0
            if event.get("subtype") != "success":
                task.error = f"subagent ended with {event.get('subtype')}"
            return "result"
        elif kind == "error":
            task.error = str(event.get("message") or "subagent error")
            return "error"
        return None

    # --- TaskOutput / TaskStop --------------------------------------------------------------

    def get(self, task_id: str) -> SubagentTask | None:
        return self._tasks.get(task_id)

    def _require(self, task_id: str) -> SubagentTask:
        task = self._tasks.get(task_id)
        if task is None:
            raise ToolFailure(f"No background task with ID: {task_id}")
        return task

    async def wait(self, task_id: str, timeout: float | None = None) -> bool:
        try:
            await asyncio.wait_for(self._require(task_id)._done.wait(), timeout)
        except TimeoutError:
            return False
        return True

    def output(self, task_id: str) -> str:
        task = self._require(task_id)
        if task.running:
            return f"(still running; {task.tool_uses} tool calls so far; transcript: {task.log_path})"
        return task.report if task.error is None else f"Error: {task.error}"

    async def stop(self, task_id: str) -> bool:
        task = self._require(task_id)
        if not task.running:
            return False
        task.stopped = True
        proc = task._proc
        if proc is not None and proc.returncode is None:
            for sig in (signal.SIGTERM, signal.SIGKILL):
                try:
                    os.killpg(proc.pid, sig)
                except ProcessLookupError:
                    break
                try:
                    await asyncio.wait_for(proc.wait(), 2)
                    break
                except TimeoutError:
                    continue
        return True

    async def stop_all(self) -> None:
        """Parent exit: stop every child; their tasks end as interrupted."""
        running = [t for t in self._tasks.values() if t.running]
        await asyncio.gather(*(self.stop(t.id) for t in running))
        await asyncio.gather(*(t._runner for t in running if t._runner is not None), return_exceptions=True)

    @staticmethod
    def notification(task: SubagentTask) -> str:
        result = task.report if task.error is None else f"Error: {task.error}"
        return (
            "<task-notification>"
            f"<task-id>{escape(task.id)}</task-id>"
            f"<status>{escape(task.status())}</status>"
            f"<summary>{escape(task.description or task.type)}</summary>"
            f"<result>{escape(result[:REPORT_CAP])}</result>"
            f"<usage>total_tokens: {task.total_tokens}, tool_uses: {task.tool_uses}, "
            f"duration_ms: {task.duration_ms}</usage>"
            "</task-notification>\n"
            f"Full transcript available at: {escape(str(task.log_path))}"
        )
