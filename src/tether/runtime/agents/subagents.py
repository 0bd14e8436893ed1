"""Subagents: child `tether` processes doing delegated work for the Task (`Agent`) tool (§11).

The child is `python -m tether -p --output-format stream-json --permission-mode unrestricted
--new-agent --system-custom <type prompt> --tags type:<t>,parent:<parent agent> --model <m>`
with the prompt on stdin, in the parent's working directory, in its own session (process
group), with env `TETHER_AGENT_ROLE=subagent`, `TETHER_PARENT_AGENT_ID=<parent agent>` and
`USER_CWD`. A call naming `agent_id` / `conversation_id` runs the child as that existing agent
instead (`--conversation <id>`: no new agent, the agent's own model and system prompt); which
targets a parent may reach is in `subagent_targets.py`, checked in the parent's own store. A
parent on a fleet's PostgreSQL store (a `tether server --store` conversation, or `tether -p
--store`) gives its child `--store <the same URL>`: the child's agent, conversation, transcript
and memory are the fleet's, and it holds its conversation's lease while it runs. The exact
grant it receives:

- `--permission-mode unrestricted`, which only skips asking: the child runs only after the
  parent admitted the Task call (in `standard` mode that takes an approval, a rule or `--yolo`);
- `--tools <the type's tools>` (no flag for `tools: all`), so nothing else is registered;
- `--allowedTools` / `--disallowedTools` = the parent's CLI lists, and the same settings files
  (user, and project ones when the parent trusted the folder: `--trust`), so every deny rule the
  parent obeys binds the child, as do the parent's hooks (the child loads the same settings);
- `--max-turns <parent's --max-turns>` when the parent has one;
- the parent's environment, so `TETHER_FS_SANDBOX=1` confines the child's shell commands in its
  own workspace sandbox exactly as the parent's;
- memory-editing types (launch profile `memory-subagent`: `memory`, `reflection`,
  `history-analyzer`, or a custom type's `launchProfile: memory-subagent`; not `init`, which
  writes project files here) unless `TETHER_FS_SANDBOX=0|false`: the whole child process runs
  inside the memory-subagent sandbox (`sandbox.policy.memory_subagent_policy`, reference §8):
  writes only under `$TETHER_HOME` (its own agent, conversation and checkpoint records) and the
  parent's memory dir (whose `.git/config` and `.git/hooks` stay read-only); every other agent's
  tree hidden; the workspace, settings, trusted folders, provider keys, mods, skills and the
  existing agent records read-only; credentials hidden; network on (it calls its model). Its
  env adds `MEMORY_DIR=TETHER_MEMORY_DIR=<parent memory>` and `TETHER_FS_SANDBOX=0` (its shell
  is already inside the sandbox). Without a backend it runs unconfined and says so once.
  Gap: a settings file that does not exist at launch could be created under `$TETHER_HOME`.

The child dies with its parent: it is started with `PR_SET_PDEATHSIG=SIGTERM` (Linux), so a
parent killed with SIGKILL still takes it down (it then stops its own tools); stopping a task
SIGTERMs its process group, SIGKILL after 2 s. Results come from the child's `result` / `error`
events; a stream lost or truncated before either (the child got as far as its `init` event, or
exited cleanly) is retried once. Every task is recorded in the conversation's task log
(`subagent_log.TaskLog`, `<conversation dir>/tasks.jsonl`): a background task's end leaves a
`<task-notification>` there that the next turn of the conversation takes (the next `tether -p`
on it, or at once as a new turn in bidirectional mode); a parent that exits stops its running
children and records them as interrupted, and a parent that died without doing so has them
settled (killed if still running, recorded interrupted) by the next run on the conversation.
The parent's stream-json relays each child `message` as a `stream_event` line tagged with
`subagent_id` (reference: child messages are forwarded per subagent id, `stream_delta{delta,
subagent_id}`).
"""

from __future__ import annotations

import asyncio
import itertools
import os
import signal
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import orjson

