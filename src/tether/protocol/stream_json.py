"""Turn events to stream-json lines: which events become lines, the text/reasoning run being
merged, and the `result` line each kind of run ends with (the lines themselves are `wire.py`'s).
"""

from __future__ import annotations

from typing import Any

from tether.protocol.chunks import AssistantText, Chunk, Reasoning, RetryNotice
from tether.protocol.turns import LocalToolCall, LocalToolReturn, TurnError, TurnEvent, TurnOutcome
from tether.protocol.wire import (
    Envelope,
    chunk_event,
    error_event,
    result_event,
    retry_event,
    system_init,
    tool_call_event,
    tool_return_event,
    usage_dict,
)


class StreamJsonEncoder:
    """One session's turn events as stream-json lines.

    Which events become lines: model chunks (`message`, or `stream_event` with partial
    messages), retries, tool calls and returns, turn errors; approval requests are dropped (the
    reference does) and provider errors arrive as the turn's `error`. Without partial messages a
    text or reasoning run (one otid) is merged into one line, written when the run ends."""

    def __init__(self, env: Envelope, *, partial: bool) -> None:
        self.env = env
        self.partial = partial
        self._pending: list[AssistantText | Reasoning] = []

    def init(self, **fields: Any) -> dict[str, Any]:
        return system_init(self.env, **fields)

    def encode(self, event: TurnEvent) -> list[dict[str, Any]]:
        """The lines `event` completes (none while a run is still being merged)."""
        if isinstance(event, AssistantText | Reasoning) and not self.partial:
            lines = self.flush() if self._pending and self._pending[0].otid != event.otid else []
            self._pending.append(event)
            return lines
        lines = self.flush()
        line = self._line(event)
        if line is not None:
            lines.append(line)
        return lines

    def _line(self, event: TurnEvent) -> dict[str, Any] | None:
        env = self.env
        if isinstance(event, RetryNotice):
            return retry_event(env, event)
        if isinstance(event, LocalToolCall):
            return tool_call_event(env, event)
        if isinstance(event, LocalToolReturn):
            return tool_return_event(env, event)
        if isinstance(event, TurnError):
            return error_event(env, event)
        if event.message_type in ("approval_request_message", "error_message"):
            return None
        return chunk_event(env, event, partial=self.partial)

    def flush(self) -> list[dict[str, Any]]:
        """The merged text or reasoning run still held, as its line (or nothing)."""
        if not self._pending:
            return []
        first = self._pending[0]
        if isinstance(first, AssistantText):
            text = "".join(c.content for c in self._pending if isinstance(c, AssistantText))
            merged: Chunk = AssistantText(first.otid, text, first.run_id, first.date)
        else:
            text = "".join(c.reasoning for c in self._pending if isinstance(c, Reasoning))
            sig = next(
                (
                    c.signature
                    for c in reversed(self._pending)
                    if isinstance(c, Reasoning) and c.signature
                ),
                None,
            )
            merged = Reasoning(first.otid, text, sig, first.run_id, first.date)
        self._pending.clear()
        return [chunk_event(self.env, merged, partial=False)]

    def run_result(
        self,
        outcome: TurnOutcome,
        *,
        duration_ms: int,
        api_ms: int,
        result_on_error: bool = False,
    ) -> dict[str, Any] | None:
        """A one-shot run's `result` line. An error ends with its `error` line only, as in the
        reference, unless `result_on_error` (tether's own state failed): then a `result` with
        subtype `error` too."""
        error = outcome.error
        if error is not None and not result_on_error:
            return None
        return result_event(
            self.env,
            subtype="success" if error is None else "error",
            duration_ms=duration_ms,
            duration_api_ms=api_ms,
            num_turns=outcome.steps,
            result=outcome.result_text or NO_RESPONSE if error is None else error.message,
            run_ids=outcome.run_ids,
            usage=usage_dict(outcome.usage, outcome.steps) if error is None else None,
            stop_reason=None if error is None else error.stop_reason,
        )

    def turn_result(
        self,
        outcome: TurnOutcome,
        *,
        duration_ms: int,
        api_ms: int,
        result: str | None = None,
    ) -> dict[str, Any]:
        """The `result` line that ends every turn of a bidirectional session: `success`,
        `interrupted` or `error` (no usage and no API time unless it succeeded). `result`
        overrides the turn's own result text (a failure that names itself)."""
        subtype = turn_subtype(outcome)
        success = subtype == "success"
        return result_event(
            self.env,
            subtype=subtype,
            duration_ms=duration_ms,
            duration_api_ms=api_ms if success else 0,
            num_turns=outcome.steps,
            result=outcome.result_text if result is None else result,
            run_ids=outcome.run_ids,
            usage=usage_dict(outcome.usage, outcome.steps) if success else None,
            stop_reason=None if success else outcome.stop_reason,
        )


NO_RESPONSE = "No assistant response found"  # the result of a turn that produced no text


def turn_subtype(outcome: TurnOutcome) -> str:
    """How a bidirectional turn's `result` line names its end: success, interrupted or error."""
    if outcome.interrupted:
        return "interrupted"
    if outcome.error is not None or outcome.stop_reason not in ("end_turn", "requires_approval"):
        return "error"
    return "success"
