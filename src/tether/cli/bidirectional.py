"""Bidirectional stream-json (`--input-format stream-json`): a client drives turns over stdin.

One reader task parses stdin lines and routes them: `control_response` lines settle the request
waiting for them (`can_use_tool`, `execute_external_tool`), `control_request` lines are answered
at once (an `interrupt` aborts the running turn), `user` lines queue up and start turns, with
lines already buffered coalesced into one turn. Every turn ends with a `result` line; stdin EOF
ends the session with exit 0. EOF while a turn runs means the client went away: the turn is
aborted at once (its tools stopped, nothing more runs) and what it had queued is dropped. An
interrupt names its cause (the client's request, stdin closing, a signal). Wire shapes follow
the reference §2.6 and §3.4 field for field.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

import orjson

from tether.backends.local.locks import state_failure
from tether.cli.output import Renderer, StdoutGone, init_fields, say, write_line
from tether.cli.stopping import STOP_SIGNALS, RunStop
from tether.core.approvals import Classified
from tether.core.tools import Effect, ToolContext, ToolResult, ToolRunContext
from tether.core.turn import ApprovalAnswer, TurnOutcome
from tether.errors import TetherError
from tether.protocol import wire
from tether.protocol.chunks import now_ms
from tether.protocol.messages import ImagePart, TextPart, UserMessage, UserPart, message_to_dict
from tether.protocol.turns import TurnError
from tether.runtime.conversation import Conversation
from tether.runtime.prepared import Prepared

STDIN_LIMIT = 64 * 1024 * 1024
ENGINE_INTERRUPT = "Interrupted by SIGINT"  # what the turn engine says for any abort
CLIENT_INTERRUPT = "Interrupted by the client (interrupt request)"
CLIENT_GONE = "Interrupted: stdin closed (the client went away)"


class Session:
    """The live protocol state of one bidirectional run."""

    def __init__(self, prepared: Prepared) -> None:
        self.p = prepared
        self.env = wire.Envelope(prepared.session.agent.id, prepared.session.conversation_id)
        self.user_lines: asyncio.Queue[dict[str, Any] | None] = asyncio.Queue()
        self.pending: dict[str, asyncio.Future[dict[str, Any]]] = {}
        self.abort: asyncio.Event | None = None  # set while a turn runs
        self.turn_stop: RunStop | None = None  # why the running turn was stopped, if it was
        self.signum: int | None = None  # the signal that ends the session (SIGINT/TERM/HUP)
        self.eof = False
        # What interrupted the running turn, when not a signal: an `interrupt` request, or stdin
        # closing mid-turn (the client went away: nothing more of its turn may run).
        self.interrupted_by: str | None = None
        self.reflection: asyncio.Future[Any] | None = None  # a pass started after a turn
        self.conversation = Conversation(prepared)

    # --- output ----------------------------------------------------------------------------

    def send(self, event: dict[str, Any]) -> None:
        write_line(self.env.wrap(event))

    def respond(self, request_id: str, payload: dict[str, Any] | None = None, error: str | None = None) -> None:
        if error is not None:
            response: dict[str, Any] = {"subtype": "error", "request_id": request_id, "error": error}
        else:
            response = {"subtype": "success", "request_id": request_id}
            if payload is not None:
                response["response"] = payload
        self.send({"type": "control_response", "response": response})

    def error(self, message: str) -> None:
        self.send({"type": "error", "message": message, "stop_reason": "error"})

    # --- input -----------------------------------------------------------------------------

    async def read_stdin(self) -> None:
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
        if self.abort is not None and not self.abort.is_set() and self.signum is None:
            self.interrupted_by = CLIENT_GONE
            self.abort.set()
        for fut in self.pending.values():
            if not fut.done():
                fut.set_exception(EOFError("stdin closed"))
        await self.user_lines.put(None)

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
            self.user_lines.put_nowait(msg)
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

    def control(self, msg: dict[str, Any]) -> None:
        rid = msg.get("request_id")
        request = msg.get("request")
        if not isinstance(rid, str) or not isinstance(request, dict):
            self.error("Invalid control_request: needs a string request_id and a request object")
            return
        subtype = request.get("subtype")
        try:
            if subtype == "initialize" and any(k in request for k in ("mcp_servers", "mcpServers", "sdkMcpServers")):
                self.respond(rid, error="initialize cannot add MCP servers: tether starts the ones "
                             "in settings (mcpServers), .mcp.json and --mcp-config")
            elif subtype == "initialize":
                self.respond(rid, self.describe())
            elif subtype == "interrupt":
                if self.abort is not None:
                    self.interrupted_by = self.interrupted_by or CLIENT_INTERRUPT
                    self.abort.set()
                self.respond(rid)
            elif subtype == "register_external_tools":
                self.respond(rid, {"registered": self.register_external(request.get("tools"))})
            elif subtype == "bootstrap_session_state":
                self.respond(rid, self.bootstrap(request))
            elif subtype == "list_messages":
                self.respond(rid, self.list_messages(request))
            elif subtype == "recover_pending_approvals":
                self.respond(rid, self.recover_pending_approvals())
            else:
                self.respond(rid, error=f"Unknown control request subtype: {subtype}")
        except TetherError as exc:
            self.respond(rid, error=str(exc))

    # --- control request handlers -----------------------------------------------------------

    def describe(self) -> dict[str, Any]:
        return {
            "agent_id": self.p.session.agent.id,
            "conversation_id": self.p.session.conversation_id,
            "model": self.p.session.model,
            "tools": self.p.registry.names(),
            "memfs_enabled": self.p.services.memfs is not None,
            "skill_sources": sorted(self.p.services.skills.sources) if self.p.services.skills is not None else [],
            "system_info_reminder_enabled": True,
            "mcp_servers": self.p.services.mcp.status() if self.p.services.mcp is not None else [],
            **self._reflection_settings(),
        }

    def recover_pending_approvals(self) -> dict[str, Any]:
        """Tool calls an earlier run left waiting for approval are denied durably (nobody can
        answer them now), so the conversation can go on; a turn in progress is left alone."""
        from tether.protocol.turns import ApprovalResult, TurnInput
        from tether.runtime.checkpoints import open_tool_calls

        none = {"recovered": False, "pending_approval": False, "approvals_processed": 0}
        if self.abort is not None:
            return {**none, "pending_approval": True}  # a live turn owns its approvals
        p = self.p
        with p.store.turn_lock(p.session.agent.id, p.session.conversation_id):
            p.recover_effects()  # effects a crash left open get their recorded outcome first
            transcript = p.store.transcript(p.session.agent.id, p.session.conversation_id)
            calls = open_tool_calls(transcript.load())
            if not calls:
                return none
            denials = tuple(
                ApprovalResult(c.id, c.name, "Tool call denied: its approval request was not "
                               "answered before the earlier run ended", True, denied=True)
                for c in calls
            )
            self._record(TurnInput(approvals=denials))
        return {"recovered": True, "pending_approval": False, "approvals_processed": len(calls)}

    def _record(self, turn_input: Any) -> None:
        transcript = self.p.store.transcript(self.p.session.agent.id, self.p.session.conversation_id)
        from tether.backends.local.backend import input_messages

        transcript.load()
        transcript.append(input_messages(turn_input))

    def _reflection_settings(self) -> dict[str, Any]:
        from tether.runtime.reflection import load_state

        try:
            state = load_state(self.p.store.home, self.p.session.agent.id)
        except TetherError:
            return {"reflection_trigger": "off", "reflection_step_count": 25}
        trigger = self.p.flags.reflection_trigger or state.trigger
        count = self.p.flags.reflection_step_count or state.step_count
        return {"reflection_trigger": trigger, "reflection_step_count": count}

    def register_external(self, tools: Any) -> int:
        if not isinstance(tools, list):
            raise TetherError("register_external_tools: 'tools' must be a list")
        count = 0
        for spec in tools:
            if not isinstance(spec, dict) or not isinstance(spec.get("name"), str) or not spec["name"]:
                raise TetherError("register_external_tools: each tool needs a non-empty string 'name'")
            params = spec.get("parameters") or {"type": "object", "properties": {}}
            if not isinstance(params, dict):
                raise TetherError(f"register_external_tools: {spec['name']}: 'parameters' must be an object")
            tool = ExternalTool(self, spec["name"], str(spec.get("description", "")), params)
            self.p.registry.register(tool, override=True)
            count += 1
        return count

    def _messages(self) -> list[dict[str, Any]]:
        transcript = self.p.store.transcript(self.p.session.agent.id, self.p.session.conversation_id)
        return [message_to_dict(m) for m in transcript.load()]

    def list_messages(self, request: Mapping[str, Any]) -> dict[str, Any]:
        messages = self._messages()
        limit = request.get("limit", 50)
        if not isinstance(limit, int) or limit <= 0:
            raise TetherError("list_messages: 'limit' must be a positive integer")
        order = request.get("order", "desc")
        if order not in ("asc", "desc"):
            raise TetherError("list_messages: 'order' must be 'asc' or 'desc'")
        ids = [m["id"] for m in messages]
        before, after = request.get("before"), request.get("after")
        lo, hi = 0, len(messages)
        if isinstance(before, str) and before in ids:
            hi = ids.index(before)
        if isinstance(after, str) and after in ids:
            lo = ids.index(after) + 1
        window = messages[lo:hi]
        page = window[-limit:][::-1] if order == "desc" else window[:limit]
        has_more = len(window) > limit
        out: dict[str, Any] = {"messages": page, "has_more": has_more}
        if order == "desc" and has_more and page:
            out["next_before"] = page[-1]["id"]
        if order == "asc" and has_more and page:
            out["next_after"] = page[-1]["id"]
        return out

    def bootstrap(self, request: Mapping[str, Any]) -> dict[str, Any]:
        listed = self.list_messages({"limit": request.get("limit", 50), "order": request.get("order", "desc")})
        return {
            **{k: v for k, v in self.describe().items() if k in ("agent_id", "conversation_id", "model", "tools", "memfs_enabled")},
            "messages": listed["messages"],
            "next_before": listed.get("next_before"),
            "has_more": listed["has_more"],
            "has_pending_approval": False,
        }

    # --- requests to the client ------------------------------------------------------------

    async def ask_client(self, request_id: str, request: dict[str, Any]) -> dict[str, Any]:
        if self.eof:
            raise EOFError("stdin closed")
        fut: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self.pending[request_id] = fut
        try:
            self.send({"type": "control_request", "request_id": request_id, "request": request})
            return await fut
        finally:
            self.pending.pop(request_id, None)


class SdkApprover:
    """`ask` goes to the client as `can_use_tool`; its answer (allow / deny) comes back in kind."""

    def __init__(self, session: Session, add_session_rule: Callable[[str], None] | None = None) -> None:
        self.session = session
        self.add_session_rule = add_session_rule

    async def ask(self, item: Classified, ctx: ToolContext) -> ApprovalAnswer:
        from tether.runtime.diffs import can_use_tool_request

        call = item.call
        request = can_use_tool_request(item, ctx.cwd)
        try:
            response = await self.session.ask_client(f"perm-{call.tool_call_id}", request)
        except EOFError:
            return ApprovalAnswer(False, "stdin closed")
        payload = _body(response)
        behavior = payload.get("behavior")
        if behavior == "allow":
            updated = payload.get("updatedInput")
            if updated is not None and not isinstance(updated, dict):
                return ApprovalAnswer(False, "Invalid response format: updatedInput must be an object")
            problem = self._session_rules(payload.get("updatedPermissions"))
            if problem is not None:
                return ApprovalAnswer(False, f"Invalid response format: {problem}")
            return ApprovalAnswer(True, str(payload.get("message") or ""), updated)
        if behavior == "deny":
            return ApprovalAnswer(False, str(payload.get("message") or "Denied by the client"),
                                  interrupt=bool(payload.get("interrupt")))
        return ApprovalAnswer(False, "Invalid response format")


    def _session_rules(self, updates: Any) -> str | None:
        """`updatedPermissions: [{type: "addRules", behavior: "allow", destination: "session",
        rules: [{toolName, ruleContent?}]}]` (Claude Code's shape) adds session allow rules."""
        if updates is None:
            return None
        from tether.core.permissions.rules import parse_rule

        if not isinstance(updates, list):
            return "updatedPermissions must be a list"
        texts: list[str] = []
        for update in updates:
            if not isinstance(update, dict) or update.get("type") != "addRules":
                return "updatedPermissions entries must be {type: \"addRules\", ...}"
            if update.get("behavior", "allow") != "allow" or update.get("destination", "session") != "session":
                return "only session allow rules can be added (behavior allow, destination session)"
            for rule in update.get("rules") or []:
                name = rule.get("toolName") if isinstance(rule, dict) else None
                content = rule.get("ruleContent") if isinstance(rule, dict) else None
                if not isinstance(name, str) or (content is not None and not isinstance(content, str)):
                    return "each rule needs a string toolName (and an optional string ruleContent)"
                text = f"{name}({content})" if content else name
                try:
                    parse_rule(text)
                except TetherError as exc:
                    return str(exc)
                texts.append(text)
        if self.add_session_rule is not None:
            for text in texts:
                self.add_session_rule(text)
        return None


class ExternalTool:
    """A tool the client registered and executes itself (`execute_external_tool`)."""

    effect = Effect.EXEC
    external = True

    def __init__(self, session: Session, name: str, description: str, parameters: dict[str, Any]) -> None:
        self.session = session
        self.name = name
        self.description = description
        self.parameters = parameters

    def paths(self, args: Mapping[str, Any], cwd: Any) -> list[Any]:
        return []

    async def run(self, args: Mapping[str, Any], ctx: ToolRunContext) -> ToolResult:
        request = {"subtype": "execute_external_tool", "tool_call_id": ctx.tool_call_id,
                   "tool_name": self.name, "input": dict(args)}
        try:
            response = await self.session.ask_client(f"ext-{ctx.tool_call_id}", request)
        except EOFError:
            return ToolResult("External tool execution failed: stdin closed", True)
        body = _body(response)
        content = body.get("content")
        if not isinstance(content, list):
            return ToolResult("Invalid external tool result: 'content' must be a list", True)
        texts = [str(c.get("text", "")) for c in content if isinstance(c, dict) and c.get("type") == "text"]
        return ToolResult("\n".join(texts), bool(body.get("is_error")))


def _body(response: dict[str, Any]) -> dict[str, Any]:
    """A reply's payload: nested under `response` (can_use_tool) or inline (external results)."""
    inner = response.get("response")
    return inner if isinstance(inner, dict) else response


def user_content(msg: dict[str, Any]) -> tuple[UserPart, ...]:
    message = msg.get("message")
    content = message.get("content") if isinstance(message, dict) else None
    if isinstance(content, str):
        return (TextPart(content),)
    if isinstance(content, list):
        parts: list[UserPart] = []
        for part in content:
            if isinstance(part, dict) and part.get("type") == "text" and isinstance(part.get("text"), str):
                parts.append(TextPart(part["text"]))
            elif isinstance(part, dict) and part.get("type") == "image":
                source: dict[str, Any] = part["source"] if isinstance(part.get("source"), dict) else part
                data, mime = source.get("data"), source.get("media_type") or source.get("mimeType")
                if isinstance(data, str) and isinstance(mime, str):
                    parts.append(ImagePart(data, mime))
        if parts:
            return tuple(parts)
    raise TetherError("user message needs message.content as a string or a list of text/image parts")


async def serve(prepared: Prepared) -> int:
    session = Session(prepared)
    renderer = Renderer("stream-json", session.env, partial=prepared.flags.include_partial)
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()

    def on_signal(signum: int) -> None:
        if session.signum is None:
            session.signum = signum
        stop.set()
        if session.turn_stop is not None:
            session.turn_stop.on_signal(signum)  # stops the turn's tools, names the signal

    for sig in STOP_SIGNALS:
        loop.add_signal_handler(sig, on_signal, sig)
    subagents = prepared.services.subagents
    if subagents is not None:  # a finished background subagent starts the parent's next turn

        def deliver(text: str) -> None:
            message = {"role": "user", "content": text}
            session.user_lines.put_nowait({"type": "user", "message": message, "_queuedKind": "task_notification"})

        subagents.notify = deliver
        subagents.progress = lambda event: write_line(session.env.wrap(event))  # child progress
    from tether.tools.ask_user import ask_through_client

    # AskUserQuestion allowed without an approval (e.g. --yolo) still asks the SDK peer.
    prepared.services.ask_user = ask_through_client(session.ask_client)
    await prepared.start_tool_sources()  # MCP servers: connected or failed, each bounded
    renderer.emit_init(**init_fields(prepared))
    reader = asyncio.ensure_future(session.read_stdin())
    try:
        while not stop.is_set():
            getter = asyncio.ensure_future(session.user_lines.get())
            stopper = asyncio.ensure_future(stop.wait())
            await asyncio.wait({getter, stopper}, return_when=asyncio.FIRST_COMPLETED)
            stopper.cancel()
            if not getter.done():
                getter.cancel()
                break
            first = getter.result()
            if first is None:
                break
            batch = [first]
            while not session.user_lines.empty():  # coalesce lines that arrived meanwhile
                nxt = session.user_lines.get_nowait()
                if nxt is None:
                    session.user_lines.put_nowait(None)
                    break
                batch.append(nxt)
            await run_one_turn(session, renderer, batch)
            if session.interrupted_by == CLIENT_GONE:
                break  # what the gone client had queued is not run either
        return 128 + session.signum if session.signum is not None else 0
    finally:
        reader.cancel()
        if session.reflection is not None and not session.reflection.done():
            await asyncio.wait([session.reflection], timeout=600)  # let a started pass finish
        await prepared.shutdown()


async def run_one_turn(session: Session, renderer: Renderer, batch: list[dict[str, Any]]) -> None:
    started = time.monotonic()
    try:
        parts = tuple(p for msg in batch for p in user_content(msg))
    except TetherError as exc:
        session.error(str(exc))
        return
    p = session.p
    session.abort = asyncio.Event()
    session.turn_stop = turn_stop = RunStop(session.abort)
    if session.signum is not None:
        turn_stop.on_signal(session.signum)
    renderer.errors.clear()
    renderer.last_tool_output = ""
    session.interrupted_by = None

    def retitle(event: Any) -> Any:
        event = turn_stop.retitle(event)  # a signal or the effect store failing names itself
        if (session.interrupted_by and not turn_stop.stopped and isinstance(event, TurnError)
                and event.message == ENGINE_INTERRUPT):
            return replace(event, message=session.interrupted_by)
        return event

    def emit(event: Any) -> None:
        renderer.on_event(retitle(event))

    api_before = p.backend.api_ms
    try:
        outcome = await session.conversation.turn(
            UserMessage(f"ui-msg-{now_ms()}", parts, now_ms()), emit=emit,
            approver=SdkApprover(session, p.add_session_rule), abort=session.abort,
            take_notifications=False,  # task notifications reach the client as their own events
            on_store_unavailable=turn_stop.on_store_unavailable,
        )
    except (TetherError, OSError) as exc:
        message = state_failure(exc)
        if message is None and not isinstance(exc, TetherError):
            raise
        session.error(message or str(exc))
        outcome = TurnOutcome(stop_reason="error")
    finally:
        session.abort = None
        session.turn_stop = None
    if outcome.error is not None:
        outcome.error = retitle(outcome.error)
        outcome.stop_reason = outcome.error.stop_reason
    renderer.flush()
    renderer.fill_result(outcome)
    subtype = "interrupted" if outcome.interrupted else (
        "error" if outcome.error is not None or outcome.stop_reason not in ("end_turn", "requires_approval")
        else "success")
    write_line(wire.result_event(
        session.env,
        subtype=subtype,
        duration_ms=int((time.monotonic() - started) * 1000),
        duration_api_ms=0 if subtype != "success" else p.backend.api_ms - api_before,
        num_turns=outcome.steps,
        result=turn_stop.message if turn_stop.failure is not None else outcome.result_text,
        run_ids=outcome.run_ids,
        usage=wire.usage_dict(outcome.usage, outcome.steps) if subtype == "success" else None,
        stop_reason=None if subtype == "success" else outcome.stop_reason,
    ))
    if subtype == "success":
        # In the background: the session keeps taking input while memory is reviewed.
        session.reflection = session.conversation.start_reflection() or session.reflection


def run_bidirectional(prepared: Prepared) -> int:
    try:
        return asyncio.run(serve(prepared))
    except StdoutGone as exc:
        say(f"Error: could not write to stdout ({exc})")
        return 1