from tether.core.tools import ToolResult
from tether.errors import TetherError, ToolFailure
from tether.runtime.agents.subagent_launch import (
    MEMORY_PROFILE,
    MEMORY_SUBAGENT_TYPES,
    ParentScope,
    SubagentType,
    backend_env,
    child_argv,
    child_command,
    die_with_parent,
    discover_types,
    memory_sandboxed,
    parse_type,
    store_for_child,
    with_parent_backend,
)
from tether.runtime.agents.subagent_log import LoggedTask, TaskLog
from tether.runtime.agents.subagent_targets import Target, TargetRefused, target_conversation

if TYPE_CHECKING:
    from tether.backends.store_api import ConversationStore
    from tether.sandbox import SandboxStatus, WrappedCommand

__all__ = [  # the launch module's names, re-exported: callers import them from here
    "MEMORY_PROFILE",
    "MEMORY_SUBAGENT_TYPES",
    "ParentScope",
    "SubagentTask",
    "SubagentType",
    "Subagents",
    "child_argv",
    "child_command",
    "discover_types",
    "parse_type",
]

REPORT_CAP = 30_000
MAX_RUNNING = 32
STOP_GRACE_S = 2.0
_ENVELOPE_KEYS = ("session_id", "agent_id", "conversation_id")


def escape(text: str) -> str:
    """XML text escaping for task notifications (xml.sax.saxutils costs ~17 ms to import)."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


@dataclass(slots=True)
class SubagentTask:
    id: str
    type: str
    description: str
    log_path: Path
    background: bool = True
    tool_call_id: str | None = None
    started_at: float = field(default_factory=time.time)
    agent_id: str | None = None
    conversation_id: str | None = None
    report: str = ""
    error: str | None = None
    tool_uses: int = 0
    total_tokens: int = 0
    finished_at: float | None = None
    first_event_at: float | None = None  # when the child's first stream-json line arrived
    stopped: bool = False
    pids: list[int] = field(default_factory=list)  # every attempt's child (leads its process group)
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


Notify = Callable[[str], None]
Progress = Callable[[dict[str, Any]], None]


class Subagents:
    """The subagent tasks of one parent run: the service behind Agent, TaskOutput and TaskStop."""

    def __init__(
        self,
        scope: ParentScope,
        types: Mapping[str, SubagentType],
        scratch: Path,
        *,
        on_stop: Callable[[SubagentTask], Any] | None = None,
        task_log: Path | None = None,
        command: Sequence[str] | None = None,
        sandbox_status: SandboxStatus | None = None,
        env: Mapping[str, str] | None = None,
        store: ConversationStore | None = None,
    ) -> None:
        self.scope = scope
        self.env = env  # the run's environment (where its Letta server is); None: os.environ
        # The parent's store, where a Task call's agent_id / conversation_id targets are looked
        # up and a target's new conversation made; None: the files under the scope's home.
        self.store = store
        self.types = dict(types)
        self.scratch = scratch
        self.on_stop = on_stop  # SubagentStop hooks
        self.progress: Progress | None = None  # stream-json frontends relay child messages
        self.log = TaskLog(task_log) if task_log is not None else None
        self.command = list(command) if command is not None else None  # tests and benches
        self.sandbox_status = sandbox_status  # None: this machine's probe()
        self._notify: Notify | None = None
        self._tasks: dict[str, SubagentTask] = {}
        self._counter = itertools.count(1)
        self._closing = False
        self._warned_unconfined = False
        self._warned_local = False  # memory subagents off the store: said once

    # --- notifications ----------------------------------------------------------------------

    @property
    def notify(self) -> Notify | None:
        return self._notify

    @notify.setter
    def notify(self, deliver: Notify | None) -> None:
        """A frontend that can start a turn on its own (bidirectional) delivers notifications as
        they come; ones left by earlier runs of the conversation are handed over at once."""
        self._notify = deliver
        if deliver is not None:
            for text in self.take_notifications():
                deliver(text)

    def take_notifications(self) -> list[str]:
        """The `<task-notification>`s waiting for this conversation's next turn (each is given
        out once, across processes), after settling tasks of parents that died."""
        if self.log is None:
            return []
        try:
            self.log.reconcile(set(self._tasks), self._orphan_notification)
            return self.log.take_pending()
        except OSError as exc:  # a broken task log must not stop the conversation
            print(f"tether: could not read the task log {self.log.path}: {exc}", file=sys.stderr)
            return []

    def _orphan_notification(self, logged: LoggedTask) -> str:
        task = SubagentTask(
            logged.task_id,
            logged.type,
            logged.description,
            Path(logged.log),
            started_at=logged.created_at or time.time(),
            stopped=True,
            error="the parent process ended before the subagent finished",
        )
        task.finished_at = time.time()
        task._done.set()
        return self.notification(task)

    # --- the Agent tool ---------------------------------------------------------------------

    async def launch(
        self, args: Mapping[str, Any], abort: asyncio.Event, tool_call_id: str | None = None
    ) -> ToolResult:
        kind = self.types.get(str(args.get("subagent_type")))
        if kind is None:
            names = ", ".join(sorted(self.types))
            return ToolResult(
                f"Unknown subagent_type {args.get('subagent_type')!r}. Available: {names}", True
            )
        # a cloud parent's children are cloud runs on its server (found once, at the first launch)
        self.scope = with_parent_backend(self.scope, self.env if self.env is not None else os.environ)
        try:  # store round trips (PostgreSQL's, on a fleet) stay off the event loop
            target = await asyncio.to_thread(self._target, args, kind.name)
        except (TargetRefused, TetherError) as exc:
            return ToolResult(str(exc), True)
        if sum(t.running for t in self._tasks.values()) >= MAX_RUNNING:
            return ToolResult(
                f"Too many subagents: {MAX_RUNNING} are already running; stop one with TaskStop.",
                True,
            )
        model = args.get("model") if isinstance(args.get("model"), str) else None
        background = args.get("run_in_background", True) is not False
        description = str(args.get("description", ""))
        if self.log is not None:
            task_id, log_path = self.log.create(kind.name, description, self._log_path)
        else:
            task_id = f"task_{next(self._counter)}"
            log_path = self._log_path(task_id)
        task = SubagentTask(task_id, kind.name, description, log_path, background, tool_call_id)
        self._tasks[task.id] = task
        scope, local = store_for_child(self.scope, kind,
                                       self.env if self.env is not None else os.environ)
        if local is not None and not self._warned_local:
            self._warned_local = True
            print(f"tether: {local}", file=sys.stderr)
        argv = child_argv(kind, scope, model, self.command, target.argv() if target else ())
        prompt = str(args["prompt"])
        if not background:
            runner = asyncio.ensure_future(self._run(task, kind, argv, prompt))
            stop = asyncio.ensure_future(abort.wait())
            await asyncio.wait({runner, stop}, return_when=asyncio.FIRST_COMPLETED)
            stop.cancel()
            if not runner.done():
                await self.stop(task.id)
                await runner
                return ToolResult("Interrupted by user", True)
            return ToolResult(self._foreground_text(task), task.error is not None)
        task._runner = asyncio.ensure_future(self._run(task, kind, argv, prompt))
        return ToolResult(
            f"Task running in background with task ID: {task.id}\n"
            f"Output file: {task.log_path}\n"
            "You will be notified when it completes; use TaskOutput to check on it or TaskStop to stop it."
        )

    def _target(self, args: Mapping[str, Any], kind: str) -> Target | None:
        """The existing agent / conversation the call names, checked against the grant
        (runtime/agents/subagent_targets.py); None for a new subagent agent."""
        if not args.get("agent_id") and not args.get("conversation_id"):
            return None
        store = self.store
        if store is None:
            from tether.backends.local.store import LocalStore
            from tether.runtime.session.session import tether_home

            env = self.env if self.env is not None else os.environ
            store = LocalStore((self.scope.tether_home or tether_home(env)).expanduser().absolute())
        return target_conversation(
            args, kind=kind, parent_agent=self.scope.agent_id,
            parent_conversation=self.scope.conversation_id, store=store,
            backend=self.scope.backend,
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

    async def _run(
        self, task: SubagentTask, kind: SubagentType, argv: list[str], prompt: str
    ) -> None:
        try:
            for attempt in (1, 2):
                outcome = await self._attempt(task, kind, argv, prompt)
                if outcome != "lost" or task.stopped:
                    break
                if attempt == 2:
                    task.error = (
                        "the subagent's output stream ended without a result (after one retry)"
                    )
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
        self._record_end(task)

    def _record_end(self, task: SubagentTask) -> None:
        """A foreground task's report went back as the tool result; a background one's is
        delivered now (bidirectional) or left in the task log for the next turn. At parent
        shutdown nothing is delivered: the frontend will not run another turn."""
        text = self.notification(task)
        delivered = not task.background
        if task.background and self._notify is not None and not self._closing:
            self._notify(text)
            delivered = True
        if self.log is not None:
            try:
                self.log.ended(task.id, task.status(), text, delivered=delivered)
            except OSError as exc:
                print(f"tether: could not record the end of {task.id}: {exc}", file=sys.stderr)

    def _child_env(self) -> dict[str, str]:
        return {
            **os.environ,
            "TETHER_AGENT_ROLE": "subagent",
            "TETHER_PARENT_AGENT_ID": self.scope.agent_id,
            "USER_CWD": str(self.scope.cwd),
            **backend_env(self.scope),
        }

    async def _attempt(
        self, task: SubagentTask, kind: SubagentType, argv: list[str], prompt: str
    ) -> str:
        env = self._child_env()
        spawn = (
            self._memory_sandboxed(task, argv, env)
            if kind.launch_profile == MEMORY_PROFILE
            else None
        )
        try:
            proc = await asyncio.create_subprocess_exec(
                *(spawn.argv if spawn else argv),
                cwd=self.scope.cwd,
                env=spawn.env if spawn else env,
                start_new_session=True,
                preexec_fn=die_with_parent(),
                pass_fds=spawn.pass_fds if spawn else (),
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
            )
        finally:
            if spawn is not None:
                spawn.close()
        task._proc = proc
        task.pids.append(proc.pid)
        if self.log is not None:
            try:
                self.log.spawned(task.id, proc.pid)
            except OSError as exc:  # the child runs anyway; only a crash recovery would miss it
                print(f"tether: could not record the start of {task.id}: {exc}", file=sys.stderr)
        if task.stopped:  # TaskStop arrived while the child was starting
            await self._kill(proc)
        assert proc.stdin is not None and proc.stdout is not None and proc.stderr is not None
        stderr_reader = asyncio.ensure_future(proc.stderr.read())
        try:
            proc.stdin.write(prompt.encode())
            await proc.stdin.drain()
            proc.stdin.close()
        except (BrokenPipeError, ConnectionResetError):
            pass  # the child died at once; its exit says why
        ended, seen = "lost", False
        with open(task.log_path, "ab", buffering=0) as log:
            os.chmod(task.log_path, 0o600)
            async for line in proc.stdout:
                log.write(line)
                if task.first_event_at is None:
                    task.first_event_at = time.time()
                seen = True
                ended = self._observe(task, line) or ended
        stderr = (await stderr_reader).decode(errors="replace").strip()
        await proc.wait()
        if (
            ended == "lost"
            and not seen
            and proc.returncode not in (0, None)
            and stderr
            and not task.stopped
        ):
            task.error = stderr.splitlines()[-1]  # it never started: retrying will not help
            return "error"
        return ended

    def _memory_sandboxed(
        self, task: SubagentTask, argv: list[str], env: dict[str, str]
    ) -> WrappedCommand | None:
        tmp = self.scratch / f"{task.id}.tmp"
        spawn, unconfined = memory_sandboxed(self.scope, tmp, argv, env, self.sandbox_status)
        if unconfined is not None and not self._warned_unconfined:
            self._warned_unconfined = True
            print(
                f"tether: memory subagents run unconfined (no kernel sandbox: {unconfined}); "
                "set TETHER_FS_SANDBOX=0 to run them unconfined on purpose",
                file=sys.stderr,
            )
        return spawn

    def _observe(self, task: SubagentTask, line: bytes) -> str | None:
        try:
            event = orjson.loads(line)
        except orjson.JSONDecodeError:
            return None
        if not isinstance(event, dict):
            return None
        kind = event.get("type")
        if kind == "system" and event.get("subtype") == "init":
            task.agent_id, task.conversation_id = (
                event.get("agent_id"),
                event.get("conversation_id"),
            )
        elif kind == "message":
            if event.get("message_type") == "tool_call_message":
                task.tool_uses += 1
            self._relay(task, event)
        elif kind == "result":
            task.report = str(event.get("result") or "")
            usage = event.get("usage")
            task.total_tokens = (
                int(usage.get("total_tokens") or 0) if isinstance(usage, dict) else 0
            )
            if event.get("subtype") != "success":
                task.error = f"subagent ended with {event.get('subtype')}"
            return "result"
        elif kind == "error":
            task.error = str(event.get("message") or "subagent error")
            return "error"
        return None

    def _relay(self, task: SubagentTask, event: dict[str, Any]) -> None:
        """The child's message as a `stream_event` line of the parent's stream (the reference's
        `stream_delta{delta, subagent_id}`): the child's message under `event`, tagged with which
        subagent and which Agent call it comes from; the frontend adds its envelope. A separate
        line type, so a client reading the parent's own `message` lines never mixes them up."""
        if self.progress is None:
            return
        from tether.protocol import wire
        from tether.protocol.turns import SubagentProgress

        line = wire.subagent_line(SubagentProgress(
            {k: v for k, v in event.items() if k not in _ENVELOPE_KEYS and k != "type"},
            task.id, task.type, task.agent_id, task.tool_call_id,
        ))
        try:
            self.progress(line)
        except Exception:  # a reader gone away must not fail the task
            self.progress = None

    # --- TaskOutput / TaskStop --------------------------------------------------------------

    def get(self, task_id: str) -> SubagentTask | None:
        return self._tasks.get(task_id)

    def tasks(self) -> list[SubagentTask]:
        return list(self._tasks.values())

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
            return (
                f"(still running; {task.tool_uses} tool calls so far; transcript: {task.log_path})"
            )
        return task.report if task.error is None else f"Error: {task.error}"

    async def stop(self, task_id: str) -> bool:
        """SIGTERM the child's process group (it stops its own tools), SIGKILL after 2 s; returns
        once the child has exited. False if the task had already ended."""
        task = self._require(task_id)
        if not task.running:
            return False
        task.stopped = True
        if task._proc is not None:
            await self._kill(task._proc)
        return True

    @staticmethod
    async def _kill(proc: asyncio.subprocess.Process) -> None:
        for sig in (signal.SIGTERM, signal.SIGKILL):
            if proc.returncode is not None:
                break
            try:
                os.killpg(proc.pid, sig)
            except ProcessLookupError:
                break
            try:
                await asyncio.wait_for(proc.wait(), STOP_GRACE_S)
                break
            except TimeoutError:
                continue

    async def stop_all(self) -> None:
        """Parent exit: stop every child; their tasks end as interrupted (in the task log,
        for the conversation's next turn)."""
        self._closing = True
        running = [t for t in self._tasks.values() if t.running]
        await asyncio.gather(*(self.stop(t.id) for t in running))
        await asyncio.gather(
            *(t._runner for t in running if t._runner is not None), return_exceptions=True
        )

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
