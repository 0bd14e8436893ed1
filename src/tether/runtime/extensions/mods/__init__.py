"""Mods: Python extensions run in-process (reference §10), and the session's bridge to them.

`load_mods(prepared)` discovers and activates the session's mods; the `ModSession` it returns
plugs them into each turn (`attach(deps)`): mod permission checks wrap `decide`, `tool_start` /
`tool_end` wrap the settings hooks around every execution, and the turn events
(`core.turn.TurnEvents`) carry `turn_start`, `turn_end`, `llm_start` and `llm_end`.

Permission checks run after `decide()` and may tighten anything, lift only a plain `ask` to
`allow`, never lift a deny, and turn an `alwaysAsk` into nothing but a deny. A check that raises
fails its mod and denies the call: a broken guard never fails open.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tether.core.approvals import JudgedCall
from tether.core.execution import PreToolVerdict, ToolHooks
from tether.core.permissions import Decision
from tether.core.tools import Tool, ToolContext
from tether.protocol.chunks import StopReason
from tether.protocol.messages import TextPart, UserMessage
from tether.protocol.tool_calls import ToolReturn
from tether.protocol.turns import TurnInput
from tether.runtime.extensions.mods.api import (
    EventContext,
    ModApi,
    ModHost,
    ModTool,
    capabilities_for,
    normalize_result,
)
from tether.runtime.extensions.mods.engine import (
    Diagnostic,
    ModEngine,
    Owner,
    discover,
    mods_disabled,
)
from tether.runtime.extensions.mods.load_record import record_load

if TYPE_CHECKING:
    from tether.core.approvals import DecideFn
    from tether.core.turn import TurnOutcome
    from tether.runtime.session.prepared import Prepared

__all__ = ["ModEngine", "ModHost", "ModSession", "combine_decision", "load_mods"]

_ANSWERS = ("allow", "ask", "alwaysAsk", "deny")


def combine_decision(current: Decision, answer: str, reason: str) -> Decision:
    """One check's answer applied to the decision so far (the rules in the module docstring)."""
    if current.verdict == "deny":
        return current
    if answer == "deny":
        return Decision("deny", reason or "Permission denied by a mod")
    if current.sticky:  # an alwaysAsk: only a deny moves it
        return current
    if answer == "alwaysAsk":
        return Decision("ask", reason or "a mod always asks for this call", sticky=True)
    if answer == "ask" and current.verdict == "allow":
        return Decision("ask", reason or "a mod asks for this call")
    if answer == "allow" and current.verdict == "ask":
        return Decision("allow", reason or "allowed by a mod")
    return current


def _parse_answer(value: Any) -> tuple[str, str] | None:
    answer: Any
    if value is None:
        return None
    if isinstance(value, str):
        answer, reason = value, ""
    elif isinstance(value, Mapping):
        answer, reason = value.get("decision"), str(value.get("reason") or "")
    else:
        raise TypeError(f"a permission check must return a decision string, a {{decision, reason}} dict or None, not {value!r}")
    if answer not in _ANSWERS:
        raise TypeError(f"unknown permission decision {answer!r}; use one of {', '.join(_ANSWERS)}")
    return str(answer), reason


