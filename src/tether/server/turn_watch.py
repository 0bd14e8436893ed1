"""One OpenAI API request's view of its turn (`openai_bridge.py`): a `TurnWatch` subscribed to
the conversation's runtime keeps that turn's text and usage and denies its approvals (nobody
can answer them over this API); a retried request (the same Idempotency-Key) joins the first
one's input; a `ResumedWatch` stands in for a request whose input a restart resumed after its
client was gone."""

from __future__ import annotations

import asyncio
import uuid
from typing import TYPE_CHECKING, Any

from tether.protocol.chunks import AssistantText, UsageStatistics
from tether.protocol.turns import TurnError
from tether.server.http_connection import ApiError
from tether.server.protocol_v2 import ApprovalResponse
from tether.server.v2_frames import InputAnswer, TurnFinished

if TYPE_CHECKING:
    from tether.core.turn import Event
    from tether.server.runtime import ConversationRuntime

OPENAI_SOURCE = "openai"  # the source of this API's inputs in the queue (update_queue too)
_WITHDRAWN = {  # why a waiting input leaves the queue without a turn
    "lost": "the OpenAI API client went away before its turn",
    "closing": "the server is shutting down",
}
_USAGE_FIELDS = (
    ("prompt", "input_tokens"),
    ("completion", "output_tokens"),
    ("cached", "cache_read_tokens"),
    ("cache_write", "cache_write_tokens"),
    ("reasoning", "reasoning_tokens"),
)


def join_first(watch: TurnWatch, key: str, answer: InputAnswer) -> None:
    """A retried request (the same Idempotency-Key, across a restart too): it follows the
    first request's input while that waits or runs (from where the turn is now); once that
    input is finished, nothing runs again and 409 says where it went."""
    from tether.server.durable_inputs import first_request_id

    if answer.state in ("queued", "running"):
        watch.request_id = first_request_id(watch.rt, key) or watch.request_id
        return
    watch.rt.unsubscribe(watch)
    why = f": {answer.reason}" if answer.reason else ""
    raise ApiError(
        409,
        f"a request with Idempotency-Key {key!r} was already received and its input is "
        f"{answer.state}{why}; it is not run again (its answer, if any, is in the agent's "
        "conversation)", None, "idempotency_key_reused",
    )


# `usage` keys from a relayed usage_statistics delta's wire names (`messages.usage_wire`).
_RELAYED_USAGE = (
    ("prompt", "prompt_tokens"),
    ("completion", "completion_tokens"),
    ("cached", "cached_input_tokens"),
    ("cache_write", "cache_write_tokens"),
    ("reasoning", "reasoning_tokens"),
)


