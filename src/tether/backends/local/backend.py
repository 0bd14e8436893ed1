"""The local backend: conversations on disk, one provider call per send (reference §4.4).

A send settles orphaned tool calls (unless it carries approvals), appends the input at a step
boundary, calls the provider once, stamps the chunks with a fresh run id, and appends the
assistant message once the provider call finished. Provider failures become an `error_message`
chunk and a `llm_api_error` stop; a stream that ends without a stop reason is an error.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any, Protocol

import orjson

from tether.backends.local.compaction import (
    Compacted,
    CompactionFailed,
    CompactionSettings,
    Compactor,
    is_overflow,
)
from tether.backends.local.transcript import settle_orphaned_tool_calls
from tether.backends.store_api import ConversationStore, TranscriptLog
from tether.core import compaction as plan
from tether.core.prompt import compile_system_prompt
from tether.core.tools import ToolContext
from tether.errors import ProviderError
from tether.protocol.chunks import (
    AssistantText,
    Chunk,
    CompactionNotice,
    ErrorChunk,
    Reasoning,
    RetryNotice,
    StopReason,
    SummaryMessage,
    ToolCallRequest,
    UsageStatistics,
    now_ms,
)
from tether.protocol.llm import ProviderRequest, ToolSpec
from tether.protocol.messages import (
    AssistantMessage,
    AssistantPart,
    Message,
    TextPart,
    ThinkingPart,
    ToolResultMessage,
    Usage,
)
from tether.protocol.tool_calls import ToolCall
from tether.protocol.turns import ConversationRef, TurnInput
from tether.providers.base import Provider


class CompactionEvents(Protocol):
    """Told before and after a compaction (PreCompact hooks, mods' compact_start/compact_end);
    they observe, they cannot stop it."""

    async def start(self, trigger: str, context_tokens: int, window: int, messages: int) -> None: ...

    async def end(self, trigger: str, stats: Mapping[str, Any]) -> None: ...


class LocalBackend:
    def __init__(
        self,
        store: ConversationStore,
        provider: Provider,
        *,
        provider_name: str,
        model_id: str,
        system: str,
        cwd: Path,
        platform: str,
        today: str,
    ) -> None:
        self.store = store
        self.provider = provider
        self.provider_name = provider_name
        self.model_id = model_id
        self.system = compile_system_prompt(system, cwd=str(cwd), platform=platform, date=today)
        # Set by the runtime to add memory, instructions and skills (runtime/session/prompt_cache.py):
        # resolved per send, so a memory commit between sends reaches the next request.
        self.system_prompt: Callable[[ConversationRef], Awaitable[str]] | None = None
        self.api_ms = 0
        # Compaction (§4.6, §16): None leaves the conversation to grow until the provider refuses.
        self.context_window: int | None = None
        self.compaction = CompactionSettings()
        # PreCompact hooks and mods' compact_start/compact_end, set by the runtime.
        self.compaction_events: CompactionEvents | None = None
        # Whether a tool-call id was already used in this conversation beyond the loaded
        # history (the runtime asks the effect checkpoints); a reused one gets a fresh id.
        self.call_id_taken: Callable[[str], bool] | None = None
        # Per conversation: (length, last message id) of a history prefix known settled.
        self._settled: dict[tuple[str, str], tuple[int, str]] = {}

    async def compact(
        self, conversation: ConversationRef, *, trigger: plan.Trigger = "manual", tools_json: str = ""
    ) -> Compacted:
        """Compact now (`tether compact`); raises CompactionFailed with history unchanged."""
        transcript = self._transcript(conversation)
        history = settle(transcript, transcript.load())
        system = self.system if self.system_prompt is None else await self.system_prompt(conversation)
        return await self._run_compaction(
            transcript, history, trigger, self.context_window or 200_000, system, tools_json
        )

    async def _run_compaction(
        self, transcript: TranscriptLog, history: list[Message], trigger: plan.Trigger,
        window: int, system: str, tools_json: str,
    ) -> Compacted:
        events = self.compaction_events
        if events is not None:
            await events.start(trigger, plan.estimate(system, history, tools_json), window, len(history))
        done = await Compactor(self.provider, self.model_id).compact(
            transcript, history, trigger=trigger, window=window, system=system,
            tools_json=tools_json, settings=self.compaction,
        )
        if events is not None:
            await events.end(trigger, done.stats)
        return done

    async def _compact(
        self, transcript: TranscriptLog, history: list[Message], trigger: plan.Trigger,
        system: str, tools_json: str, run_id: str,
    ) -> AsyncIterator[Chunk]:
        assert self.context_window is not None
        done = await self._run_compaction(
            transcript, history, trigger, self.context_window, system, tools_json
        )
        yield CompactionNotice(trigger, done.stats, run_id)
        yield SummaryMessage(done.summary, done.summary_message.id, run_id)

    def _settle(
        self, conversation: ConversationRef, transcript: TranscriptLog, history: list[Message]
    ) -> list[Message]:
        """`settle` over only what was added since the history was last found settled: a
        settled prefix stays settled (results only ever follow their calls, and a compaction
        keeps call/result pairs together), so each send no longer walks the whole history.
        The mark is the prefix's length and its last message id; any other view (a rollback,
        a compaction) fails the check and is walked in full."""
        key = (conversation.agent_id, conversation.conversation_id)
        start = 0
        mark = self._settled.get(key)
        if mark is not None:
            n, last_id = mark
            if 0 < n <= len(history) and history[n - 1].id == last_id:
                start = n
        history = settle(transcript, history, start)
        if history:
            self._settled[key] = (len(history), history[-1].id)
        return history

    def _transcript(self, conversation: ConversationRef) -> TranscriptLog:
        return self.store.transcript(conversation.agent_id, conversation.conversation_id)

    async def record(self, conversation: ConversationRef, turn_input: TurnInput) -> None:
        transcript = self._transcript(conversation)
        transcript.load()
        await append_durably(transcript, input_messages(turn_input))

    async def send(
        self, conversation: ConversationRef, turn_input: TurnInput, ctx: ToolContext
    ) -> AsyncIterator[Chunk]:
        transcript = self._transcript(conversation)
        history = transcript.load()
        if not turn_input.approvals:
            history = self._settle(conversation, transcript, history)
        new = input_messages(turn_input)
        await append_durably(transcript, new)
        history = [*history, *new]

        run_id = f"local-run-{uuid.uuid4().hex[:12]}"
        memory_update: str | None = None
        with_update = getattr(self.system_prompt, "with_update", None)
        if with_update is not None:
            system, memory_update = await with_update(conversation)
        else:
            system = self.system if self.system_prompt is None else await self.system_prompt(conversation)
        tools = ctx.specs()
        window = self.context_window
        compactions = 0
        if window is not None:
            tools_json = _tools_json(tools)
            floor = plan.estimate(system, [], tools_json)
            if floor > window:
                yield ErrorChunk(
                    f"The system prompt and tools alone (~{floor} tokens) exceed the context "
                    f"window of {window} tokens; raise the model's context (for a local server, "
                    "e.g. OLLAMA_CONTEXT_LENGTH or llama.cpp --n_ctx) or set a larger "
                    "TETHER_CONTEXT_WINDOW", "local_backend_error", "", False, run_id)
                yield StopReason("error", run_id)
                return
            if plan.estimate(system, history, tools_json) > plan.threshold(window):
                compactions += 1
                try:
                    async for chunk in self._compact(
                        transcript, history, "context_window_limit", system, tools_json, run_id
                    ):
                        yield chunk
                    history = transcript.load()
                except CompactionFailed as exc:
                    # Below the window there is still room: try the call; an overflow compacts again.
                    yield CompactionNotice("context_window_limit", {"failed": str(exc)}, run_id)
        parts = _PartsBuilder()
        ids = _CallIds(history, self.call_id_taken)
        usage: UsageStatistics | None = None
        stop: StopReason | None = None
        started = time.monotonic()
        try:
            while True:
                request = ProviderRequest(
                    model=self.model_id,
                    system=system,
                    messages=tuple(history),
                    tools=tools,
                    session_id=conversation.conversation_id,
                    memory_update=memory_update,
                )
                try:
                    async for chunk in self.provider.stream(request):
                        chunk = replace(chunk, run_id=run_id)
                        if isinstance(chunk, ToolCallRequest):
                            call = chunk.call
                            chunk = replace(chunk, call=replace(call, id=ids.own(call.id)))
                        if isinstance(chunk, UsageStatistics):
                            usage = chunk
                        elif isinstance(chunk, StopReason):
                            stop = chunk
                        elif not isinstance(chunk, RetryNotice):
                            parts.add(chunk)
                        yield chunk
                    break
                except ProviderError as exc:
                    overflow = is_overflow(exc) and not parts.started
                    if not overflow or window is None or compactions >= plan.MAX_COMPACTIONS_PER_TURN:
                        raise
                    compactions += 1
                    async for chunk in self._compact(
                        transcript, history, "context_window_overflow", system,
                        _tools_json(tools), run_id,
                    ):
                        yield chunk
                    history = transcript.load()
        except ProviderError as exc:
            yield ErrorChunk(exc.message, exc.error_type, exc.detail, exc.retryable, run_id)
            yield StopReason("llm_api_error", run_id)
            return
        except CompactionFailed as exc:
            yield ErrorChunk(str(exc), "local_backend_error", "", False, run_id)
            yield StopReason("error", run_id)
            return
        finally:
            self.api_ms += int((time.monotonic() - started) * 1000)
        if stop is None:
            msg = "Local provider stream ended without a stop reason."
            yield ErrorChunk(msg, "local_backend_error", "", False, run_id)
            yield StopReason("error", run_id)
            return
        assistant = AssistantMessage(
            id=f"letta-msg-{uuid.uuid4().hex[:16]}",
            content=parts.build(),
            timestamp=now_ms(),
            api=self.provider.api,
            provider=self.provider_name,
            model=self.model_id,
            usage=_usage(usage),
            stop_reason=stop.stop_reason,
        )
        await append_durably(transcript, [assistant])


async def append_durably(transcript: TranscriptLog, messages: Sequence[Message]) -> None:
    """`transcript.append` (written and fsynced before this returns, as before) in a worker
    thread: an fsync blocks for 0.3-2 ms, and on the event loop it stalled every other
    conversation of an App Server with it (half the loop's time at 200 conversations). The
    caller holds the turn lock and awaits, so this transcript still has one writer at a time.
    The threads are the transcripts' own: in asyncio's shared pool, work queued behind slow
    jobs (a state file's lock, a prompt compile) delayed every turn's appends."""
    loop = asyncio.get_running_loop()
    await loop.run_in_executor(_transcript_writers(), transcript.append, messages)


_WRITERS: list[ThreadPoolExecutor] = []  # created on the first append, one per process


def _transcript_writers() -> ThreadPoolExecutor:
    if not _WRITERS:
        _WRITERS.append(ThreadPoolExecutor(8, thread_name_prefix="tether-transcript"))
    return _WRITERS[0]


def _tools_json(tools: Sequence[ToolSpec]) -> str:
    return orjson.dumps([[t.name, t.description, t.parameters] for t in tools]).decode()


def settle(transcript: TranscriptLog, history: list[Message], start: int = 0) -> list[Message]:
    """§4.4 step 1: close what an earlier, interrupted turn left open, durably. Calls before
    `start` are known answered (`history[:start]` was settled), so only the rest is walked."""
    tail = history[start:] if start else history
    kept, appended = settle_orphaned_tool_calls(tail)
    if len(kept) < len(tail):  # only ever the never-finished trailing assistant message
        transcript.rollback(history[-1].id)
    if appended:
        transcript.append(appended)
    return [*history[:start], *kept, *appended]


def input_messages(turn_input: TurnInput) -> list[Message]:
    out: list[Message] = []
    ts = now_ms()
    out.extend(a.to_message(ts) for a in turn_input.approvals)
    if turn_input.user is not None:
        out.append(turn_input.user)
    return out


class _CallIds:
    """Tool-call ids the conversation can key on: a model that reuses one (local servers number
    `call_0`, `call_1` afresh every step) gets a fresh id in tether's records, so every call is
    run, answered and checkpointed as itself."""

    def __init__(self, history: Sequence[Message], taken: Callable[[str], bool] | None) -> None:
        self._taken = taken  # ids the conversation used before what `history` holds (checkpoints)
        self._history = history
        # Built on the first tool call: a text-only send never walks the whole history for it.
        self._used: set[str] | None = None

    def _seen(self) -> set[str]:
        if self._used is None:
            history = self._history
            self._used = {
                part.id
                for m in history
                if isinstance(m, AssistantMessage)
                for part in m.content
                if isinstance(part, ToolCall)
            }
            self._used.update(m.tool_call_id for m in history if isinstance(m, ToolResultMessage))
        return self._used

    def own(self, call_id: str) -> str:
        used = self._seen()
        fresh, n = call_id, 1
        while fresh in used or not fresh or (self._taken is not None and self._taken(fresh)):
            n += 1
            fresh = f"{call_id or 'call'}_t{n}"
        used.add(fresh)
        return fresh


class _PartsBuilder:
    """Assembles streamed chunks into the assistant message's parts, in stream order."""

    def __init__(self) -> None:
        self._parts: list[AssistantPart] = []

    def add(self, chunk: Chunk) -> None:
        last = self._parts[-1] if self._parts else None
        if isinstance(chunk, AssistantText):
            if isinstance(last, TextPart):
                self._parts[-1] = TextPart(last.text + chunk.content)
            else:
                self._parts.append(TextPart(chunk.content))
        elif isinstance(chunk, Reasoning):
            if isinstance(last, ThinkingPart):
                self._parts[-1] = ThinkingPart(
                    last.thinking + chunk.reasoning, chunk.signature or last.signature
                )
            else:
                self._parts.append(ThinkingPart(chunk.reasoning, chunk.signature))
        elif isinstance(chunk, ToolCallRequest):
            self._parts.append(chunk.call)  # parsed once, where the provider assembled it

    @property
    def started(self) -> bool:
        """Whether the model produced any output yet (after which nothing may be retried)."""
        return bool(self._parts)

    def build(self) -> tuple[AssistantPart, ...]:
        return tuple(self._parts)


def _usage(u: UsageStatistics | None) -> Usage | None:
    return u.usage if u is not None else None