class ModSession:
    """The loaded mods of one session and the turn engine's view of them."""

    def __init__(self, engine: ModEngine, host: ModHost, *, model: str = "",
                 message_count: Callable[[], int] | None = None) -> None:
        self.engine = engine
        self.host = host
        self.model = model
        self.message_count = message_count
        self.opened = False
        self._reason = "startup"  # what the next conversation_open says
        self._llm_started = 0.0
        self.after_load: Callable[[], None] | None = None  # records what `mods list` shows

    # --- wiring (`Prepared.turn_deps` puts `guard`, `ModToolHooks` and these events in a turn) ---

    def ctx(self, owner: Owner) -> EventContext:
        h = self.host
        return EventContext(owner.name, owner.signal, h.cwd, h.agent_id, h.conversation_id)

    async def emit(self, event: str, payload: dict[str, Any], on_result: Callable[[Owner, Any], bool] | None = None) -> None:
        await self.engine.emit(event, payload, on_result, self.ctx)

    def reload(self) -> int:
        generation = self.engine.reload()
        if self.after_load is not None:
            self.after_load()
        self.opened = False  # the next turn tells the new generation: conversation_open{reload}
        self._reason = "reload"
        return generation

    # --- permissions -----------------------------------------------------------------------

    def guard(self, decide: DecideFn) -> DecideFn:
        def guarded(tool: Tool, args: Mapping[str, Any], ctx: ToolContext) -> Decision:
            return self.check(tool, args, ctx, decide(tool, args, ctx))

        guarded.inner = decide  # type: ignore[attr-defined]
        return guarded

    def check(self, tool: Tool, args: Mapping[str, Any], ctx: ToolContext, decision: Decision) -> Decision:
        if isinstance(tool, ModTool):
            decision = _tool_policy(tool, decision, ctx.permission_mode)
        for owner in self.engine.live_owners():
            for check_id, check in list(owner.checks):
                if decision.verdict == "deny":
                    return decision
                event = {
                    "toolName": tool.name, "args": dict(args), "cwd": str(ctx.cwd),
                    "permissionMode": ctx.permission_mode, "reason": decision.reason,
                    "decision": "alwaysAsk" if decision.sticky else decision.verdict,
                }
                try:
                    parsed = _parse_answer(check(event, self.ctx(owner)))
                except Exception as exc:
                    self.engine.fail(owner, "event", RuntimeError(f"permission check {check_id}: {type(exc).__name__}: {exc}"))
                    return Decision("deny", f"Permission denied: the permission check {check_id} of mod {owner.name} failed")
                if parsed is not None:
                    answer, reason = parsed
                    decision = combine_decision(decision, answer, reason or f"{answer} by mod {owner.name} ({check_id})")
        return decision

    # --- core.turn.TurnEvents --------------------------------------------------------------

    async def open(self, reason: str = "startup") -> None:
        self.opened = True
        await self.emit("conversation_open", {"reason": reason, **self._ids()})

    async def close(self) -> None:
        """End of the session: conversation_close, then every mod is disposed."""
        if self.opened:
            await self.emit("conversation_close", self._ids())
        self.engine.dispose_all()

    async def turn_start(self, user: UserMessage) -> UserMessage | str:
        if not self.opened:
            await self.open(self._reason)
        payload: dict[str, Any] = {"input": _text(user), **self._ids()}
        cancelled: list[str] = []

        def take(owner: Owner, result: Any) -> bool:
            if not isinstance(result, Mapping):
                return False
            cancel = result.get("cancel")
            if cancel:
                why = cancel.get("reason") if isinstance(cancel, Mapping) else cancel if isinstance(cancel, str) else ""
                cancelled.append(f"Turn cancelled by mod {owner.name}" + (f": {why}" if why else ""))
                return True
            if isinstance(result.get("input"), str):
                payload["input"] = result["input"]
            return False

        await self.emit("turn_start", payload, take)
        if cancelled:
            return cancelled[0]
        if payload["input"] == _text(user):
            return user
        others = tuple(p for p in user.content if not isinstance(p, TextPart))
        return replace(user, content=(TextPart(payload["input"]), *others))

    async def turn_end(self, outcome: TurnOutcome) -> str | None:
        found: list[str] = []

        def take(owner: Owner, result: Any) -> bool:
            follow = result.get("continue") if isinstance(result, Mapping) else None
            if isinstance(follow, str) and follow.strip():
                found.append(follow)
                return True
            return False

        await self.emit("turn_end", {"stopReason": outcome.stop_reason, "assistantMessage": outcome.last_text,
                                     **self._ids()}, take)
        return found[0] if found else None

    async def llm_start(self, turn_input: TurnInput) -> None:
        self._llm_started = time.monotonic()
        if not self.engine.has_handlers("llm_start"):
            return
        count = self.message_count() if self.message_count is not None else None
        await self.emit("llm_start", {"model": self.model, "messageCount": count, "contextWindow": None})

    async def llm_end(self, stop: StopReason | None, outcome: TurnOutcome) -> None:
        if not self.engine.has_handlers("llm_end"):
            return
        u = outcome.usage
        payload: dict[str, Any] = {
            "stopReason": stop.stop_reason if stop is not None else outcome.stop_reason,
            "usage": {"inputTokens": u.input_tokens, "outputTokens": u.output_tokens,
                      "cacheReadTokens": u.cache_read_tokens, "cacheWriteTokens": u.cache_write_tokens,
                      "reasoningTokens": u.reasoning_tokens},
            "durationMs": int((time.monotonic() - self._llm_started) * 1000),
        }
        if outcome.error is not None:
            payload["error"] = outcome.error.message
        await self.emit("llm_end", payload)

    # --- compaction (called by the compactor around a compaction) ----------------------------

    async def compact_start(self, trigger: str, counts: Mapping[str, int]) -> None:
        await self.emit("compact_start", {"trigger": trigger, "counts": dict(counts)})

    async def compact_end(self, trigger: str, counts: Mapping[str, int]) -> None:
        await self.emit("compact_end", {"trigger": trigger, "counts": dict(counts)})

    def _ids(self) -> dict[str, Any]:
        return {"agentId": self.host.agent_id, "conversationId": self.host.conversation_id}


def _tool_policy(tool: ModTool, decision: Decision, mode: str) -> Decision:
    """A mod tool's approval policy: `auto` lifts the default ask, `alwaysAsk` always asks."""
    if decision.verdict == "deny" or decision.sticky:
        return decision
    if tool.approval_policy == "alwaysAsk":
        return Decision("ask", f"{tool.name} always asks (approval policy of mod {tool.mod})", sticky=True)
    if tool.approval_policy == "auto" and decision.verdict == "ask" and decision.matched_rule is None and mode != "strict":
        return Decision("allow", f"{tool.name} runs without approval (approval policy of mod {tool.mod})")
    return decision


def _text(user: UserMessage) -> str:
    return "".join(p.text for p in user.content if isinstance(p, TextPart))


