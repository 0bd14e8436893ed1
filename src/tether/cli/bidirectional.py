"""Bidirectional stream-json (`--input-format stream-json`): a client drives turns over stdin.

One reader task parses stdin lines and routes them: `control_response` lines settle the request
waiting for them (`can_use_tool`, `execute_external_tool`), `control_request` lines are answered
at once (`cli/sdk_control.py`; an `interrupt` aborts the running turn), `user` lines go into the
conversation's inbox (`runtime/turns/inbox.py`), which runs them one turn at a time, coalescing lines
that wait together into one turn. Every turn ends with a `result` line; stdin EOF ends the
session with exit 0 once what was queued has run. EOF while a turn runs means the client went
away: the turn is aborted at once (its tools stopped, nothing more runs) and what it had queued
is dropped. An interrupt names its cause (the client's request, stdin closing, a signal). Wire
shapes follow the reference §2.6 and §3.4 field for field.

As in Claude Code's SDK sessions, SessionStart hooks run before stdin is read (their context
goes with the first user line) and SessionEnd hooks when the session ends; a user line goes
through the UserPromptSubmit hooks first (a block is that turn's `error` result; their context
goes with the prompt), and a turn that ends is put to the Stop hooks: a block's feedback runs
next as part of the same turn, whose one `result` line comes after it (`runtime/extensions/turn_hooks.py`).
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Sequence
from dataclasses import replace
from typing import Any

import orjson

from tether.backends.local.locks import state_failure
from tether.cli.output import Renderer, StdoutGone, init_fields, say, write_line
from tether.cli.sdk_control import ControlRequests, SdkApprover, user_content
from tether.cli.stopping import STOP_SIGNALS, RunStop
from tether.core.turn import TurnOutcome
from tether.errors import TetherError
from tether.protocol import wire
from tether.protocol.messages import TextPart
from tether.protocol.turns import LocalToolCall, TurnError
from tether.runtime.extensions.turn_hooks import (
    MAX_STOP_CONTINUATIONS,
    STOP_HOOK,
    HookOutcome,
    TurnHooks,
)
from tether.runtime.session.prepared import Prepared
from tether.runtime.turns.inbox import Inbox, InboxClosed, Submission, TurnPlan, user_message

STDIN_LIMIT = 64 * 1024 * 1024
ENGINE_INTERRUPT = "Interrupted by SIGINT"  # what the turn engine says for any abort
CLIENT_GONE = "Interrupted: stdin closed (the client went away)"


class Session(ControlRequests):
    """The live protocol state of one bidirectional run, over the conversation's inbox."""

    def __init__(self, prepared: Prepared, env: wire.Envelope, renderer: Renderer) -> None:
        self.p = prepared
        self.env = env
        self.pending: dict[str, asyncio.Future[dict[str, Any]]] = {}
        self.signum: int | None = None  # the signal that ends the session (SIGINT/TERM/HUP)
        self.eof = False
        # What interrupted the running turn, when not a signal: an `interrupt` request, or stdin
        # closing mid-turn (the client went away: nothing more of its turn may run).
        self.interrupted_by: str | None = None
        self.turns = StreamJsonTurns(self, renderer)
        self.inbox = Inbox(prepared, self.turns, coalesce=True)  # lines that wait share a turn

    # --- output ----------------------------------------------------------------------------

    def respond(self, request_id: str, payload: dict[str, Any] | None = None, error: str | None = None) -> None:
        write_line(wire.control_response(self.env, request_id, payload, error=error))

    def error(self, message: str) -> None:
        write_line(wire.error_line(self.env, message))

    # --- input -----------------------------------------------------------------------------

    async def read_stdin(self) -> None:
        """Route stdin's lines until EOF, then wait until what was queued has run."""
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader(limit=STDIN_LIMIT)
        await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)
        while True:
            try:
                line = await reader.readline()
            except ValueError:
                self.error(f"Invalid JSON input: line longer than {STDIN_LIMIT} bytes")
                continue
            if not line:
                break
            if line.strip():
                self.route(line)
        self.eof = True
        inbox = self.inbox
        if inbox.turn_running and not inbox.aborting and self.signum is None:
            self.interrupted_by = CLIENT_GONE
            inbox.abort()
        for fut in self.pending.values():
            if not fut.done():
                fut.set_exception(EOFError("stdin closed"))
        await inbox.drained()

    def route(self, line: bytes) -> None:
        try:
            msg = orjson.loads(line)
        except orjson.JSONDecodeError:
            self.error("Invalid JSON input")
            return
        if not isinstance(msg, dict):
            self.error("Invalid JSON input")
            return
        kind = msg.get("type")
        if kind == "user":
            self.submit(msg)
        elif kind == "control_response":
            response = msg.get("response")
            rid = response.get("request_id") if isinstance(response, dict) else None
            fut = self.pending.get(rid) if isinstance(rid, str) else None
            if fut is not None and not fut.done():
                fut.set_result(response)  # type: ignore[arg-type]
        elif kind == "control_request":
            self.control(msg)
        else:
            self.error(f"Unknown message type: {kind}")

    def submit(self, msg: dict[str, Any], source: str = "user") -> None:
        """A `user` line (or a task notification) into the inbox; its content is read when its
        turn starts, so a malformed one is reported in its place in the stream."""
        try:
            self.inbox.submit(payload=msg, source=source)
        except InboxClosed as exc:
            self.error(str(exc))

    # --- requests to the client ------------------------------------------------------------

    async def ask_client(self, request_id: str, request: dict[str, Any]) -> dict[str, Any]:
        if self.eof:
            raise EOFError("stdin closed")
        fut: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self.pending[request_id] = fut
        try:
            write_line(wire.control_request(self.env, request_id, request))
            return await fut
        finally:
            self.pending.pop(request_id, None)


