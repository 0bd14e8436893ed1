"""Hooks: user commands run at lifecycle points, configured in settings (reference §9).

A command hook is a shell command that gets the event as JSON on stdin (the reference's fields
and Claude Code's: `hook_event_name`, `cwd`, `tool_use_id`, `tool_response`). Exit 0 allows,
exit 2 blocks (stderr goes back to the model), anything else is an error. On exit 0, stdout in
Claude Code's JSON shape decides (`runtime/extensions/hook_output.py`): a deny or block there blocks even
with exit 0, and JSON tether cannot read is an error. tether treats a PreToolUse error as a
block: a crashing guard never lets a call through. Timeouts send SIGTERM to the hook's process
group, then SIGKILL a second later. The turn engine's adapters are in `runtime/extensions/hook_adapters.py`.

A prompt hook asks the session's model (or the hook's `model`) to judge the event: the reply
must be JSON `{"ok": true}` (allow) or `{"ok": false, "reason": "…"}` (block); anything else,
a provider failure or the timeout (30 s) is an error.

Every frontend runs the tool and permission hooks (`hook_adapters.py`), PreCompact and
SubagentStop; SessionStart, UserPromptSubmit, Stop and SessionEnd run in the TUI, headless `-p`
and the SDK's stream-json session alike, each read by `runtime/extensions/turn_hooks.py` (the reference
runs those in its TUI only). Notification hooks are accepted in settings; no frontend raises
that event yet.
"""

from __future__ import annotations

import asyncio
import os
import re
import signal
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import orjson

from tether.errors import UsageError
from tether.runtime.extensions.hook_output import HookOutput, HookOutputError, parse_hook_output

TOOL_EVENTS = ("PreToolUse", "PostToolUse", "PostToolUseFailure", "PermissionRequest")
SIMPLE_EVENTS = (
    "UserPromptSubmit", "Notification", "Stop", "SubagentStop", "PreCompact", "SessionStart", "SessionEnd",
)
EVENTS = TOOL_EVENTS + SIMPLE_EVENTS
DEFAULT_TIMEOUT_S = 60.0
PROMPT_TIMEOUT_S = 30.0
PROMPT_LABEL = "prompt hook"
_SCRUBBED_ENV = (
    "TETHER_AGENT_ID", "AGENT_ID", "TETHER_CONVERSATION_ID", "CONVERSATION_ID",
    "TETHER_MEMORY_DIR", "MEMORY_DIR",
)

Decision = Literal["allow", "block", "error"]
# (prompt text, model override or None, timeout) -> the model's reply text; raises on failure
ModelCall = Callable[[str, str | None, float], Awaitable[str]]


@dataclass(frozen=True, slots=True)
class HookCommand:
    command: str
    timeout_s: float = DEFAULT_TIMEOUT_S
    quiet: bool = False


@dataclass(frozen=True, slots=True)
class HookPrompt:
    prompt: str  # `$ARGUMENTS` is replaced by the event JSON (appended when absent)
    model: str | None = None  # a handle (`openai/gpt-5.5`) or a model id of the session's provider
    timeout_s: float = PROMPT_TIMEOUT_S
    quiet: bool = False

    @property
    def command(self) -> str:
        return PROMPT_LABEL


Hook = HookCommand | HookPrompt


@dataclass(frozen=True, slots=True)
class HookGroup:
    matcher: str | None  # None / "" / "*": every tool
    hooks: tuple[Hook, ...]

    def matches(self, tool_name: str | None) -> bool:
        """The matcher against the tool's name and its family's canonical name, the one
        permission rules use: a `Bash` guard also guards `exec_command`, `shell` and the other
        toolsets' shells, an `Edit` guard `apply_patch` (the hook input keeps the real name)."""
        if not self.matcher or self.matcher == "*" or tool_name is None:
            return True
        from tether.core.permissions.rules import canonical_tool_name

        names = dict.fromkeys((tool_name, canonical_tool_name(tool_name)))
        try:
            return any(re.fullmatch(f"(?:{self.matcher})", name) is not None for name in names)
        except re.error:  # an invalid pattern matches its own text exactly, as the reference does
            return self.matcher in names


