"""Client-registered external tools of App Server runtimes (reference §12.3): what
`runtime_start{external_tools}` / `runtime_external_tools_update` register, and the broker that
sends each call to a registering client as `external_tool_call_request` and waits for its
`external_tool_call_response`.

An external tool is one more tool in the runtime's registry: its calls pass the permission
engine (`external=True`: allowed by default, since the client executes it, but any deny, ask or
strict mode applies), hooks and effect checkpoints like any other (`Effect.NETWORK`, so a call
is checkpointed before the request goes out and a crash never re-runs it). A call whose client
has gone away waits (up to `grace` seconds, or until the turn is aborted) for a client to
register the same tool on the runtime again, then goes to it under the same `request_id`
(`ext-<tool_call_id>`), so a restarting client (the channel gateway) can tell a retry from a new
call and never perform it twice.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from tether.core.tools import Effect, ToolResult, ToolRunContext
from tether.server.frame_reader import Reader
from tether.server.v2_frames import external_tool_call_request

if TYPE_CHECKING:
    from tether.server.protocol_v2 import RuntimeScope
    from tether.server.runtime import ConversationRuntime

TOOL_FIELDS = {"name", "description", "parameters"}
SCOPE_FIELDS = {"scope_id", "tools"}
DEFAULT_GRACE = 120.0  # seconds a call waits for its client to come back


@dataclass(frozen=True, slots=True)
class ExternalToolSpec:
    scope_id: str | None
    name: str
    description: str
    parameters: dict[str, Any]


@dataclass(frozen=True, slots=True)
class ExternalToolCallResponse:
    request_id: str
    output: str
    is_error: bool


@dataclass(frozen=True, slots=True)
class ExternalToolsUpdate:
    request_id: str | None
    runtime: RuntimeScope
    tools: tuple[ExternalToolSpec, ...]


def parse_external_tools(r: Reader, name: str = "external_tools") -> tuple[ExternalToolSpec, ...]:
    """`[{scope_id?, tools: [{name, description?, parameters?}]}]`, each field checked."""
    value = r.msg.get(name)
    if value is None:
        return ()
    if not isinstance(value, list):
        raise r.fail(name, "must be a list of {scope_id?, tools}")
    specs: list[ExternalToolSpec] = []
    for i, group in enumerate(value):
        if not isinstance(group, dict):
            raise r.fail(f"{name}[{i}]", "must be an object {scope_id?, tools}")
        g = Reader(group, r.kind, r.request_id, f"{r.prefix}{name}[{i}].")
        g.known(SCOPE_FIELDS)
        scope_id = g.opt_str("scope_id")
        tools = group.get("tools")
        if not isinstance(tools, list) or not tools:
            raise g.fail("tools", "is required (a non-empty list of tool definitions)")
        for j, tool in enumerate(tools):
            if not isinstance(tool, dict):
                raise g.fail(f"tools[{j}]", "must be an object {name, description, parameters}")
            t = Reader(tool, r.kind, r.request_id, f"{g.prefix}tools[{j}].")
            t.known(TOOL_FIELDS)
            tool_name = t.required_str("name")
            params = tool.get("parameters") or {"type": "object", "properties": {}}
            if not isinstance(params, dict):
                raise t.fail("parameters", "must be a JSON schema object")
            specs.append(
                ExternalToolSpec(scope_id, tool_name, t.opt_str("description") or "", params)
            )
    return tuple(specs)


def parse_call_response(r: Reader) -> ExternalToolCallResponse:
    """`{request_id, content: [{type: "text", text}] | result: str, is_error?}`."""
    r.known({"type", "request_id", "runtime", "tool_call_id", "content", "result", "is_error"})
    request_id = r.required_str("request_id")
    content, result = r.msg.get("content"), r.msg.get("result")
    if content is not None:
        if not isinstance(content, list) or not all(isinstance(c, dict) for c in content):
            raise r.fail("content", "must be a list of {type: 'text', text} parts")
        output = "\n".join(str(c.get("text", "")) for c in content if c.get("type") == "text")
    elif isinstance(result, str):
        output = result
    else:
        raise r.fail("content", "is required (a list of text parts), or give 'result' (a string)")
    is_error = r.msg.get("is_error", False)
    if not isinstance(is_error, bool):
        raise r.fail("is_error", "must be true or false")
    return ExternalToolCallResponse(request_id, output, is_error)


def parse_tools_update(r: Reader) -> ExternalToolsUpdate:
    from tether.server.protocol_v2 import RuntimeScope

    r.known({"type", "request_id", "runtime", "external_tools"})
    return ExternalToolsUpdate(
        r.request_id, RuntimeScope(*r.runtime()), parse_external_tools(r)
    )


class Client(Protocol):
    id: str
    closed: bool

    def send_frame(self, frame: dict[str, Any]) -> None: ...


@dataclass
class _Call:
    scope: RuntimeScope
    tool_name: str
    frame: dict[str, Any]
    future: asyncio.Future[ExternalToolCallResponse]
    client: Client | None = None


@dataclass
class ExternalToolBroker:
    """Which client serves each (runtime, tool), and the calls waiting for an answer."""

    grace: float = field(
        default_factory=lambda: float(os.environ.get("TETHER_EXTERNAL_TOOL_GRACE", DEFAULT_GRACE))
    )
    providers: dict[tuple[RuntimeScope, str], Client] = field(default_factory=dict)
    calls: dict[str, _Call] = field(default_factory=dict)
    _changed: asyncio.Event = field(default_factory=asyncio.Event)

    @staticmethod
    def check(rt: ConversationRuntime, specs: tuple[ExternalToolSpec, ...]) -> None:
        """A client may add tools, never replace one tether runs itself (a `Bash` the client
        executes would no longer be judged or sandboxed as a shell)."""
        from tether.errors import UsageError

        for spec in specs:
            existing = rt.p.registry.get(spec.name)
            if existing is not None and not getattr(existing, "external", False):
                raise UsageError(
                    f"external tool {spec.name!r} would replace the built-in tool of that name; "
                    "give it another name"
                )

    def register(
        self, client: Client, rt: ConversationRuntime, specs: tuple[ExternalToolSpec, ...]
    ) -> list[str]:
        """Put `specs` into the runtime's registry, served by `client` (the newest registrant
        wins); calls waiting for one of them go to it now."""
        self.check(rt, specs)
        names = []
        for spec in specs:
            tool = ServerExternalTool(self, rt.scope, spec)
            rt.p.registry.register(tool, override=True)
            self.providers[(rt.scope, spec.name)] = client
            names.append(spec.name)
        for call in self.calls.values():
            if call.scope == rt.scope and call.tool_name in names:
                self._send(call)
        self._changed.set()
        return names

    def client_gone(self, client: Client) -> None:
        """Its tools stay registered; their calls wait for another registrant."""
        for key, provider in list(self.providers.items()):
            if provider is client:
                del self.providers[key]
        for call in self.calls.values():
            if call.client is client:
                call.client = None

    def answer(self, response: ExternalToolCallResponse) -> str | None:
        call = self.calls.get(response.request_id)
        if call is None or call.future.done():
            return f"no pending external tool call {response.request_id!r}"
        call.future.set_result(response)
        return None

    def _send(self, call: _Call) -> bool:
        client = self.providers.get((call.scope, call.tool_name))
        if client is None or client.closed:
            call.client = None
            return False
        call.client = client
        client.send_frame(call.frame)
        return True

    async def call(
        self, scope: RuntimeScope, spec: ExternalToolSpec, args: Mapping[str, Any],
        ctx: ToolRunContext,
    ) -> ToolResult:
        request_id = f"ext-{ctx.tool_call_id}"
        frame = external_tool_call_request(
            request_id, scope, scope_id=spec.scope_id, tool_call_id=ctx.tool_call_id,
            tool_name=spec.name, args=args,
        )
        loop = asyncio.get_running_loop()
        call = _Call(scope, spec.name, frame, loop.create_future())
        self.calls[request_id] = call
        deadline = loop.time() + self.grace
        aborted = asyncio.ensure_future(ctx.abort.wait())
        try:
            while True:
                if call.client is None and not self._send(call):
                    left = deadline - loop.time()
                    if left <= 0:
                        return ToolResult(
                            f"External tool {spec.name} failed: no client serving it is "
                            f"connected (waited {self.grace:g} s)", True,
                        )
                    self._changed.clear()
                    changed = asyncio.ensure_future(self._changed.wait())
                    waiting: set[asyncio.Future[Any]] = {changed, aborted, call.future}
                    await asyncio.wait(
                        waiting, timeout=min(left, 1.0),
                        return_when=asyncio.FIRST_COMPLETED,
                    )
                    changed.cancel()
                else:
                    answering: set[asyncio.Future[Any]] = {aborted, call.future}
                    await asyncio.wait(
                        answering, timeout=1.0, return_when=asyncio.FIRST_COMPLETED
                    )
                if call.future.done():
                    answer = call.future.result()
                    return ToolResult(answer.output, answer.is_error)
                if aborted.done():
                    return ToolResult(f"External tool {spec.name} was interrupted", True)
                if call.client is not None and call.client.closed:
                    call.client = None  # its connection dropped: wait for a new registrant
        finally:
            aborted.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await aborted
            self.calls.pop(request_id, None)


class ServerExternalTool:
    """One client-executed tool of one runtime."""

    effect = Effect.NETWORK  # effectful: checkpointed before the request goes out
    external = True

    def __init__(self, broker: ExternalToolBroker, scope: RuntimeScope, spec: ExternalToolSpec):
        self.broker = broker
        self.scope = scope
        self.spec = spec
        self.name = spec.name
        self.description = spec.description
        self.parameters = spec.parameters

    def paths(self, args: Mapping[str, Any], cwd: Path) -> list[Path]:
        return []

    async def run(self, args: Mapping[str, Any], ctx: ToolRunContext) -> ToolResult:
        return await self.broker.call(self.scope, self.spec, args, ctx)

