"""Connections to the run's MCP servers: started in parallel in the background, each bounded.

`McpServers.start()` opens one task per server (stdio on a leash — see `leash.py` — or streamable
HTTP / SSE), initializes the session and lists its tools, resources and prompts, within the
server's start timeout (default `MCP_TIMEOUT` ms, else 30 s). `ready()` waits for every server to
be connected or failed, never longer than the slowest timeout, so one slow server never blocks a
turn for more than its own limit. A server that fails to start, or dies later, is reported with
its error (`status()`), its tools are withdrawn (`on_change`), and the turn goes on. `close()`
stops them all; stdio servers' whole process groups go with them.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
from collections.abc import Callable, Mapping
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from typing import Any, Literal

from tether.mcp.config import McpServerConfig
from tether.mcp.leash import PARENT_ENV

Status = Literal["pending", "connected", "failed", "stopped"]
DEFAULT_START_TIMEOUT_S = 30.0
CALL_TIMEOUT_S = 600.0


@dataclass(frozen=True, slots=True)
class McpToolInfo:
    name: str
    description: str
    input_schema: dict[str, Any]
    read_only: bool  # the server's readOnlyHint annotation (informational: it admits nothing)


@dataclass(slots=True)
class ServerState:
    config: McpServerConfig
    status: Status = "pending"
    error: str = ""
    tools: tuple[McpToolInfo, ...] = ()
    has_resources: bool = False
    prompts: tuple[str, ...] = ()
    server_info: str = ""
    session: Any = None
    ready: asyncio.Event = field(default_factory=asyncio.Event)

    def describe(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.config.name, "status": self.status}
        if self.error:
            out["error"] = self.error
        if self.status == "connected":
            out["tools"] = [t.name for t in self.tools]
            if self.server_info:
                out["server"] = self.server_info
        return out


class McpCallError(Exception):
    """A call that could not reach its server (not a tool's own error result)."""


class McpServers:
    def __init__(
        self,
        configs: tuple[McpServerConfig, ...],
        *,
        env: Mapping[str, str],
        on_change: Callable[[ServerState], None] | None = None,
        errlog: Any = None,
    ) -> None:
        self.states = {c.name: ServerState(c) for c in configs}
        self._env = dict(env)
        self.on_change = on_change  # called when a server connects, fails or dies
        self._errlog = errlog
        self._stop = asyncio.Event()
        self._tasks: list[asyncio.Task[None]] = []
        default = self._env.get("MCP_TIMEOUT", "")
        self._default_timeout = (
            int(default) / 1000 if default.isdigit() and int(default) > 0 else DEFAULT_START_TIMEOUT_S
        )

    def start(self) -> None:
        """Open every server in the background (call inside the running event loop)."""
        if self._tasks:
            return
        for state in self.states.values():
            self._tasks.append(asyncio.ensure_future(self._serve(state)))

    async def ready(self) -> None:
        """Until every server is connected or has failed (each bounded by its start timeout)."""
        self.start()
        await asyncio.gather(*(s.ready.wait() for s in self.states.values()))

    def status(self) -> list[dict[str, Any]]:
        return [s.describe() for s in self.states.values()]

    async def call_tool(self, server: str, tool: str, args: Mapping[str, Any]) -> Any:
        session = self._session(server)
        try:
            return await asyncio.wait_for(session.call_tool(tool, dict(args)), CALL_TIMEOUT_S)
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            self._fail(self.states[server], f"the call failed: {_describe(exc)}")
            raise McpCallError(f"MCP server {server!r} failed during the call: {_describe(exc)}") from None

    async def list_resources(self, server: str) -> Any:
        return await self._session(server).list_resources()

    async def read_resource(self, server: str, uri: str) -> Any:
        return await self._session(server).read_resource(uri)

    async def get_prompt(self, server: str, prompt: str, arguments: Mapping[str, str]) -> str:
        """A server prompt's messages as one text (what the TUI sends as the user's turn)."""
        result = await self._session(server).get_prompt(prompt, dict(arguments))
        parts = []
        for message in result.messages:
            content = message.content
            parts.append(getattr(content, "text", None) or f"[{getattr(content, 'type', 'content')}]")
        return "\n\n".join(parts)

    async def close(self) -> None:
        self._stop.set()
        for task in self._tasks:
            if not task.done():
                with contextlib.suppress(asyncio.TimeoutError, asyncio.CancelledError):
                    await asyncio.wait_for(asyncio.shield(task), 5)
            if not task.done():
                task.cancel()
                with contextlib.suppress(BaseException):
                    await task
        self._tasks.clear()
        if self._errlog is not None and hasattr(self._errlog, "close"):
            self._errlog.close()  # the servers' stderr log the runner opened for them

    # -----------------------------------------------------------------------------------------

    def _session(self, server: str) -> Any:
        state = self.states.get(server)
        if state is None:
            raise McpCallError(f"no MCP server named {server!r} is configured")
        if state.status != "connected" or state.session is None:
            why = f": {state.error}" if state.error else ""
            raise McpCallError(f"MCP server {server!r} is {state.status}{why}")
        return state.session

    def _fail(self, state: ServerState, error: str) -> None:
        state.status, state.error, state.session = "failed", error, None
        state.ready.set()
        if self.on_change is not None:
            self.on_change(state)

    async def _serve(self, state: ServerState) -> None:
        config = state.config
        timeout = config.start_timeout_s or self._default_timeout
        try:
            async with AsyncExitStack() as stack:
                try:  # in this task: the SDK's cancel scopes must close where they opened
                    async with asyncio.timeout(timeout):
                        await self._connect(state, stack)
                except TimeoutError:
                    self._fail(state, f"did not start within {timeout:g} s")
                    return
                state.status = "connected"
                state.ready.set()
                if self.on_change is not None:
                    self.on_change(state)
                await self._stop.wait()
                state.status = "stopped"
        except asyncio.CancelledError:
            state.status = "stopped"
            raise
        except BaseException as exc:  # the SDK raises ExceptionGroups from its task groups
            if state.status != "failed":
                self._fail(state, _describe(exc))
        finally:
            state.session = None
            state.ready.set()

    async def _connect(self, state: ServerState, stack: AsyncExitStack) -> None:
        from mcp.client.session import ClientSession

        config = state.config
        if config.transport == "stdio":
            from mcp.client.stdio import StdioServerParameters, stdio_client

            params = StdioServerParameters(
                command=sys.executable,
                args=["-m", "tether.mcp.leash", "--", config.command, *config.args],
                env={**self._env, **config.env, PARENT_ENV: str(os.getpid())},
                cwd=config.cwd,
            )
            streams = await stack.enter_async_context(
                stdio_client(params, errlog=self._errlog or sys.stderr)
            )
        elif config.transport == "http":
            from mcp.client.streamable_http import streamable_http_client
            from mcp.shared._httpx_utils import create_mcp_http_client

            client = await stack.enter_async_context(create_mcp_http_client(dict(config.headers)))
            streams = await stack.enter_async_context(
                streamable_http_client(config.url, http_client=client)
            )
        else:
            from mcp.client.sse import sse_client

            streams = await stack.enter_async_context(
                sse_client(config.url, headers=dict(config.headers))
            )
        session = await stack.enter_async_context(ClientSession(streams[0], streams[1]))
        result = await session.initialize()
        info = getattr(result, "server_info", None)
        state.server_info = f"{info.name} {info.version}" if info is not None else ""
        caps = getattr(result, "capabilities", None)
        listed = await session.list_tools()
        state.tools = tuple(
            McpToolInfo(
                t.name,
                t.description or "",
                dict(t.input_schema or {"type": "object"}),
                bool(getattr(t.annotations, "read_only_hint", False)),
            )
            for t in listed.tools
        )
        state.has_resources = bool(caps is not None and getattr(caps, "resources", None))
        if caps is not None and getattr(caps, "prompts", None):
            with contextlib.suppress(Exception):
                state.prompts = tuple(p.name for p in (await session.list_prompts()).prompts)
        state.session = session


def _describe(exc: BaseException) -> str:
    """The innermost useful message of an exception (group)."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    text = str(exc).strip() or type(exc).__name__
    return text if len(text) < 500 else text[:500] + "…"