@dataclass(frozen=True, slots=True)
class HookConfig:
    events: Mapping[str, tuple[HookGroup, ...]] = field(default_factory=dict)
    disabled: bool = False

    def commands(self, event: str, tool_name: str | None = None) -> list[Hook]:
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
    output: HookOutput = HookOutput()  # the JSON decisions of an exit-0 hook

    @property
    def feedback(self) -> str:
        if self.decision == "block":
            return f"[{self.command}]: {self.output.block_reason or self.stderr.strip()}"
        if self.decision == "error":
            why = self.stderr.strip() or (
                f"exit code {self.exit_code}" if self.exit_code is not None else "did not finish"
            )
            return f"Hook error: [{self.command}]: {why}"
        return ""

    @property
    def plain_text(self) -> str:
        """Exit-0 stdout that is not hook JSON (context for UserPromptSubmit / SessionStart)."""
        return "" if self.output.is_json or self.decision != "allow" else self.stdout.strip()

    @property
    def context(self) -> str:
        """What this hook adds for the model: additionalContext, else its plain stdout."""
        return self.output.context or self.plain_text


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
    hooks: list[Hook] = []
    for j, h in enumerate(raw["hooks"]):
        at = f"{where}.hooks[{j}]"
        if not isinstance(h, dict):
            raise UsageError(f"{at} must be an object")
        prompt = h.get("type") == "prompt"
        timeout = h.get("timeout", PROMPT_TIMEOUT_S if prompt else DEFAULT_TIMEOUT_S)
        if isinstance(timeout, bool) or not isinstance(timeout, int | float) or timeout <= 0:
            raise UsageError(f"{at}.timeout must be a positive number of seconds")
        quiet = bool(h.get("quiet", False))
        if prompt:
            if not isinstance(h.get("prompt"), str) or not h["prompt"].strip():
                raise UsageError(f"{at} must be {{\"type\": \"prompt\", \"prompt\": \"... $ARGUMENTS ...\"}}")
            model = h.get("model")
            if model is not None and (not isinstance(model, str) or not model.strip()):
                raise UsageError(f"{at}.model must be a model handle such as anthropic/claude-opus-4-8")
            hooks.append(HookPrompt(h["prompt"], model, float(timeout), quiet))
            continue
        if h.get("type") != "command" or not isinstance(h.get("command"), str) or not h["command"].strip():
            raise UsageError(
                f"{at} must be {{\"type\": \"command\", \"command\": \"...\"}} "
                "or {\"type\": \"prompt\", \"prompt\": \"...\"}"
            )
        hooks.append(HookCommand(h["command"], float(timeout), quiet))
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

    def __init__(
        self,
        config: HookConfig,
        *,
        cwd: Path,
        agent_id: str | None,
        session_id: str | None,
        ask_model: ModelCall | None = None,
    ) -> None:
        self.config = config
        self.cwd = cwd
        self.agent_id = agent_id
        self.session_id = session_id
        self.ask_model = ask_model  # prompt hooks; None: they report an error (never allow)
        # Set by a hook's `continue: false`: from then on no tool call of the session runs.
        self.stopped: str | None = None
        from tether.runtime.extensions.hook_scripts import ScriptWatch

        self.scripts = ScriptWatch(config, cwd)  # hook scripts absent at the start

    def payload(self, event: str, **fields: Any) -> dict[str, Any]:
        # The reference's names, and Claude Code's beside them so its hook scripts read theirs.
        base: dict[str, Any] = {"event_type": event, "working_directory": str(self.cwd),
                                "hook_event_name": event, "cwd": str(self.cwd)}
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

    async def _run_one(self, hook: Hook, event: str, payload: dict[str, Any]) -> HookResult:
        if isinstance(hook, HookPrompt):
            return await self._run_prompt(hook, payload)
        planted = self.scripts.appeared(hook.command)
        if planted is not None:
            return HookResult(hook.command, "error", "", f"not run: {planted} did not exist when "
                              "this session started and may have been written by the agent; "
                              "review it, then start a new session", None)
        env = {k: v for k, v in os.environ.items() if k not in _SCRUBBED_ENV}
        env.update(TETHER_HOOK_EVENT=event, TETHER_WORKING_DIR=str(self.cwd), USER_CWD=str(self.cwd),
                   CLAUDE_PROJECT_DIR=str(self.cwd))
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
        return command_result(hook.command, event, proc.returncode, out.decode(errors="replace"),
                              err.decode(errors="replace"))

    async def _run_prompt(self, hook: HookPrompt, payload: dict[str, Any]) -> HookResult:
        if self.ask_model is None:
            return HookResult(PROMPT_LABEL, "error", "", "no model is available to this session", None)
        arguments = orjson.dumps(payload).decode()
        if "$ARGUMENTS" in hook.prompt:
            text = hook.prompt.replace("$ARGUMENTS", arguments)
        else:
            text = f"{hook.prompt}\n\nARGUMENTS: {arguments}"
        try:
            reply = await asyncio.wait_for(self.ask_model(text, hook.model, hook.timeout_s), hook.timeout_s)
        except TimeoutError:
            return HookResult(PROMPT_LABEL, "error", "", f"timed out after {hook.timeout_s:g} s", None)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a provider failure decides nothing, and never allows
            return HookResult(PROMPT_LABEL, "error", "", f"the model call failed: {exc}", None)
        verdict = _prompt_verdict(reply)
        if verdict is None:
            return HookResult(PROMPT_LABEL, "error", reply, f"the model did not answer with {{ok, reason}} JSON: {reply[:200]!r}", None)
        ok, reason = verdict
        if ok:
            return HookResult(PROMPT_LABEL, "allow", "", reason, 0)
        return HookResult(PROMPT_LABEL, "block", "", reason or "blocked by a prompt hook", 2)

    # --- simple events: each returns its hooks' results, read by `runtime/extensions/turn_hooks.py` -------

    async def user_prompt_submit(self, prompt: str, *, is_command: bool = False) -> list[HookResult]:
        """Before a prompt is sent: a block keeps it from the model; exit-0 stdout is context."""
        payload = self.payload("UserPromptSubmit", prompt=prompt, is_command=is_command)
        return await self.run_sequential("UserPromptSubmit", payload)

    async def stop(
        self,
        stop_reason: str,
        *,
        message_count: int | None = None,
        tool_call_count: int | None = None,
        assistant_message: str | None = None,
        user_message: str | None = None,
        stop_hook_active: bool | None = None,
    ) -> list[HookResult]:
        """When the agent finishes answering: a block sends its feedback back as a user message
        (`stop_hook_active`: this answer followed such a continuation, Claude Code's loop guard)."""
        optional = {"message_count": message_count, "tool_call_count": tool_call_count,
                    "assistant_message": assistant_message, "user_message": user_message,
                    "stop_hook_active": stop_hook_active}
        payload = self.payload("Stop", stop_reason=stop_reason, **{k: v for k, v in optional.items() if v is not None})
        return await self.run_sequential("Stop", payload)

    async def session_start(self, *, is_new_session: bool, agent_name: str | None = None) -> list[HookResult]:
        extra = {"agent_name": agent_name} if agent_name else {}
        payload = self.payload("SessionStart", is_new_session=is_new_session, **extra)
        return await self.run_sequential("SessionStart", payload)

    async def session_end(self, *, reason: str | None = None) -> list[HookResult]:
        payload = self.payload("SessionEnd", **({"reason": reason} if reason else {}))
        return await self.run_parallel("SessionEnd", payload)

    async def pre_compact(
        self, *, trigger: str, context_length: int | None = None, max_context_length: int | None = None
    ) -> list[HookResult]:
        """Before a compaction (headless too); informational: it cannot stop the compaction."""
        optional = {"context_length": context_length, "max_context_length": max_context_length}
        payload = self.payload("PreCompact", trigger=trigger, **{k: v for k, v in optional.items() if v is not None})
        return await self.run_parallel("PreCompact", payload)

    async def subagent_stop(self, *, subagent_type: str, subagent_id: str, success: bool,
                            error: str | None = None) -> list[HookResult]:
        """A subagent ended (fire-and-forget: nothing it says changes the parent's turn)."""
        payload = self.payload("SubagentStop", subagent_type=subagent_type, subagent_id=subagent_id,
                               success=success, **({"error": error} if error else {}))
        return await self.run_parallel("SubagentStop", payload)


