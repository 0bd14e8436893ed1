"""Hooks: user commands run at lifecycle points, configured in settings (reference §9).

A hook is a shell command that gets the event as JSON on stdin. Exit 0 allows (stdout may carry
`hookSpecificOutput`), exit 2 blocks (stderr goes back to the model), anything else is an
error. tether treats a PreToolUse error as a block: a crashing guard never lets a call through.
Timeouts send SIGTERM to the hook's process group, then SIGKILL a second later.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import orjson

from tether.errors import UsageError

TOOL_EVENTS = ("PreToolUse", "PostToolUse", "PostToolUseFailure", "PermissionRequest")
SIMPLE_EVENTS = (
    "UserPromptSubmit", "Notification", "Stop", "SubagentStop", "PreCompact", "SessionStart", "SessionEnd",
)
EVENTS = TOOL_EVENTS + SIMPLE_EVENTS
DEFAULT_TIMEOUT_S = 60.0
_SCRUBBED_ENV = (
    "TETHER_AGENT_ID", "AGENT_ID", "TETHER_CONVERSATION_ID", "CONVERSATION_ID",
    "TETHER_MEMORY_DIR", "MEMORY_DIR",
)

Decision = Literal["allow", "block", "error"]


@dataclass(frozen=True, slots=True)
class HookCommand:
    command: str
    timeout_s: float = DEFAULT_TIMEOUT_S
    quiet: bool = False


@dataclass(frozen=True, slots=True)
class HookGroup:
    matcher: str | None  # None / "" / "*": every tool
    hooks: tuple[HookCommand, ...]

    def matches(self, tool_name: str | None) -> bool:
        if not self.matcher or self.matcher == "*" or tool_name is None:
            return True
        try:
            return re.fullmatch(f"(?:{self.matcher})", tool_name) is not None
        except re.error:  # an invalid pattern matches its own text exactly, as the reference does
            return self.matcher == tool_name


@dataclass(frozen=True, slots=True)
class HookConfig:
    events: Mapping[str, tuple[HookGroup, ...]] = field(default_factory=dict)
    disabled: bool = False

    def commands(self, event: str, tool_name: str | None = None) -> list[HookCommand]:
        if self.disabled:
            return []
        return [h for g in self.events.get(event, ()) if g.matches(tool_name) for h in g.hooks]


@dataclass(frozen=True, slots=True)
class HookResult:
    command: str
    decision: Decision
    stdout: str
    stderr: str
    exit_code: int | None  # None: timed out or could not start

    @property
    def feedback(self) -> str:
        if self.decision == "block":
            return f"[{self.command}]: {self.stderr.strip()}"
        if self.decision == "error":
            why = self.stderr.strip() or (
                f"exit code {self.exit_code}" if self.exit_code is not None else "did not finish"
            )
            return f"Hook error: [{self.command}]: {why}"
        return ""

    def specific_output(self) -> dict[str, Any]:
        try:
            doc = orjson.loads(self.stdout) if self.stdout.strip() else {}
        except orjson.JSONDecodeError:
            return {}
        out = doc.get("hookSpecificOutput") if isinstance(doc, dict) else None
        return out if isinstance(out, dict) else {}


# --- settings ------------------------------------------------------------------------------


def parse_hooks(raw: Any, source: str) -> tuple[dict[str, tuple[HookGroup, ...]], bool | None]:
    """The `hooks` object of one settings file; malformed shapes name the file and the event."""
    if raw is None:
        return {}, None
    if not isinstance(raw, dict):
        raise UsageError(f"{source}: 'hooks' must be an object")
    disabled = raw.get("disabled")
    if disabled is not None and not isinstance(disabled, bool):
        raise UsageError(f"{source}: hooks.disabled must be true or false")
    events: dict[str, tuple[HookGroup, ...]] = {}
    for event, groups in raw.items():
        if event == "disabled":
            continue
        if event not in EVENTS:
            raise UsageError(f"{source}: unknown hook event {event!r}; events: {', '.join(EVENTS)}")
        if not isinstance(groups, list):
            raise UsageError(f"{source}: hooks.{event} must be a list of {{matcher, hooks}} objects")
        events[event] = tuple(_group(g, f"{source}: hooks.{event}[{i}]", event) for i, g in enumerate(groups))
    return events, disabled


def _group(raw: Any, where: str, event: str) -> HookGroup:
    if not isinstance(raw, dict) or not isinstance(raw.get("hooks"), list):
        raise UsageError(f"{where} must be an object with a 'hooks' list")
    matcher = raw.get("matcher")
    if matcher is not None and not isinstance(matcher, str):
        raise UsageError(f"{where}.matcher must be a string")
    hooks: list[HookCommand] = []
    for j, h in enumerate(raw["hooks"]):
        at = f"{where}.hooks[{j}]"
        if not isinstance(h, dict):
            raise UsageError(f"{at} must be an object")
        if h.get("type") == "prompt":
            raise UsageError(f"{at}: prompt hooks are not supported yet; use type 'command'")
        if h.get("type") != "command" or not isinstance(h.get("command"), str) or not h["command"].strip():
            raise UsageError(f"{at} must be {{\"type\": \"command\", \"command\": \"...\"}}")
        timeout = h.get("timeout", DEFAULT_TIMEOUT_S)
        if isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout <= 0:
            raise UsageError(f"{at}.timeout must be a positive number of seconds")
        hooks.append(HookCommand(h["command"], float(timeout), bool(h.get("quiet", False))))
    return HookGroup(matcher, tuple(hooks))


def merge_hooks(
    user: Any, project: Sequence[tuple[str, Any]], user_source: str = "user settings"
) -> HookConfig:
    """Order project-local → project → user; user `disabled:false` forces on, any `true` disables."""
    merged: dict[str, list[HookGroup]] = {}
    project_disabled = False
    for source, raw in project:
        events, disabled = parse_hooks(raw, source)
        project_disabled = project_disabled or disabled is True
        for event, groups in events.items():
            merged.setdefault(event, []).extend(groups)
    user_events, user_disabled = parse_hooks(user, user_source)
    for event, groups in user_events.items():
        merged.setdefault(event, []).extend(groups)
    disabled = user_disabled is True or (project_disabled and user_disabled is not False)
    return HookConfig({e: tuple(g) for e, g in merged.items()}, disabled)


# --- running -------------------------------------------------------------------------------


class HookRunner:
    """Runs the configured hooks of one session (working directory, agent, conversation)."""

    def __init__(self, config: HookConfig, *, cwd: Path, agent_id: str | None, session_id: str | None) -> None:
        self.config = config
        self.cwd = cwd
        self.agent_id = agent_id
        self.session_id = session_id

    def payload(self, event: str, **fields: Any) -> dict[str, Any]:
        base: dict[str, Any] = {"event_type": event, "working_directory": str(self.cwd)}
        if self.session_id:
            base["session_id"] = self.session_id
        if self.agent_id and event in TOOL_EVENTS:
            base["agent_id"] = self.agent_id
        base.update(fields)
        return base

    async def run_sequential(self, event: str, payload: dict[str, Any], tool_name: str | None = None) -> list[HookResult]:
        """One after another, stopping at the first block (PreToolUse, PermissionRequest, …)."""
        results: list[HookResult] = []
        for hook in self.config.commands(event, tool_name):
            result = await self._run_one(hook, event, payload)
            results.append(result)
            if result.decision == "block":
                break
        return results

    async def run_parallel(self, event: str, payload: dict[str, Any], tool_name: str | None = None) -> list[HookResult]:
        hooks = self.config.commands(event, tool_name)
        return list(await asyncio.gather(*(self._run_one(h, event, payload) for h in hooks)))

    async def _run_one(self, hook: HookCommand, event: str, payload: dict[str, Any]) -> HookResult:
        env = {k: v for k, v in os.environ.items() if k not in _SCRUBBED_ENV}
        env.update(TETHER_HOOK_EVENT=event, TETHER_WORKING_DIR=str(self.cwd), USER_CWD=str(self.cwd))
        if self.agent_id:
            env.update(TETHER_AGENT_ID=self.agent_id, AGENT_ID=self.agent_id)
        try:
            proc = await asyncio.create_subprocess_exec(
                "/bin/sh", "-c", hook.command, cwd=self.cwd, env=env, start_new_session=True,
                stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
            )
        except OSError as exc:
            return HookResult(hook.command, "error", "", f"could not start: {exc}", None)
        try:
            out, err = await asyncio.wait_for(proc.communicate(orjson.dumps(payload)), hook.timeout_s)
        except TimeoutError:
            await _kill_group(proc)
            return HookResult(hook.command, "error", "", f"timed out after {hook.timeout_s:g} s", None)
        except asyncio.CancelledError:
            await _kill_group(proc)
            raise
        code = proc.returncode
        decision: Decision = "allow" if code == 0 else "block" if code == 2 else "error"
        return HookResult(hook.command, decision, out.decode(errors="replace"), err.decode(errors="replace"), code)


async def _kill_group(proc: asyncio.subprocess.Process) -> None:
    for sig, grace in ((signal.SIGTERM, 1.0), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        try:
            await asyncio.wait_for(proc.wait(), grace)
            break
        except TimeoutError:
            continue
    try:  # the group may outlive its leader: make sure nothing of it is left
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


# --- the turn engine's view ----------------------------------------------------------------


class SessionToolHooks:
    """PreToolUse / PostToolUse / PostToolUseFailure for the turn engine (`core.execution.ToolHooks`)."""

    def __init__(self, runner: HookRunner) -> None:
        self.runner = runner

    async def before(self, call: Any) -> Any:
        from tether.core.execution import PreToolVerdict

        payload = self.runner.payload(
            "PreToolUse", tool_name=call.name, tool_input=dict(call.args), tool_call_id=call.tool_call_id
        )
        updated: dict[str, Any] = {}
        for result in await self.runner.run_sequential("PreToolUse", payload, call.name):
            if result.decision != "allow":  # block, or an error: a broken guard must not fail open
                return PreToolVerdict(blocked=result.feedback)
            new_input = result.specific_output().get("updatedInput")
            if isinstance(new_input, dict):
                updated.update(new_input)
        return PreToolVerdict(updated_args=updated or None)

    async def after(self, call: Any, result: Any) -> str | None:
        failed = result.is_error
        event = "PostToolUseFailure" if failed else "PostToolUse"
        fields: dict[str, Any] = {"tool_name": call.name, "tool_input": dict(call.args), "tool_call_id": call.tool_call_id}
        if failed:
            fields["error_message"] = result.output
        else:
            fields["tool_result"] = {"status": result.status, "output": result.output}
        notes: list[str] = []
        for r in await self.runner.run_parallel(event, self.runner.payload(event, **fields), call.name):
            context = r.specific_output().get("additionalContext")
            if isinstance(context, str) and context.strip():
                notes.append(context.strip())
            if r.decision != "allow":
                notes.append(r.feedback)
        return "\n".join(notes) or None


class SessionPermissionHooks:
    """PermissionRequest hooks: exit 2 denies, a clean exit 0 of every hook allows."""

    def __init__(self, runner: HookRunner) -> None:
        self.runner = runner

    async def decide(self, item: Any) -> tuple[str, str] | None:
        call = item.call
        if not self.runner.config.commands("PermissionRequest", call.name):
            return None
        payload = self.runner.payload(
            "PermissionRequest", tool_name=call.name, tool_input=item.args, tool_call_id=call.tool_call_id,
            permission={"type": "tool", "scope": call.name},
        )
        results = await self.runner.run_sequential("PermissionRequest", payload, call.name)
        if any(r.decision == "block" for r in results):
            return "deny", next(r.feedback for r in results if r.decision == "block")
        if results and all(r.decision == "allow" for r in results):
            return "allow", "allowed by a PermissionRequest hook"
        return None  # a failing hook decides nothing: the call stays `ask`