class StreamJsonTurns:
    """The session's turns as the inbox runs them: events rendered as stream-json, approvals
    asked of the client, a `result` line after each."""

    def __init__(self, session: Session, renderer: Renderer) -> None:
        self.session = session
        self.renderer = renderer
        self.turn_stop: RunStop | None = None  # why the running turn was stopped, if it was
        self._started = 0.0
        self._api_before = 0
        self.prompt = ""  # the user's text of the turn (for the Stop hook)
        self.from_hook = False  # this turn is a Stop hook's continuation
        self.continuations = 0
        self.tool_calls = 0
        self.session_context: list[TextPart] = []  # SessionStart's, sent with the first prompt

    def on_signal(self, signum: int) -> None:
        if self.turn_stop is not None:
            self.turn_stop.on_signal(signum)  # stops the turn's tools, names the signal

    def retitle(self, event: Any) -> Any:
        turn_stop, session = self.turn_stop, self.session
        if turn_stop is not None:
            event = turn_stop.retitle(event)  # a signal or the effect store failing names itself
        if (session.interrupted_by and not (turn_stop is not None and turn_stop.stopped)
                and isinstance(event, TurnError) and event.message == ENGINE_INTERRUPT):
            return replace(event, message=session.interrupted_by)
        return event

    def emit(self, event: Any) -> None:
        if isinstance(event, LocalToolCall):
            self.tool_calls += 1
        self.renderer.on_event(self.retitle(event))

    async def begin(self, batch: Sequence[Submission], abort: asyncio.Event) -> TurnPlan | None:
        session = self.session
        self.from_hook, self.tool_calls = batch[0].source == STOP_HOOK, 0
        if not self.from_hook:
            self._started, self.continuations = time.monotonic(), 0
            self._api_before = session.p.backend.api_ms
        try:
            parts = tuple(p for item in batch for p in user_content(item.payload))
        except TetherError as exc:
            session.error(str(exc))
            return None
        p = session.p
        if not self.from_hook and any(item.source == "user" for item in batch):
            self.prompt = "\n\n".join(part.text for part in parts if isinstance(part, TextPart))
            submitted = tell(await TurnHooks(p.hooks).prompt_submit(self.prompt))
            if submitted.blocked is not None:
                self.refuse(f"Prompt blocked by a UserPromptSubmit hook: {submitted.blocked}")
                return None
            parts += (*self.session_context, *submitted.context)
            self.session_context = []
        self.turn_stop = turn_stop = RunStop(abort)
        if session.signum is not None:
            turn_stop.on_signal(session.signum)
        self.renderer.errors.clear()
        self.renderer.last_tool_output = ""
        session.interrupted_by = None
        return TurnPlan(
            user=user_message(parts), emit=self.emit,
            approver=SdkApprover(session, p.add_session_rule),
            take_notifications=False,  # task notifications reach the client as their own events
            on_store_unavailable=turn_stop.on_store_unavailable,
        )

    def refuse(self, message: str) -> None:
        """A turn that does not start (a hook blocked its prompt): its error and `result` lines."""
        refused = TurnError(message, "error")
        self.renderer.on_event(refused)
        self.renderer.flush()
        write_line(self.renderer.encoder.turn_result(
            TurnOutcome(stop_reason="error", error=refused),
            duration_ms=int((time.monotonic() - self._started) * 1000), api_ms=0, result=message,
        ))

    async def continues(self, outcome: TurnOutcome) -> bool:
        """A Stop hook that blocks an ended turn: its feedback runs next, in the same turn."""
        session = self.session
        if (outcome.error is not None or outcome.stop_reason != "end_turn" or outcome.interrupted
                or session.interrupted_by or session.signum is not None
                or self.continuations >= MAX_STOP_CONTINUATIONS):
            return False
        stopped = tell(await TurnHooks(session.p.hooks).stop(
            stop_reason=outcome.stop_reason, tool_call_count=self.tool_calls,
            assistant_message=outcome.last_text, user_message=self.prompt, active=self.from_hook,
        ))
        if stopped.blocked is None:
            return False
        self.continuations += 1
        line = {"type": "user", "message": {"role": "user", "content": stopped.blocked}}
        try:
            session.inbox.put(Submission(payload=line, source=STOP_HOOK, coalesce=False), front=True)
        except InboxClosed:
            return False
        return True

    def failed(self, batch: Sequence[Submission], exc: Exception) -> TurnOutcome:
        message = state_failure(exc)
        if message is None and not isinstance(exc, TetherError):
            raise exc  # a bug ends the session, as it always did
        self.session.error(message or str(exc))
        return TurnOutcome(stop_reason="error")

    async def end(self, batch: Sequence[Submission], outcome: TurnOutcome) -> bool:
        turn_stop = self.turn_stop
        assert turn_stop is not None
        session, renderer, p = self.session, self.renderer, self.session.p
        if outcome.error is not None:
            outcome.error = self.retitle(outcome.error)
            outcome.stop_reason = outcome.error.stop_reason
        renderer.flush()
        if await self.continues(outcome):
            self.turn_stop = None
            return False  # the turn goes on with the hook's feedback; its result comes after
        renderer.fill_result(outcome)
        line = renderer.encoder.turn_result(
            outcome,
            duration_ms=int((time.monotonic() - self._started) * 1000),
            api_ms=p.backend.api_ms - self._api_before,
            result=turn_stop.message if turn_stop.failure is not None else None,
        )
        write_line(line)
        self.turn_stop = None
        if session.interrupted_by == CLIENT_GONE:
            session.inbox.cancel_queued(CLIENT_GONE)  # what the gone client had queued never runs
        # On success the inbox starts the memory review in the background: input keeps coming.
        return bool(line["subtype"] == "success")


