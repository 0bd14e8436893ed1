"""Running a compaction on a local conversation (reference §16; the plan is `core/compaction`).

`Compactor.compact(...)` plans the cut, asks the conversation's model for a summary in a separate
tool-less call (retried with a middle-truncated transcript when the summary request itself
overflows), and records one `compaction` transcript entry. If the summary call fails, nothing is
written: history is exactly as it was.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from tether.backends.store_api import TranscriptLog
from tether.core import compaction as plan
from tether.errors import ProviderError, ProviderHTTPError, TetherError
from tether.protocol.chunks import AssistantText, ErrorChunk, StopReason
from tether.protocol.llm import ProviderRequest
from tether.protocol.messages import Message, TextPart, UserMessage
from tether.providers.base import Provider


class CompactionFailed(TetherError):
    """The summary could not be made; the conversation is unchanged."""


_OVERFLOW_MARKERS = (
    "context length", "context_length", "context window", "prompt is too long", "too many tokens",
    "maximum context", "exceeds the context", "input is too long", "request too large",
)


def is_overflow(exc: BaseException) -> bool:
    """A provider refusal because the request is larger than the model's context window."""
    if not isinstance(exc, ProviderHTTPError) or exc.status not in (400, 413, 422):
        return False
    text = f"{exc.message} {exc.detail}".lower()
    return any(marker in text for marker in _OVERFLOW_MARKERS)


@dataclass(frozen=True, slots=True)
class CompactionSettings:
    mode: plan.Mode = "sliding_window"
    prompt: str | None = None
    clip_chars: int | None = plan.DEFAULT_CLIP_CHARS
    sliding_window_percentage: float = plan.DEFAULT_SLIDING_PERCENTAGE

    @staticmethod
    def from_dict(raw: Any, where: str) -> CompactionSettings:
        if raw is None:
            return CompactionSettings()
        if not isinstance(raw, dict):
            raise TetherError(f"{where}: compaction_settings must be an object")
        mode = raw.get("mode", "sliding_window")
        if mode not in ("sliding_window", "all"):
            raise TetherError(f"{where}: compaction_settings.mode must be sliding_window or all")
        pct = raw.get("sliding_window_percentage", plan.DEFAULT_SLIDING_PERCENTAGE)
        if not isinstance(pct, int | float) or not 0 < pct < 1:
            raise TetherError(f"{where}: sliding_window_percentage must be between 0 and 1")
        clip = raw.get("clip_chars", plan.DEFAULT_CLIP_CHARS)
        if clip is not None and (not isinstance(clip, int) or clip < 100):
            raise TetherError(f"{where}: clip_chars must be an integer ≥ 100 or null")
        prompt = raw.get("prompt")
        if prompt is not None and not isinstance(prompt, str):
            raise TetherError(f"{where}: compaction_settings.prompt must be a string")
        return CompactionSettings(mode, prompt, clip, float(pct))


@dataclass(frozen=True, slots=True)
class Compacted:
    summary: str
    summary_message: UserMessage
    stats: dict[str, Any]


class Compactor:
    def __init__(self, provider: Provider, model_id: str) -> None:
        self.provider = provider
        self.model_id = model_id

    async def compact(
        self,
        transcript: TranscriptLog,
        history: Sequence[Message],
        *,
        trigger: plan.Trigger,
        window: int,
        system: str,
        tools_json: str,
        settings: CompactionSettings = CompactionSettings(),
    ) -> Compacted:
        before = plan.estimate(system, history, tools_json)
        if settings.mode == "all":
            chosen = plan.plan_all(history)
        else:
            chosen = plan.plan_sliding(history, window, settings.sliding_window_percentage)
        if not chosen.evicted:
            raise CompactionFailed("nothing to compact: the conversation is already minimal")
        prompt = settings.prompt or (plan.ALL_PROMPT if chosen.mode == "all" else plan.SLIDING_PROMPT)
        summary = plan.clip_summary(
            await self._summarise(prompt, plan.render_transcript(chosen.evicted)), settings.clip_chars
        )
        kept = list(chosen.kept)
        stats: dict[str, Any] = {
            "trigger": trigger,
            "mode": chosen.mode,
            "context_tokens_before": before,
            "context_window": window,
            "messages_count_before": len(history),
            "messages_count_after": len(kept) + 1,
        }
        now = datetime.now(UTC).isoformat(timespec="seconds")
        message = UserMessage(
            id=f"letta-msg-{uuid.uuid4().hex[:16]}",
            content=(TextPart(plan.summary_text(summary, stats, now)),),
            timestamp=int(datetime.now(UTC).timestamp() * 1000),
        )
        stats["context_tokens_after"] = plan.estimate(system, [message, *kept], tools_json)
        transcript.append_compaction(
            message,
            summary=summary,
            first_kept_message_id=kept[0].id if kept else None,
            tokens_before=before,
            details={"stats": stats},
        )
        return Compacted(summary, message, stats)

    async def _summarise(self, prompt: str, transcript_text: str) -> str:
        attempts = [transcript_text] + [
            plan.truncate_middle(transcript_text, n) for n in plan.TRUNCATION_LEVELS
            if n < len(transcript_text)
        ]
        last: Exception | None = None
        for text in attempts:
            request = ProviderRequest(
                model=self.model_id,
                system=prompt,
                messages=(UserMessage(f"summary-{uuid.uuid4().hex[:8]}", (TextPart(text),), 0),),
                max_tokens=2048,
            )
            try:
                return await self._complete(request)
            except ProviderError as exc:
                last = exc
                if not is_overflow(exc):
                    break
        raise CompactionFailed(f"the summary call failed: {last}") from last

    async def _complete(self, request: ProviderRequest) -> str:
        parts: list[str] = []
        stop: str | None = None
        async for chunk in self.provider.stream(request):
            if isinstance(chunk, AssistantText):
                parts.append(chunk.content)
            elif isinstance(chunk, ErrorChunk):
                raise ProviderError(chunk.message, detail=chunk.detail)
            elif isinstance(chunk, StopReason):
                stop = chunk.stop_reason
        summary = "".join(parts).strip()
        if stop is None:
            raise ProviderError("the summary stream ended without a stop reason")
        if not summary:
            raise ProviderError("the model returned an empty summary")
        return summary