class TurnWatch:
    """Subscribed to a runtime for one turn: keeps that turn's text and usage, denies its
    approvals; frames before its input leaves the queue belong to earlier turns."""

    def __init__(self, rt: ConversationRuntime, ident: str) -> None:
        self.id = ident
        self.rt = rt
        self.request_id = f"{ident}-{uuid.uuid4().hex[:8]}"
        self.queue_item_id: str | None = None
        self.events: asyncio.Queue[tuple[str, Any]] = asyncio.Queue()
        self.text = ""
        self.error: str | None = None
        self.done: TurnFinished | None = None
        self.usage = dict.fromkeys((key for key, _ in _USAGE_FIELDS), 0)
        self._otid: str | None = None
        self.gave_up = False
        self._relay_turn: list[dict[str, Any]] = []  # the holder's deltas of the turn running
        self._relay_mine = False  # the holder began this request's turn: its deltas stream

    @property
    def started(self) -> bool:
        return self.queue_item_id is not None and all(
            q.id != self.queue_item_id for q in self.rt.queue
        )

    def send_frame(self, frame: dict[str, Any]) -> None:
        """Frames are for websocket clients: this watch takes the turn typed (the methods below),
        except on a fleet worker that does not run the conversation, where the holder's relayed
        frames are all there is (`_relayed`)."""
        if self.rt.held_elsewhere:
            self._relayed(frame)

    def _relayed(self, frame: dict[str, Any]) -> None:
        """A frame of the holder's. Its queue update naming this request's input as taken
        (the holder announces every input another worker recorded) begins this request's turn:
        its text and usage are taken as they come, streamed. A turn's deltas seen without that
        are kept until its `turn_finished`, then taken (as one piece) when the turn was this
        request's, else dropped. Its asks the holder denies (`durable_inputs.watch_unattended`)."""
        kind = frame.get("type")
        if kind == "update_queue":
            removed = frame.get("removed")
            if self.queue_item_id is not None and isinstance(removed, list) \
                    and self.queue_item_id in removed:
                self._relay_mine, self._relay_turn = True, []
            return
        if kind == "stream_delta":
            delta = frame.get("delta")
            if isinstance(delta, dict):
                if self._relay_mine:
                    self._take_relayed(delta)
                else:
                    self._relay_turn.append(delta)
            return
        if kind != "turn_finished":
            return
        deltas, self._relay_turn = self._relay_turn, []
        mine, self._relay_mine = self._relay_mine, False
        if frame.get("request_id") != self.request_id or self.done:
            return
        if not mine:
            for delta in deltas:
                self._take_relayed(delta)
        run_ids = frame.get("run_ids")
        self.on_turn_finished(TurnFinished(
            str(frame.get("turn_id")), str(frame.get("stop_reason")),
            tuple(str(r) for r in run_ids) if isinstance(run_ids, list) else (),
            self.request_id, frame.get("error") if isinstance(frame.get("error"), str) else None,
        ))

    def _take_relayed(self, delta: dict[str, Any]) -> None:
        kind = delta.get("message_type")
        if kind == "assistant_message" and isinstance(delta.get("content"), str):
            self.on_event(AssistantText(str(delta.get("otid")), delta["content"]))
        elif kind == "usage_statistics":
            for key, wire in _RELAYED_USAGE:
                value = delta.get(wire)
                self.usage[key] += value if isinstance(value, int) else 0
        elif kind == "loop_error" and isinstance(delta.get("message"), str):
            self.error = delta["message"]

    def on_turn_finished(self, finished: TurnFinished) -> None:
        if not self.started or self.done or finished.request_id != self.request_id:
            return
        self.done = finished
        self.events.put_nowait(("done", finished))

    def on_approval_request(self, request_id: str, tool_name: str, reason: str) -> None:
        """What `HeadlessApprover` answers: the headless denial with the hint that would allow it."""
        if not self.started or self.done:
            return
        from tether.core.permissions import headless_denial
        from tether.core.tools import Effect

        tool = self.rt.p.registry.get(tool_name)
        effect = tool.effect if tool is not None else Effect.EXEC
        message = headless_denial(tool_name, effect, self.rt.p.flags.permission_mode)
        text = f"{message} ({reason})" if reason else message
        self.rt.answer_approval(
            ApprovalResponse(None, self.rt.scope, request_id, False, text, None)
        )

    def on_event(self, event: Event) -> None:
        """The turn's typed events (the runtime hands them to subscribers in this process)."""
        if not self.started or self.done:
            return
        if isinstance(event, AssistantText):
            piece, otid = event.content, event.otid
            if otid != self._otid and self.text:
                piece = "\n\n" + piece
            self._otid = otid
            if piece:
                self.text += piece
                self.events.put_nowait(("text", piece))
        elif isinstance(event, UsageStatistics):
            for key, field in _USAGE_FIELDS:
                self.usage[key] += int(getattr(event.usage, field) or 0)
        elif isinstance(event, TurnError):
            self.error = event.message

    def give_up(self, why: str) -> None:
        """The client left or the server is closing: drop the queued input or abort the turn."""
        if self.done or self.gave_up:
            return
        self.gave_up = True
        withdrawn = self.queue_item_id is not None and self.rt.withdraw(
            self.queue_item_id, _WITHDRAWN.get(why, why)
        )
        if not withdrawn and why == "lost" and self.started and not self.rt.held_elsewhere:
            self.rt.abort(None)  # (elsewhere, the turn running may be another input's: left)
        self.events.put_nowait((why, None))

    async def texts(self) -> Any:
        """Assistant text pieces as they stream; ApiError if the turn did not end well."""
        try:
            while True:
                kind, value = await self.events.get()
                if kind == "text":
                    yield value
                    continue
                if kind == "done":
                    _check_finished(value, self)
                    return
                if kind == "lost":
                    raise ApiError(499, "the client went away; the turn was stopped")
                raise ApiError(503, "the server is shutting down; the turn was not completed")
        finally:
            self.rt.unsubscribe(self)

    async def finished(self) -> TurnFinished | None:
        async for _ in self.texts():
            pass
        return self.done

    def chat_usage(self) -> dict[str, Any]:
        u = self.usage
        prompt = u["prompt"] + u["cached"] + u["cache_write"]
        return {
            "prompt_tokens": prompt,
            "completion_tokens": u["completion"],
            "total_tokens": prompt + u["completion"],
            "prompt_tokens_details": {"cached_tokens": u["cached"]},
            "completion_tokens_details": {"reasoning_tokens": u["reasoning"]},
        }

    def responses_usage(self) -> dict[str, Any]:
        chat = self.chat_usage()
        return {
            "input_tokens": chat["prompt_tokens"],
            "output_tokens": chat["completion_tokens"],
            "total_tokens": chat["total_tokens"],
            "input_tokens_details": chat["prompt_tokens_details"],
            "output_tokens_details": chat["completion_tokens_details"],
        }


def _check_finished(finished: TurnFinished, watch: TurnWatch) -> None:
    stop = finished.stop_reason
    message = finished.error or watch.error
    if stop == "cancelled":
        raise ApiError(503, message or "the turn was cancelled", None, "turn_cancelled")
    if stop in ("error", "llm_api_error") or finished.error:
        status = 502 if stop == "llm_api_error" else 500
        raise ApiError(status, message or f"the turn ended with {stop}", None, stop)


class ResumedWatch(TurnWatch):
    """A request's input a restart resumed (`server/durable_inputs.py`): its client is gone, so
    its turn's approvals get the headless denial as before and its text goes only to the
    transcript; it leaves the runtime when the turn ends."""

    def __init__(self, rt: ConversationRuntime, request_id: str | None, item_id: str) -> None:
        super().__init__(rt, "openai-resumed")
        self.request_id = request_id or self.request_id
        self.queue_item_id = item_id

    def on_event(self, event: Event) -> None:
        """Nobody reads the text."""

    def on_turn_finished(self, finished: TurnFinished) -> None:
        super().on_turn_finished(finished)
        if self.done is not None:
            self.rt.unsubscribe(self)
