"""The hosted backend: each send is one streamed run on a Letta server's conversation.

The server keeps the agent, the history and the model call; tether keeps the tools. A send
POSTs the input (a user message, or the answers to the last step's tool calls as one
`approval` message) with tether's tools as `client_tools`, and maps the SSE events to chunks.
A client-tool call comes back as an approval request ending the step, so the turn engine
classifies and runs it exactly as on the local backend, and the next send carries its result.

Failures: retried (≤3) only before any model output, like the local providers; 409 is the busy
error; a pending approval left on the server is denied and the input sent again; a stream cut
after the run started re-attaches to it after the last event seen (never re-sending the
input); an aborted send cancels the run on the server.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import uuid
from collections.abc import AsyncGenerator, AsyncIterator
from pathlib import Path
from typing import Any

from tether.backends.api.client import LettaClient, LettaConflict, LettaEvent, LettaNotFound
from tether.backends.api.events import EventMapper
from tether.core.tools import ToolContext
from tether.errors import ProviderError, StreamCut
from tether.protocol.chunks import Chunk, ErrorChunk, RetryNotice, StopReason
from tether.protocol.messages import ImagePart, TextPart, UserMessage
from tether.protocol.tool_calls import ToolReturn
from tether.protocol.turns import ConversationRef, TurnInput
from tether.providers.retry import DEFAULT_RETRY, RetryPolicy, retry_delay_s

# The reference's reason for closing an approval the server still waits on (§2.2).
STALE_APPROVAL = "stale pending tool call closed by the harness"
_PENDING_MARKER = "waiting for approval"
_NOTHING_PENDING = "no tool call is currently awaiting approval"
MAX_REATTACH = 3


class ApiBackend:
    """`Backend` over a Letta server. `stash_dir` keeps answers `record()` could not send."""

    def __init__(
        self, client: LettaClient, *, stash_dir: Path | None = None,
        retry: RetryPolicy = DEFAULT_RETRY, override_model: str | None = None,
    ) -> None:
        self.client = client
        # `--model` naming another model than the agent's: used for this run's requests only.
        self.override_model = override_model
        self.stash_dir = stash_dir
        self.retry = retry
        self._answered: set[str] = set()

    @property
    def api_ms(self) -> int:
        return self.client.api_ms

    # --- the Backend protocol --------------------------------------------------------------

    async def record(self, conversation: ConversationRef, turn_input: TurnInput) -> None:
        """Answers that must not be stranded (an interrupt, a limit) without a model call: the
        server would run the model on them, so they wait on disk and go in front of the next
        send of this conversation."""
        if not turn_input.approvals or self.stash_dir is None:
            return
        path = self._stash_path(conversation)
        old = self._load_stash(conversation)
        items = [*old, *(approval_item(a) for a in turn_input.approvals)]
        path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        tmp = path.with_name(f"{path.name}.tmp-{os.getpid()}")
        tmp.write_text(json.dumps(items))
        os.replace(tmp, path)

    async def send(
        self, conversation: ConversationRef, turn_input: TurnInput, ctx: ToolContext
    ) -> AsyncIterator[Chunk]:
        self._answered.update(a.tool_call_id for a in turn_input.approvals)
        stashed = [] if turn_input.approvals else self._load_stash(conversation)
        approvals = [*stashed, *(approval_item(a) for a in turn_input.approvals)]
        body = self._body(conversation, approvals, turn_input.user, ctx)
        path = f"/v1/conversations/{conversation.conversation_id}/messages"
        retries = recoveries = 0
        while True:
            mapper = EventMapper(frozenset(self._answered))
            held: list[Chunk] = []
            try:
                async for chunk in self._run(path, body, mapper, conversation, held):
                    yield chunk
            except LettaConflict as exc:
                yield ErrorChunk(busy_message(conversation, self.client.base_url, exc.run_id),
                                 "conflict", exc.detail, False, exc.run_id)
                yield StopReason("error", exc.run_id)
                return
            except ProviderError as exc:
                if mapper.output or not exc.retryable or retries >= self.retry.max_retries:
                    yield ErrorChunk(exc.message, exc.error_type, exc.detail, exc.retryable,
                                     mapper.run_id)
                    yield StopReason("llm_api_error", mapper.run_id)
                    return
                retries += 1
                delay = retry_delay_s(exc, retries, self.retry)
                yield RetryNotice(retries, self.retry.max_retries, int(delay * 1000), exc.message)
                await asyncio.sleep(delay)
                continue
            error = mapper.error
            if (error is not None and not mapper.output and _PENDING_MARKER in error.message.lower()
                    and recoveries < 2):
                # A tool call a killed run left open on the server: deny it, then send the
                # input again in the same request (the reference's approval recovery).
                recoveries += 1
                denials = await self._deny_pending(conversation)
                if denials:
                    body = self._body(conversation, [*denials, *approvals], turn_input.user, ctx)
                    continue
            if (error is not None and not mapper.output and stashed
                    and _NOTHING_PENDING in f"{error.message} {error.detail}".lower()):
                # The stashed answers are stale (someone else answered or denied those calls
                # on the server meanwhile): they are dropped, the message goes alone.
                self._drop_stash(conversation)
                stashed, approvals = [], []
                body = self._body(conversation, [], turn_input.user, ctx)
                continue
            for chunk in held:
                yield chunk
            if stashed:
                self._drop_stash(conversation)
            return

    # --- one run ---------------------------------------------------------------------------

    async def _run(
        self, path: str, body: dict[str, Any], mapper: EventMapper,
        conversation: ConversationRef, held: list[Chunk],
    ) -> AsyncIterator[Chunk]:
        """Stream one run; stop/usage/error chunks before any output are `held` (the caller
        decides whether they end the send or start a recovery)."""
        finished = False
        try:
            stream = self.client.stream(path, body)
            reattaches = 0
            while True:
                try:
                    async for event in stream:
                        for chunk in mapper.feed(event.data, error_frame=event.error):
                            if mapper.output:
                                for h in held:
                                    yield h
                                held.clear()
                                yield chunk
                            else:
                                held.append(chunk)
                    break
                except StreamCut:
                    if mapper.stop is not None:
                        break  # everything the run said arrived; only [DONE] was lost
                    otid = _last_otid(body)
                    if reattaches >= MAX_REATTACH or (mapper.run_id is None and otid is None):
                        raise
                    reattaches += 1
                    # Re-attach after the last event seen; before any event named the run, the
                    # server finds it by the input's otid (the input is never sent twice).
                    again: dict[str, Any] = {"batch_size": 1000, "starting_after": mapper.last_seq,
                                             "include_pings": True}
                    if mapper.run_id is not None:
                        again["run_id"] = mapper.run_id
                    else:
                        again["otid"] = otid
                    if conversation.conversation_id == "default":
                        again["agent_id"] = conversation.agent_id
                    stream = self._reattach(conversation, again)
            tail = mapper.finish()
            if mapper.stop is None and mapper.error is None:
                tail.append(ErrorChunk(
                    f"the Letta server at {self.client.base_url} ended the stream without a stop "
                    "reason", "letta_stream", "", False, mapper.run_id))
                tail.append(StopReason("error", mapper.run_id))
            elif mapper.stop is None:
                tail.append(StopReason("error", mapper.run_id))
            for chunk in tail:
                if mapper.output:
                    yield chunk
                else:
                    held.append(chunk)
            finished = True
        finally:
            if not finished and mapper.run_id is not None and mapper.stop is None:
                await self._cancel(conversation, mapper.run_id)

    async def _reattach(
        self, conversation: ConversationRef, again: dict[str, Any]
    ) -> AsyncGenerator[LettaEvent, None]:
        try:
            async for event in self.client.stream(
                f"/v1/conversations/{conversation.conversation_id}/stream", again
            ):
                yield event
        except LettaNotFound:
            if "otid" not in again:
                raise
            # No run was ever made for this input: sending it again cannot double it.
            raise StreamCut(
                f"the stream from the Letta server at {self.client.base_url} broke off before "
                "the server started a run", retryable=True,
            ) from None

    async def _cancel(self, conversation: ConversationRef, run_id: str) -> None:
        """An aborted send: stop the run on the server too (best effort, bounded)."""
        default = conversation.conversation_id == "default"
        with contextlib.suppress(ProviderError, TimeoutError, asyncio.CancelledError):
            async with asyncio.timeout(5):
                await self.client.request(
                    "POST", f"/v1/conversations/{conversation.conversation_id}/cancel",
                    query={"agent_id": conversation.agent_id} if default else None, timeout_s=5,
                )

    async def _deny_pending(self, conversation: ConversationRef) -> list[dict[str, Any]]:
        from tether.backends.api.agents import pending_approvals

        pending = await pending_approvals(self.client, conversation)
        return [{"type": "approval", "tool_call_id": call_id, "approve": False,
                 "reason": STALE_APPROVAL} for call_id in pending]

    def _body(
        self, conversation: ConversationRef, approvals: list[dict[str, Any]],
        user: UserMessage | None, ctx: ToolContext,
    ) -> dict[str, Any]:
        messages: list[dict[str, Any]] = []
        if approvals:
            messages.append({"type": "approval", "approvals": approvals,
                             "otid": f"tether-{uuid.uuid4()}"})
        if user is not None:
            messages.append(user_item(user))
        body: dict[str, Any] = {
            "messages": messages, "streaming": True, "stream_tokens": True,
            "include_pings": True, "background": True,
            "client_tools": [{"name": s.name, "description": s.description,
                              "parameters": s.parameters} for s in ctx.specs()],
        }
        if conversation.conversation_id == "default":
            body["agent_id"] = conversation.agent_id  # agent-direct mode: the agent's own history
        if self.override_model:
            body["override_model"] = self.override_model
        return body

    # --- answers waiting on disk -----------------------------------------------------------

    def _stash_path(self, conversation: ConversationRef) -> Path:
        assert self.stash_dir is not None
        key = conversation.conversation_id
        if key == "default":
            key = f"default-{conversation.agent_id}"
        return self.stash_dir / f"{key}.json"

    def _load_stash(self, conversation: ConversationRef) -> list[dict[str, Any]]:
        if self.stash_dir is None:
            return []
        try:
            data = json.loads(self._stash_path(conversation).read_text())
        except (FileNotFoundError, ValueError):
            return []
        return [d for d in data if isinstance(d, dict)] if isinstance(data, list) else []

    def _drop_stash(self, conversation: ConversationRef) -> None:
        with contextlib.suppress(FileNotFoundError):
            self._stash_path(conversation).unlink()


def _last_otid(body: dict[str, Any]) -> str | None:
    messages = body.get("messages") or []
    otid = messages[-1].get("otid") if messages else None
    return otid if isinstance(otid, str) else None


def busy_message(conversation: ConversationRef, base_url: str, run_id: str | None) -> str:
    run = f" (run {run_id})" if run_id else ""
    return (
        f"Conversation {conversation.conversation_id} is busy with another active run on the "
        f"Letta server at {base_url}{run}; wait for it to finish or use --new"
    )


def approval_item(result: ToolReturn) -> dict[str, Any]:
    """One answer in the server's `approval` message: a denial, or the executed tool's result."""
    if result.denied:
        return {"type": "approval", "tool_call_id": result.tool_call_id, "approve": False,
                "reason": result.output}
    item: dict[str, Any] = {"type": "tool", "tool_call_id": result.tool_call_id,
                            "tool_return": result.output, "status": result.status}
    if result.stdout is not None:
        item["stdout"] = list(result.stdout)
    if result.stderr is not None:
        item["stderr"] = list(result.stderr)
    return item


def user_item(user: UserMessage) -> dict[str, Any]:
    parts: list[dict[str, Any]] = []
    for part in user.content:
        if isinstance(part, TextPart):
            parts.append({"type": "text", "text": part.text})
        elif isinstance(part, ImagePart):
            parts.append({"type": "image", "source": {"type": "base64", "media_type": part.mime_type,
                                                      "data": part.data}})
    return {"type": "message", "role": "user", "content": parts, "otid": user.otid or user.id}
