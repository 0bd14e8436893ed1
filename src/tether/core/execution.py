"""Running one batch of admitted tool calls with the reference's concurrency rules.

Read-only calls run concurrently; writes are serialised per absolute path; shell, network and
unknown effects share one global lock. Results come back in the order the model proposed them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from contextlib import AsyncExitStack
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from tether.core.approvals import JudgedCall
from tether.core.tools import Effect, Tool, ToolContext, ToolResult, ToolRunContext
from tether.protocol.tool_calls import ToolReturn

if TYPE_CHECKING:
    from tether.core.approvals import DecideFn
    from tether.core.permissions import Decision

RESULT_CAP = 32_000
INTERRUPTED = "Interrupted by user"


RunContextFactory = Callable[[str], ToolRunContext]
# Asked when a hook rewrote a call's input into one that needs approval: True runs it.
ReaskFn = Callable[[JudgedCall, "Decision"], Awaitable[bool]]


@dataclass(frozen=True, slots=True)
class PreToolVerdict:
    blocked: str | None = None  # feedback when a hook blocked (or failed: a guard never fails open)
    updated_args: Mapping[str, Any] | None = None
    result: ToolResult | None = None  # the call is answered without running the tool (a mod)
    ask: str | None = None  # a hook wants a human's yes first: the approver is asked (reason)


class ToolHooks(Protocol):
    """Lifecycle hooks around one tool execution (PreToolUse / PostToolUse in settings)."""

    async def before(self, call: JudgedCall) -> PreToolVerdict: ...

    async def after(self, call: JudgedCall, result: ToolReturn) -> str | ToolReturn | None:
        """Text to append to the result the model reads (hook feedback, additional context),
        or a whole new result (a mod's `tool_end`)."""
        ...


class BatchLocks:
    """The locks one batch shares; the global exec lock is per batch runner instance."""

    def __init__(self) -> None:
        self.exec_lock = asyncio.Lock()
        self._paths: dict[Path, asyncio.Lock] = {}

    def for_path(self, path: Path) -> asyncio.Lock:
        return self._paths.setdefault(path, asyncio.Lock())


async def execute_batch(
    calls: list[JudgedCall],
    ctx: ToolContext,
    make_run_context: RunContextFactory,
    abort: asyncio.Event,
    on_result: Callable[[ToolReturn], None] | None = None,
    hooks: ToolHooks | None = None,
    decide: DecideFn | None = None,  # re-decides arguments a hook rewrote, in full
    reask: ReaskFn | None = None,  # who answers when the rewritten call needs approval
) -> list[ToolReturn]:
    locks = BatchLocks()

    async def one(call: JudgedCall) -> ToolReturn:
        result = await _run_locked(call, ctx, locks, make_run_context, abort, hooks, decide, reask)
        if on_result is not None:
            on_result(result)
        return result

    return list(await asyncio.gather(*(one(c) for c in calls)))


async def _run_locked(
    call: JudgedCall,
    ctx: ToolContext,
    locks: BatchLocks,
    make_run_context: RunContextFactory,
    abort: asyncio.Event,
    hooks: ToolHooks | None,
    decide: DecideFn | None = None,
    reask: ReaskFn | None = None,
) -> ToolReturn:
    if call.tool is None:
        available = ", ".join(sorted(ctx.tools))
        return _result(
            call, ToolResult(f"Tool not found: {call.name}. Available tools: {available}", True)
        )
    tool = call.tool
    async with AsyncExitStack() as stack:
        if tool.effect is Effect.WRITE:
            for path in sorted(set(tool.paths(call.args, ctx.cwd))):
                await stack.enter_async_context(locks.for_path(path))
        elif tool.effect is not Effect.READ:
            await stack.enter_async_context(locks.exec_lock)
        if abort.is_set():
            return _result(call, ToolResult(INTERRUPTED, True))
        answered: ToolResult | None = None
        if hooks is not None:
            verdict = await hooks.before(call)
            if verdict.blocked is not None:
                return _result(call, ToolResult(f"Error: Tool execution blocked by hook. {verdict.blocked}", True))
            if verdict.ask is not None:  # Claude Code's permissionDecision "ask": a human decides
                from tether.core.permissions import Decision

                asked = Decision("ask", verdict.ask, sticky=True)
                if reask is None or not await reask(call, asked):
                    return _result(call, ToolResult(
                        f"Error: a PreToolUse hook asked for approval, which was not given: {verdict.ask}", True))
            if verdict.updated_args is not None and verdict.result is None:
                call = replace(call, args={**call.args, **verdict.updated_args})
                refused = await _decide_rewritten(call, tool, ctx, decide, reask) if decide else None
                if isinstance(refused, ToolResult):
                    return _result(call, refused)
                call = refused or call
            answered = verdict.result
        run_ctx = make_run_context(call.tool_call_id)
        run_ctx.abort = abort
        run_ctx.confined = call.confined
        run_ctx.judged_paths = call.judged
        try:
            outcome = answered if answered is not None else await tool.run(call.args, run_ctx)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a tool bug becomes the model's error result, not a crash
            outcome = ToolResult(f"{type(exc).__name__}: {exc}", True)
    result = _result(call, outcome)
    if hooks is not None and (extra := await hooks.after(call, result)):
        if isinstance(extra, ToolReturn):
            result = extra
        else:
            result = replace(result, output=f"{result.output}\n\n{extra}")
    return result


async def _decide_rewritten(
    call: JudgedCall, tool: Tool, ctx: ToolContext, decide: DecideFn, reask: ReaskFn | None
) -> JudgedCall | ToolResult:
    """A hook's rewritten input is a new call, decided again in full: a deny stays a deny, an
    ask stays an ask (whoever answers approvals is asked again; with nobody to ask it does not
    run), and what the read-only auto-allow admits runs confined."""
    again = decide(tool, call.args, ctx)
    if again.verdict == "deny":
        return ToolResult(again.reason or "Tool execution denied.", True)
    if again.verdict == "ask":
        if reask is None or not await reask(call, again):
            return ToolResult(
                "Error: a PreToolUse hook rewrote this call's input, and the rewritten call needs "
                f"approval that was not given: {again.reason}", True)
        return replace(call, decision=again, confined=False)
    return replace(call, decision=again, confined=again.confine)


def _result(call: JudgedCall, outcome: ToolResult) -> ToolReturn:
    text = outcome.output
    if len(text) > RESULT_CAP:
        text = (
            text[:RESULT_CAP]
            + f"\n[output truncated: {len(outcome.output) - RESULT_CAP} more characters]"
        )
    return ToolReturn(
        tool_call_id=call.tool_call_id,
        tool_name=call.name,
        output=text,
        is_error=outcome.is_error,
        stdout=outcome.stdout,
        stderr=outcome.stderr,
        images=outcome.images,
    )
