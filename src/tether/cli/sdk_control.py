"""The stream-json control protocol's side of a bidirectional session (reference §2.6): answers
to the client's control requests (`initialize`, `interrupt`, `list_messages`,
`register_external_tools`, …), the approver that asks the client (`can_use_tool`), the tools the
client runs itself (`execute_external_tool`) and the user content a `user` line carries.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import TYPE_CHECKING, Any, Protocol

from tether.core.approvals import JudgedCall
from tether.core.tools import Effect, ToolContext, ToolResult, ToolRunContext
from tether.core.turn import ApprovalAnswer
from tether.errors import TetherError
from tether.protocol import wire
from tether.protocol.messages import ImagePart, TextPart, UserPart, message_to_dict

if TYPE_CHECKING:
    from tether.runtime.session.prepared import Prepared
    from tether.runtime.turns.inbox import Inbox

CLIENT_INTERRUPT = "Interrupted by the client (interrupt request)"


class ClientPeer(Protocol):
    """The client at the other end of stdin/stdout, asked and waited for."""

    def ask_client(self, request_id: str, request: dict[str, Any]) -> Awaitable[dict[str, Any]]: ...


class ControlRequests:
    """The client's control requests, answered at once; mixed into the session, which
    provides `respond`, `error`, `ask_client` and the conversation's inbox."""

    p: Prepared
    inbox: Inbox
    interrupted_by: str | None
    respond: Callable[..., None]  # (request_id, payload=None, error=None)
    error: Callable[[str], None]
    ask_client: Callable[[str, dict[str, Any]], Awaitable[dict[str, Any]]]

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
                if self.inbox.turn_running:
                    self.interrupted_by = self.interrupted_by or CLIENT_INTERRUPT
                    self.inbox.abort()
                self.respond(rid)
            elif subtype == "register_external_tools":
                self.respond(rid, {"registered": self.register_external(request.get("tools"))})
            elif subtype == "bootstrap_session_state":
                self.respond(rid, self.bootstrap(request))
            elif subtype == "list_messages":
                self.respond(rid, self.list_messages(request))
            elif subtype == "recover_pending_approvals":
                self.respond(rid, self.recover_pending_approvals())
            elif subtype == "set_permission_mode":
                self.respond(rid, self.set_permission_mode(request.get("mode")))
            else:
                self.respond(rid, error=f"Unknown control request subtype: {subtype}")
        except TetherError as exc:
            self.respond(rid, error=str(exc))

    # --- control request handlers -----------------------------------------------------------

    def set_permission_mode(self, mode: Any) -> dict[str, Any]:
        """Claude Code's `set_permission_mode{mode}`: from the next tool call on (`plan` offers
        ExitPlanMode, whose approval switches back)."""
        from tether.core.permissions import normalize_mode
        from tether.errors import UsageError
        from tether.runtime.turns.plan_mode import set_mode

        if not isinstance(mode, str):
            raise UsageError("set_permission_mode needs a string `mode`")
        set_mode(self.p, normalize_mode(mode))
        return {"mode": self.p.flags.permission_mode}

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
        from tether.protocol.tool_calls import ToolReturn
        from tether.protocol.turns import TurnInput
        from tether.runtime.turns.checkpoints import open_tool_calls

        none = {"recovered": False, "pending_approval": False, "approvals_processed": 0}
        if self.inbox.turn_running:
            return {**none, "pending_approval": True}  # a live turn owns its approvals
        p = self.p
        with p.store.turn_lock(p.session.agent.id, p.session.conversation_id):
            p.recover_effects()  # effects a crash left open get their recorded outcome first
            transcript = p.store.transcript(p.session.agent.id, p.session.conversation_id)
            calls = open_tool_calls(transcript.load())
            if not calls:
                return none
            denials = tuple(
                ToolReturn(c.id, c.name, "Tool call denied: its approval request was not "
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
        from tether.runtime.agents.reflection import load_state

        try:
            state = load_state(self.p.store, self.p.session.agent.id)
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
        limit = request.get("limit", 50)
        if not isinstance(limit, int) or limit <= 0:
            raise TetherError("list_messages: 'limit' must be a positive integer")
        order = request.get("order", "desc")
        if order not in ("asc", "desc"):
            raise TetherError("list_messages: 'order' must be 'asc' or 'desc'")
        before, after = request.get("before"), request.get("after")
        if order == "desc" and not isinstance(before, str) and not isinstance(after, str):
            # The newest page (what bootstrap asks for): read back from the end of the file.
            transcript = self.p.store.transcript(self.p.session.agent.id, self.p.session.conversation_id)
            newest = transcript.tail(limit + 1)
            newest_first = [message_to_dict(m) for m in newest[-limit:][::-1]]
            more = len(newest) > limit
            answer: dict[str, Any] = {"messages": newest_first, "has_more": more}
            if more and newest_first:
                answer["next_before"] = newest_first[-1]["id"]
            return answer
        messages = self._messages()
        ids = [m["id"] for m in messages]
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


class SdkApprover:
    """`ask` goes to the client as `can_use_tool`; its answer (allow / deny) comes back in kind."""

    def __init__(self, session: ClientPeer, add_session_rule: Callable[[str], None] | None = None) -> None:
        self.session = session
        self.add_session_rule = add_session_rule

    async def ask(self, item: JudgedCall, ctx: ToolContext) -> ApprovalAnswer:
        from tether.runtime.turns.diffs import can_use_tool_request

        call = item.call
        request = can_use_tool_request(item, ctx.cwd)
        try:
            response = await self.session.ask_client(f"perm-{call.id}", request)
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

    def __init__(self, session: ClientPeer, name: str, description: str, parameters: dict[str, Any]) -> None:
        self.session = session
        self.name = name
        self.description = description
        self.parameters = parameters

    def paths(self, args: Mapping[str, Any], cwd: Any) -> list[Any]:
        return []

    async def run(self, args: Mapping[str, Any], ctx: ToolRunContext) -> ToolResult:
        request = wire.execute_external_tool(ctx.tool_call_id, self.name, args)
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