class ModToolHooks:
    """`tool_start` / `tool_end` around the settings hooks (`core.execution.ToolHooks`)."""

    def __init__(self, session: ModSession, inner: ToolHooks | None) -> None:
        self.session = session
        self.inner = inner

    async def before(self, call: JudgedCall) -> PreToolVerdict:
        payload: dict[str, Any] = {"toolName": call.name, "args": dict(call.args), "toolCallId": call.tool_call_id}
        answered: list[Any] = []
        rewritten = False

        def take(owner: Owner, result: Any) -> bool:
            nonlocal rewritten
            if not isinstance(result, Mapping):
                return False
            if "result" in result and result["result"] is not None:
                answered.append(result["result"])
                return True
            if isinstance(result.get("args"), Mapping):
                payload["args"], rewritten = dict(result["args"]), True
            return False

        await self.session.emit("tool_start", payload, take)
        updated = payload["args"] if rewritten else None
        if answered:
            return PreToolVerdict(result=normalize_result(answered[0]))
        if self.inner is None:
            return PreToolVerdict(updated_args=updated)
        verdict = await self.inner.before(replace(call, args=updated) if updated is not None else call)
        if verdict.blocked is not None or verdict.result is not None:
            return verdict
        merged = {**(updated or {}), **(verdict.updated_args or {})}
        return PreToolVerdict(updated_args=merged or None, ask=verdict.ask)

    async def after(self, call: JudgedCall, result: ToolReturn) -> str | ToolReturn | None:
        payload = {"toolName": call.name, "args": dict(call.args), "toolCallId": call.tool_call_id,
                   "status": result.status, "output": result.output}
        replaced: list[Any] = []

        def take(owner: Owner, value: Any) -> bool:
            if isinstance(value, Mapping) and value.get("result") is not None:
                replaced.append(value["result"])
                return True
            return False

        await self.session.emit("tool_end", payload, take)
        new = result
        if replaced:
            outcome = normalize_result(replaced[0])
            new = replace(result, output=outcome.output, is_error=outcome.is_error,
                          stdout=outcome.stdout, stderr=outcome.stderr)
        extra = await self.inner.after(call, new) if self.inner is not None else None
        if isinstance(extra, ToolReturn):
            return extra
        if extra:
            return replace(new, output=f"{new.output}\n\n{extra}") if replaced else extra
        return new if replaced else None


def print_diagnostic(diagnostic: Diagnostic) -> None:
    print(diagnostic.line(), file=sys.stderr, flush=True)


def load_mods(prepared: Prepared) -> ModSession | None:
    """Discover and activate the session's mods (None when mods are off for this run)."""
    env = prepared.env
    if getattr(prepared.flags, "no_mods", False) or mods_disabled(env):
        return None
    home, cwd = prepared.store.home, prepared.cwd
    agent_id = prepared.session.agent.id
    trust = prepared.settings.trust
    if trust is None:  # no project settings files: the folder's own trust (or --trust) decides
        from tether.runtime.policy.trust import TrustStore

        trust = "trusted" if prepared.flags.trust else TrustStore(home).state(cwd)
    trusted = trust == "trusted"
    keep = set(prepared.flags.tools) if prepared.flags.tools is not None else None
    host = ModHost(
        registry=lambda: prepared.registry,
        cwd=cwd,
        agent_id=agent_id,
        conversation_id=prepared.session.conversation_id,
        capabilities=capabilities_for(env.get("TETHER_MOD_CAPABILITY_PROFILE")),
        tool_allowed=(lambda name: name in keep) if keep is not None else (lambda name: True),
    )
    specs: dict[str, Any] = {}  # the last discovery's active mods by name (for the load record)

    def discovered() -> Any:
        found = discover(home, cwd, env, agent_id=agent_id, project_trusted=trusted)
        specs.clear()
        specs.update((s.name, s) for s in found.active)
        return found

    def report(diagnostic: Diagnostic) -> None:
        print_diagnostic(diagnostic)
        spec = specs.get(diagnostic.mod)
        if diagnostic.phase == "event" and spec is not None:  # a mod failing mid-session
            record_load(home, (), [(spec, diagnostic)])

    engine = ModEngine(discovered, lambda eng, owner: ModApi(eng, owner, host), report=report)

    def message_count() -> int:
        return len(prepared.store.transcript(agent_id, prepared.session.conversation_id).load())

    session = ModSession(engine, host, model=prepared.session.model, message_count=message_count)
    engine.load()
    session.after_load = lambda: _record(engine, home, specs)
    session.after_load()
    for note in engine.notes:
        print(f"tether: {note}", file=sys.stderr)
    return session


def _record(engine: ModEngine, home: Path, specs: Mapping[str, Any]) -> None:
    """What `tether mods list` shows as failed: this load's import/activate failures."""
    failed = {d.mod: d for d in engine.diagnostics
              if d.generation == engine.generation and d.phase in ("import", "activate")}
    loaded = {o.name for o in engine.owners}
    record_load(home, [s for n, s in specs.items() if n in loaded],
                [(specs[n], d) for n, d in failed.items() if n in specs])