def _prompt_verdict(reply: str) -> tuple[bool, str] | None:
    """`{ok, reason?}` from the model's reply: the whole text, else the first {...} in it."""
    text = reply.strip()
    candidates = [text]
    start, end = text.find("{"), text.rfind("}")
    if 0 <= start < end:
        candidates.append(text[start : end + 1])
    for candidate in candidates:
        try:
            doc = orjson.loads(candidate)
        except orjson.JSONDecodeError:
            continue
        if isinstance(doc, dict) and isinstance(doc.get("ok"), bool):
            reason = doc.get("reason")
            return doc["ok"], reason if isinstance(reason, str) else ""
    return None


_JUDGE_SYSTEM = (
    "You evaluate a hook of a coding agent. Read the event and the instructions, then reply with "
    'one JSON object and nothing else: {"ok": true} to let it proceed, or '
    '{"ok": false, "reason": "<why, addressed to the agent>"} to block it.'
)


def provider_model_call(provider: Any, model_id: str, home: Path, env: Mapping[str, str]) -> ModelCall:
    """Prompt hooks ask the session's provider; a hook's `model` names another model or handle."""

    async def ask(text: str, model: str | None, timeout_s: float) -> str:
        from tether.protocol.chunks import AssistantText, ErrorChunk, now_ms
        from tether.protocol.llm import ProviderRequest
        from tether.protocol.messages import TextPart, UserMessage

        chosen, chosen_model = provider, model_id
        if model and "/" in model:
            from tether.providers.catalog import parse_handle, resolve_provider

            chosen, chosen_model = resolve_provider(model, home, env), parse_handle(model)[1]
        elif model:
            chosen_model = model
        request = ProviderRequest(
            model=chosen_model, system=_JUDGE_SYSTEM, max_tokens=1024,
            messages=(UserMessage(f"hook-msg-{now_ms()}", (TextPart(text),), now_ms()),),
        )
        parts: list[str] = []
        async for chunk in chosen.stream(request):
            if isinstance(chunk, AssistantText):
                parts.append(chunk.content)
            elif isinstance(chunk, ErrorChunk):
                raise RuntimeError(chunk.message)
        return "".join(parts)

    return ask


def command_result(command: str, event: str, code: int | None, stdout: str, stderr: str) -> HookResult:
    """Exit 2 blocks, other non-zero is an error; on exit 0 the JSON output decides."""
    if code != 0:
        return HookResult(command, "block" if code == 2 else "error", stdout, stderr, code)
    try:
        output = parse_hook_output(stdout, event)
    except HookOutputError as exc:
        why = f"{stderr.strip()}\n{exc}".strip()
        return HookResult(command, "error", stdout, why, code)
    decision: Decision = "block" if output.block_reason is not None else "allow"
    return HookResult(command, decision, stdout, stderr, code, output)


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


# The turn engine's adapters live beside this module; imported here so callers keep one name.
from tether.runtime.extensions.hook_adapters import SessionPermissionHooks, SessionToolHooks  # noqa: E402

__all__ = ["EVENTS", "HookConfig", "HookResult", "HookRunner",
           "SessionPermissionHooks", "SessionToolHooks", "command_result", "merge_hooks",
           "parse_hooks", "provider_model_call"]
