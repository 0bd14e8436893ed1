"""The turn loop and batch execution, driven by an in-process scripted backend (no I/O)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping
from pathlib import Path
from typing import Any

import orjson

from tether.core.approvals import JudgedCall, classify_approvals
from tether.core.execution import execute_batch
from tether.core.permissions import Decision
from tether.core.tools import (
    Effect,
    ToolContext,
    ToolContextStore,
    ToolRegistry,
    ToolResult,
    ToolRunContext,
)
from tether.core.turn import ApprovalAnswer, TurnDeps, run_turn
from tether.protocol.chunks import (
    AssistantText,
    Chunk,
    StopReason,
    ToolCallRequest,
    UsageStatistics,
)
from tether.protocol.messages import TextPart, Usage, UserMessage
from tether.protocol.tool_calls import ToolCall
from tether.protocol.turns import ConversationRef, TurnInput


class Probe:
    """A tool that records when it starts and ends, so tests can see overlap and order."""

    def __init__(self, name: str, effect: Effect, log: list[str], delay: float = 0.05) -> None:
        self.name, self.effect, self.log, self.delay = name, effect, log, delay
        self.description = name
        self.parameters: dict[str, Any] = {"type": "object", "properties": {}, "required": ["key"]}

    def paths(self, args: Mapping[str, Any], cwd: Path) -> list[Path]:
        return [cwd / str(args.get("path", "x"))] if self.effect is Effect.WRITE else []

    async def run(self, args: Mapping[str, Any], ctx: ToolRunContext) -> ToolResult:
        self.log.append(f"start {args['key']}")
        await asyncio.sleep(self.delay)
        self.log.append(f"end {args['key']}")
        return ToolResult(f"ran {args['key']}")


class ScriptedBackend:
    def __init__(self, steps: list[list[Chunk]]) -> None:
        self.steps = steps
        self.inputs: list[TurnInput] = []
        self.recorded: list[TurnInput] = []

    async def send(self, conversation: ConversationRef, turn_input: TurnInput, ctx: ToolContext) -> AsyncIterator[Chunk]:
        self.inputs.append(turn_input)
        for chunk in self.steps.pop(0):
            yield chunk

    async def record(self, conversation: ConversationRef, turn_input: TurnInput) -> None:
        self.recorded.append(turn_input)


class AllowAll:
    async def ask(self, item: JudgedCall, ctx: ToolContext) -> ApprovalAnswer:
        return ApprovalAnswer(True)


def call(cid: str, name: str, **args: Any) -> ToolCallRequest:
    return ToolCallRequest(ToolCall.parse(cid, name, orjson.dumps(args).decode()))


def admitted(cid: str, name: str, tool: Any, args: dict[str, Any]) -> JudgedCall:
    return JudgedCall.of(ToolCall(cid, name, args), tool, Decision("allow", "test"))


def step(*chunks: Chunk, stop: str) -> list[Chunk]:
    return [*chunks, UsageStatistics(Usage(10, 2)), StopReason(stop)]  # type: ignore[arg-type]


def make_deps(backend: ScriptedBackend, registry: ToolRegistry, events: list[Any], **kw: Any) -> TurnDeps:
    store = ToolContextStore()
    return TurnDeps(
        backend=backend,
        snapshot=lambda: store.snapshot(registry, Path("/tmp"), "unrestricted"),
        decide=lambda tool, args, ctx: Decision("allow", "test"),
        approver=AllowAll(),
        make_run_context=lambda cid: ToolRunContext(cwd=Path("/tmp"), tool_call_id=cid),
        emit=events.append,
        **kw,
    )


USER = UserMessage("u1", (TextPart("go"),), 0)
CONV = ConversationRef("agent-x", "local-conv-1")


def test_reads_run_concurrently_and_results_keep_input_order() -> None:
    log: list[str] = []
    registry = ToolRegistry()
    registry.register(Probe("Look", Effect.READ, log))
    ctx = ToolContextStore().snapshot(registry, Path("/tmp"), "unrestricted")
    tool = ctx.tools["Look"]
    calls = [admitted(f"c{i}", "Look", tool, {"key": i}) for i in range(3)]
    results = asyncio.run(execute_batch(calls, ctx, lambda cid: ToolRunContext(Path("/tmp"), cid), asyncio.Event()))
    assert [r.tool_call_id for r in results] == ["c0", "c1", "c2"]
    assert log[:3] == ["start 0", "start 1", "start 2"]  # all started before any ended


def test_writes_serialise_per_path_and_exec_under_one_lock() -> None:
    log: list[str] = []
    registry = ToolRegistry()
    registry.register(Probe("Put", Effect.WRITE, log))
    registry.register(Probe("Sh", Effect.EXEC, log))
    ctx = ToolContextStore().snapshot(registry, Path("/tmp"), "unrestricted")
    put, sh = ctx.tools["Put"], ctx.tools["Sh"]
    calls = [
        admitted("a", "Put", put, {"key": "a1", "path": "same"}),
        admitted("b", "Put", put, {"key": "a2", "path": "same"}),
        admitted("c", "Put", put, {"key": "other", "path": "elsewhere"}),
        admitted("d", "Sh", sh, {"key": "s1"}),
        admitted("e", "Sh", sh, {"key": "s2"}),
    ]
    asyncio.run(execute_batch(calls, ctx, lambda cid: ToolRunContext(Path("/tmp"), cid), asyncio.Event()))
    assert log.index("end a1") < log.index("start a2")  # same path: one after the other
    assert log.index("start other") < log.index("end a1")  # another path: alongside
    assert log.index("end s1") < log.index("start s2")  # shell: one global lock


def test_unknown_tool_and_missing_arguments_are_answered_not_run() -> None:
    log: list[str] = []
    registry = ToolRegistry()
    registry.register(Probe("Look", Effect.READ, log))
    ctx = ToolContextStore().snapshot(registry, Path("/tmp"), "unrestricted")
    items = classify_approvals(
        [ToolCall.parse("c1", "Look", "{not json"), ToolCall.parse("c2", "", "{}"), call("c3", "Nope").call],
        ctx, lambda t, a, c: Decision("allow", "x"),
    )
    assert items[0].verdict == "deny" and "missing required parameter(s): key" in items[0].decision.reason
    assert "not valid JSON" in items[0].decision.reason
    assert items[1].decision.reason == "Tool call incomplete - missing name"
    assert items[2].tool is None and items[2].verdict == "allow"
    result = asyncio.run(execute_batch([admitted("c3", "Nope", None, {})], ctx,
                                       lambda cid: ToolRunContext(Path("/tmp"), cid), asyncio.Event()))
    assert result[0].is_error and result[0].output == "Tool not found: Nope. Available tools: Look"


def test_loop_runs_tools_then_finishes_and_counts_steps() -> None:
    log: list[str] = []
    registry = ToolRegistry()
    registry.register(Probe("Look", Effect.READ, log, delay=0))
    backend = ScriptedBackend([step(call("c1", "Look", key=1), stop="requires_approval"),
                               step(AssistantText("o1", "done"), stop="end_turn")])
    events: list[Any] = []
    outcome = asyncio.run(run_turn(make_deps(backend, registry, events), CONV, USER))
    assert outcome.stop_reason == "end_turn" and outcome.steps == 2 and outcome.result_text == "done"
    assert backend.inputs[1].approvals[0].output == "ran 1" and backend.inputs[1].user is None


def test_max_turns_answers_pending_calls_durably_before_stopping() -> None:
    registry = ToolRegistry()
    registry.register(Probe("Look", Effect.READ, [], delay=0))
    backend = ScriptedBackend([step(call("c1", "Look", key=1), stop="requires_approval")])
    outcome = asyncio.run(run_turn(make_deps(backend, registry, [], max_turns=1), CONV, USER))
    assert outcome.stop_reason == "max_steps"
    assert [a.tool_call_id for a in backend.recorded[0].approvals] == ["c1"]


def test_tool_context_snapshot_is_immune_to_later_registration() -> None:
    registry = ToolRegistry()
    registry.register(Probe("Look", Effect.READ, []))
    store = ToolContextStore(capacity=2)
    first = store.snapshot(registry, Path("/tmp"), "standard")
    registry.register(Probe("Late", Effect.READ, []))
    assert "Late" not in first.tools and "Late" in store.snapshot(registry, Path("/tmp"), "standard").tools
    store.snapshot(registry, Path("/tmp"), "standard")
    assert store.get(first.id) is None  # evicted past capacity: an unknown id, never the live registry
