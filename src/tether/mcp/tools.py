"""MCP tools as tether tools: `mcp__<server>__<tool>`, plus the resource tools, under every rule.

Each tool a connected server lists is registered as `mcp__<server>__<tool>` with its input schema,
effect EXEC (serialised with the shell, checkpointed, asked about unless a rule allows it:
`mcp__<server>` or `mcp__<server>__<tool>`), and its results carried to the model: text as is,
structured content as JSON, images and embedded resources as a line saying what they were; an
`isError` result is a tool error; output is capped like Bash's. A call ends as a Bash command
does: on abort with "Interrupted by user", past its limit with "MCP tool call timed out after Nms"
(both errors, recorded like any result). When a server fails or dies its
tools are withdrawn from the registry, so the next model request no longer offers them.
`ListMcpResources` / `ReadMcpResource` are registered while some server offers resources.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import orjson

from tether.core.tools import Effect, ToolRegistry, ToolResult, ToolRunContext
from tether.mcp.client import (
    McpCallAborted,
    McpCallError,
    McpCallTimedOut,
    McpServers,
    McpToolInfo,
    ServerState,
)
from tether.protocol.messages import ImagePart
from tether.tools.output import cap_with_overflow

_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")
RESOURCE_TOOLS = ("ListMcpResources", "ReadMcpResource")
INTERRUPTED = "Interrupted by user"  # what every aborted tool call answers (core.execution)


def tool_name(server: str, tool: str) -> str:
    """The name models and rules see (Claude Code's spelling), cut to providers' 64 characters."""
    return f"mcp__{_UNSAFE.sub('_', server)}__{_UNSAFE.sub('_', tool)}"[:64]


class McpTool:
    effect = Effect.EXEC

    def __init__(self, servers: McpServers, server: str, info: McpToolInfo) -> None:
        self.servers, self.server, self.info = servers, server, info
        self.name = tool_name(server, info.name)
        config = servers.states[server].config if server in servers.states else None
        # A server's readOnlyHint is its own claim: it admits nothing unless the user opted in.
        self.read_only_auto = info.read_only and config is not None and config.auto_allow_read_only
        self.description = info.description or f"The {info.name} tool of MCP server {server}"
        schema = dict(info.input_schema)
        schema.setdefault("type", "object")
        schema.setdefault("properties", {})
        self.parameters = schema

    def paths(self, args: Mapping[str, Any], cwd: Path) -> list[Path]:
        return []

    async def run(self, args: Mapping[str, Any], ctx: ToolRunContext) -> ToolResult:
        if ctx.abort.is_set():
            return ToolResult(INTERRUPTED, is_error=True)
        try:
            result = await self.servers.call_tool(self.server, self.info.name, args, abort=ctx.abort)
        except McpCallError as exc:
            return _stopped(exc)
        text = render_content(result.content, getattr(result, "structured_content", None))
        capped = cap_with_overflow(text or "(no output)", overflow_dir=ctx.scratch_dir,
                                   prefix=f"mcp-output-{_UNSAFE.sub('_', ctx.tool_call_id)[:64]}-")
        return ToolResult(capped, is_error=bool(result.is_error), images=images_of(result.content))


def _stopped(exc: McpCallError) -> ToolResult:
    """The error result of a call that got no answer: aborted, too late, or unreachable."""
    if isinstance(exc, McpCallAborted):
        return ToolResult(INTERRUPTED, is_error=True)
    if isinstance(exc, McpCallTimedOut):
        return ToolResult(f"MCP tool call timed out after {round(exc.timeout_s * 1000)}ms: {exc}",
                          is_error=True)
    return ToolResult(str(exc), is_error=True)


def images_of(content: Any) -> tuple[ImagePart, ...]:
    """The image blocks of an MCP result, as the model will see them (beside the text)."""
    return tuple(
        ImagePart(block.data, getattr(block, "mime_type", None) or "image/png")
        for block in content or ()
        if getattr(block, "type", "") == "image" and isinstance(getattr(block, "data", None), str)
    )


def render_content(content: Any, structured: Any = None) -> str:
    """The text a model reads for MCP content blocks."""
    parts: list[str] = []
    for block in content or ():
        kind = getattr(block, "type", "")
        if kind == "text":
            parts.append(block.text)
        elif kind in ("image", "audio"):
            size = len(getattr(block, "data", "") or "") * 3 // 4
            parts.append(f"[{kind}: {getattr(block, 'mime_type', '?')}, about {size} bytes]")
        elif kind == "resource":
            inner = block.resource
            body = getattr(inner, "text", None)
            parts.append(body if body is not None else f"[resource {inner.uri}: binary]")
        elif kind == "resource_link":
            parts.append(f"[resource link: {block.uri}]")
        else:
            parts.append(f"[{kind or 'unknown'} content]")
    if structured is not None and not parts:
        parts.append(orjson.dumps(structured, option=orjson.OPT_INDENT_2).decode())
    return "\n".join(parts)


class ListMcpResourcesTool:
    name = "ListMcpResources"
    description = "List the resources the connected MCP servers offer (optionally of one server)."
    parameters: dict[str, Any] = {
        "type": "object",
        "properties": {"server": {"type": "string", "description": "Only this server's resources"}},
        "additionalProperties": False,
    }
    effect = Effect.READ
    read_only_auto = True  # tether's own reader (not a server's claim): runs without asking

    def __init__(self, servers: McpServers) -> None:
        self.servers = servers

    def paths(self, args: Mapping[str, Any], cwd: Path) -> list[Path]:
        return []

    async def run(self, args: Mapping[str, Any], ctx: ToolRunContext) -> ToolResult:
        wanted = args.get("server")
        if wanted is not None and not isinstance(wanted, str):
            return ToolResult("Argument `server` must be a string", is_error=True)
        out: list[dict[str, Any]] = []
        for name, state in self.servers.states.items():
            if (wanted and name != wanted) or not state.has_resources or state.status != "connected":
                continue
            try:
                listed = await self.servers.list_resources(name, abort=ctx.abort)
            except McpCallError as exc:
                return _stopped(exc)
            out.extend({"server": name, "uri": str(r.uri), "name": r.name,
                        "mimeType": getattr(r, "mime_type", None)} for r in listed.resources)
        return ToolResult(orjson.dumps(out, option=orjson.OPT_INDENT_2).decode())


class ReadMcpResourceTool:
    name = "ReadMcpResource"
    description = "Read one resource of an MCP server by its URI."
    parameters: dict[str, Any] = {
        "type": "object",
        "properties": {"server": {"type": "string"}, "uri": {"type": "string"}},
        "required": ["server", "uri"],
        "additionalProperties": False,
    }
    effect = Effect.READ
    read_only_auto = True  # tether's own reader (not a server's claim): runs without asking

    def __init__(self, servers: McpServers) -> None:
        self.servers = servers

    def paths(self, args: Mapping[str, Any], cwd: Path) -> list[Path]:
        return []

    async def run(self, args: Mapping[str, Any], ctx: ToolRunContext) -> ToolResult:
        server, uri = args.get("server"), args.get("uri")
        if not isinstance(server, str) or not isinstance(uri, str):
            return ToolResult("Arguments `server` and `uri` must be strings", is_error=True)
        try:
            result = await self.servers.read_resource(server, uri, abort=ctx.abort)
        except McpCallError as exc:
            return _stopped(exc)
        texts = [getattr(c, "text", None) or f"[binary: {getattr(c, 'mime_type', '?')}]"
                 for c in result.contents]
        return ToolResult(cap_with_overflow("\n".join(texts) or "(empty)", overflow_dir=ctx.scratch_dir,
                                            prefix="mcp-resource-"))


def registrar(registry_of: Callable[[], ToolRegistry], servers: McpServers) -> Callable[[ServerState], None]:
    """The `on_change` that keeps the registry in step with each server's state."""
    disposers: dict[str, list[Callable[[], None]]] = {}

    def changed(state: ServerState) -> None:
        registry = registry_of()
        for dispose in disposers.pop(state.config.name, []):
            dispose()
        if state.status == "connected":
            disposers[state.config.name] = [
                registry.register(McpTool(servers, state.config.name, info), override=True)
                for info in state.tools
            ]
        offers = any(s.has_resources and s.status == "connected" for s in servers.states.values())
        present = set(registry.names())
        if offers and RESOURCE_TOOLS[0] not in present:
            disposers["<resources>"] = [registry.register(ListMcpResourcesTool(servers)),
                                        registry.register(ReadMcpResourceTool(servers))]
        elif not offers and RESOURCE_TOOLS[0] in present:
            for dispose in disposers.pop("<resources>", []):
                dispose()

    return changed