def tell(outcome: HookOutcome) -> HookOutcome:
    """A hook's errors on stderr (its context goes to the model, never to the stream)."""
    for text, _kind in outcome.notices:
        say(f"tether: {text}")
    return outcome


async def serve(prepared: Prepared) -> int:
    envelope = wire.Envelope(prepared.session.agent.id, prepared.session.conversation_id)
    renderer = Renderer("stream-json", envelope, partial=prepared.flags.include_partial)
    session = Session(prepared, envelope, renderer)
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()

    def on_signal(signum: int) -> None:
        if session.signum is None:
            session.signum = signum
        stop.set()
        session.turns.on_signal(signum)

    for sig in STOP_SIGNALS:
        loop.add_signal_handler(sig, on_signal, sig)
    subagents = prepared.services.subagents
    if subagents is not None:  # a finished background subagent starts the parent's next turn

        def deliver(text: str) -> None:
            if session.eof:
                return  # the client is gone: nothing starts another turn
            session.submit({"type": "user", "message": {"role": "user", "content": text},
                            "_queuedKind": "task_notification"}, source="task_notification")

        subagents.notify = deliver
        subagents.progress = lambda event: write_line(session.env.wrap(event))  # child progress
    from tether.tools.ask_user import ask_through_client

    # AskUserQuestion allowed without an approval (e.g. --yolo) still asks the SDK peer.
    prepared.services.ask_user = ask_through_client(session.ask_client)
    inbox = session.inbox
    reader: asyncio.Future[None] | None = None
    try:
        await prepared.start_tool_sources(stop)  # MCP servers: connected or failed, each bounded
        renderer.emit_init(**init_fields(prepared))
        session.turns.session_context = tell(await TurnHooks(prepared.hooks).open_session(prepared)).context
        reader = asyncio.ensure_future(session.read_stdin())
        stopped = asyncio.ensure_future(stop.wait())
        await asyncio.wait({reader, stopped, inbox.worker}, return_when=asyncio.FIRST_COMPLETED)
        stopped.cancel()
        if inbox.failure is not None:
            raise inbox.failure
        return 128 + session.signum if session.signum is not None else 0
    finally:
        if reader is not None:
            reader.cancel()
        # A signal: the running turn is stopped, queued lines never run; a started reflection
        # pass gets its time to finish.
        await inbox.close("the session ended", reflection_timeout=600,
                          before_shutdown=TurnHooks(prepared.hooks).session_end)


def run_bidirectional(prepared: Prepared) -> int:
    try:
        return asyncio.run(serve(prepared))
    except StdoutGone as exc:
        say(f"Error: could not write to stdout ({exc})")
        return 1
