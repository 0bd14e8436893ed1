"""Connections to the run's MCP servers: started in parallel in the background, each bounded.

`McpServers.start()` opens one task per server (stdio on a leash — see `leash.py` — or streamable
HTTP / SSE), initializes the session and lists its tools, resources and prompts, within the
server's start timeout (default `MCP_TIMEOUT` ms, else 30 s). `ready()` waits for every server to
be connected or failed, never longer than the slowest timeout, so one slow server never blocks a
turn for more than its own limit. A server that fails to start, or dies later, is reported with
its error (`status()`), its tools are withdrawn (`on_change`), and the turn goes on.

`call_tool` is bounded like a Bash command: it ends when the server answers, when the turn's abort
is set (`McpCallAborted`: SIGINT/SIGTERM, `abort_message`, an interrupt) or when the call's limit
passes (`McpCallTimedOut`): the server's `timeout`, else `MCP_TOOL_TIMEOUT`, else the
`mcpToolTimeout` setting (all milliseconds), else 600 s. The SDK's request is cancelled in its own
task (it tells the server `notifications/cancelled`) and never waited on for long.

`close()` stops them all, promptly: a server whose call was abandoned, or that is still starting,
is killed at once, the others
get `CLOSE_GRACE_S` to end on closed stdin, then stdio servers' whole process groups are killed
(`leash.kill_leash`) and remote sessions cancelled.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import uuid
from collections.abc import Callable, Coroutine, Mapping
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from typing import Any, Literal

from tether.mcp.config import McpServerConfig, parse_timeout_ms
from tether.mcp.leash import LEASH_ENV, PARENT_ENV, find_leash, kill_leash

Status = Literal["pending", "connected", "failed", "stopped"]
DEFAULT_START_TIMEOUT_S = 30.0
CALL_TIMEOUT_S = 600.0  # when neither the server, MCP_TOOL_TIMEOUT nor mcpToolTimeout says
CLOSE_GRACE_S = 1.0  # for servers to end on closed stdin before their group is killed
_ABANDON_WAIT_S = 0.5  # for a cancelled request to finish (its cancellation notice sent)


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
    leash: int | None = None  # a stdio server's leash pid (it leads the server's process group)
    abandoned: bool = False  # a call was aborted or timed out: the server may be stuck

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


class McpCallAborted(McpCallError):
    """The turn was aborted while the call waited for its server."""


class McpCallTimedOut(McpCallError):
    """The server did not answer within the call's limit."""

    def __init__(self, message: str, timeout_s: float) -> None:
        super().__init__(message)
        self.timeout_s = timeout_s


class McpServers:
    def __init__(
        self,
        configs: tuple[McpServerConfig, ...],
        *,
        env: Mapping[str, str],
        on_change: Callable[[ServerState], None] | None = None,
        errlog: Any = None,
        call_timeout_ms: int | None = None,  # the `mcpToolTimeout` setting
    ) -> None:
        self.states = {c.name: ServerState(c) for c in configs}
        self._env = dict(env)
        self.on_change = on_change  # called when a server connects, fails or dies
        self._errlog = errlog
        self._stop = asyncio.Event()
        self._tasks: dict[str, asyncio.Task[None]] = {}
        self._abandoned: set[asyncio.Future[Any]] = set()  # cancelled requests still winding down
        self._token = uuid.uuid4().hex  # names this run's leashes among the process's children
        start = _env_timeout_ms(self._env, "MCP_TIMEOUT")
        self._default_timeout = start / 1000 if start is not None else DEFAULT_START_TIMEOUT_S
        call = _env_timeout_ms(self._env, "MCP_TOOL_TIMEOUT")
        if call is None and call_timeout_ms is not None:
            call = parse_timeout_ms(call_timeout_ms, "mcpToolTimeout")
        self._call_timeout = call / 1000 if call is not None else CALL_TIMEOUT_S

    def start(self) -> None:
        """Open every server in the background (call inside the running event loop)."""
        if self._tasks:
            return
        for name, state in self.states.items():
            self._tasks[name] = asyncio.ensure_future(self._serve(state))

    async def ready(self, abort: asyncio.Event | None = None) -> None:
        """Until every server is connected or has failed (each bounded by its start timeout), or
        `abort` is set (the servers still starting go on in the background)."""
        self.start()
        started: asyncio.Future[Any] = asyncio.ensure_future(
            asyncio.gather(*(s.ready.wait() for s in self.states.values())))
        if abort is None:
            await started
            return
        stop: asyncio.Future[Any] = asyncio.ensure_future(abort.wait())
        try:
            await asyncio.wait({started, stop}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for future in (started, stop):
                future.cancel()

    def status(self) -> list[dict[str, Any]]:
        return [s.describe() for s in self.states.values()]

    def call_timeout(self, server: str) -> float:
        """Seconds a call to `server` may wait: its own `timeout`, else the run's default."""
        state = self.states.get(server)
        own = state.config.timeout_s if state is not None else None
        return own if own is not None else self._call_timeout

    async def call_tool(
        self, server: str, tool: str, args: Mapping[str, Any], *, abort: asyncio.Event | None = None
    ) -> Any:
        """The server's result; McpCallAborted when `abort` is set first, McpCallTimedOut when
        the limit passes first, McpCallError when the server cannot answer (it is then failed)."""
        session = self._session(server)
        return await self._bounded(server, repr(tool), session.call_tool(tool, dict(args)), abort,
                                   fail_server=True)

    async def list_resources(self, server: str, *, abort: asyncio.Event | None = None) -> Any:
        """The server's resources, bounded like a call (errors as McpCallError)."""
        session = self._session(server)
        return await self._bounded(server, "resources/list", session.list_resources(), abort)

    async def read_resource(self, server: str, uri: str, *, abort: asyncio.Event | None = None) -> Any:
        """One resource, bounded like a call (errors as McpCallError)."""
        session = self._session(server)
        return await self._bounded(server, repr(uri), session.read_resource(uri), abort)

    async def get_prompt(self, server: str, prompt: str, arguments: Mapping[str, str]) -> str:
        """A server prompt's messages as one text (what the TUI sends as the user's turn)."""
        result = await self._session(server).get_prompt(prompt, dict(arguments))
        parts = []
        for message in result.messages:
            content = message.content
            parts.append(getattr(content, "text", None) or f"[{getattr(content, 'type', 'content')}]")
        return "\n\n".join(parts)

    async def close(self) -> None:
        """Stop every server, within about `CLOSE_GRACE_S` (see the module docstring)."""
        self._stop.set()
        for future in self._abandoned:
            future.cancel()
        for state in self.states.values():
            if state.abandoned or state.status == "pending":  # stuck, or not started: no grace
                self._kill(state)
        running = {name: t for name, t in self._tasks.items() if not t.done()}
        if running:
            await asyncio.wait(running.values(), timeout=CLOSE_GRACE_S)
        for name, task in running.items():
            if not task.done():
                self._kill(self.states[name])
        still = [t for t in running.values() if not t.done()]
        if still:  # killed groups end their tasks at once; remote sessions are cancelled
            await asyncio.wait(still, timeout=CLOSE_GRACE_S)
        for task in still:
            if not task.done():
                task.cancel()
                with contextlib.suppress(BaseException):
                    await asyncio.wait_for(task, CLOSE_GRACE_S)
        if self._abandoned:
            await asyncio.wait(self._abandoned, timeout=_ABANDON_WAIT_S)
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

    async def _bounded(
        self, server: str, what: str, request: Coroutine[Any, Any, Any],
        abort: asyncio.Event | None, *, fail_server: bool = False,
    ) -> Any:
        """`request`'s result, raced in its own task against `abort` and the server's limit."""
        limit = self.call_timeout(server)
        call: asyncio.Future[Any] = asyncio.ensure_future(request)
        stop = asyncio.ensure_future(abort.wait()) if abort is not None else None
        try:
            await asyncio.wait({call} | ({stop} if stop else set()), timeout=limit,
                               return_when=asyncio.FIRST_COMPLETED)
        finally:  # also when this task itself is cancelled: the request never outlives it
            if stop is not None:
                stop.cancel()
            if not call.done():
                await self._abandon(self.states[server], call)
        if call.done() and not call.cancelled():
            try:
                return call.result()
            except Exception as exc:
                if fail_server:
                    self._fail(self.states[server], f"the call failed: {_describe(exc)}")
                    raise McpCallError(f"MCP server {server!r} failed during the call: "
                                       f"{_describe(exc)}") from None
                raise McpCallError(f"MCP server {server!r}: {_describe(exc)}") from None
        if abort is not None and abort.is_set():
            raise McpCallAborted(f"the call to MCP server {server!r} was aborted")
        raise McpCallTimedOut(f"MCP server {server!r} did not answer {what}", limit)

    async def _abandon(self, state: ServerState, call: asyncio.Future[Any]) -> None:
        """Cancel a request nobody waits for any more; wait a moment for it to wind down (the
        SDK sends the server a cancellation), never longer."""
        state.abandoned = True
        call.cancel()
        done, _ = await asyncio.wait({call}, timeout=_ABANDON_WAIT_S)
        if not done:
            self._abandoned.add(call)
            call.add_done_callback(self._settled)
        else:
            self._settled(call)

    def _settled(self, call: asyncio.Future[Any]) -> None:
        """An abandoned request ended: forgotten, its late error (nobody's) retrieved."""
        self._abandoned.discard(call)
        if not call.cancelled():
            call.exception()

    def _kill(self, state: ServerState) -> None:
        """Kill a stdio server's whole process group now (remote servers have none)."""
        if state.config.transport != "stdio":
            return
        token = self._leash_token(state)
        pid = state.leash if state.leash is not None else find_leash(token)
        if pid is not None:
            kill_leash(pid, token)

    def _leash_token(self, state: ServerState) -> str:
        return f"{self._token}-{state.config.name}"

    def _fail(self, state: ServerState, error: str) -> None:
        state.status, state.error, state.session = "failed", error, None
        state.ready.set()
        if self.on_change is not None:
            self.on_change(state)

    async def _serve(self, state: ServerState) -> None:
        config = state.config
        timeout = config.timeout_s or self._default_timeout
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
                env={**self._env, **config.env, PARENT_ENV: str(os.getpid()),
                     LEASH_ENV: self._leash_token(state)},
                cwd=config.cwd,
            )
            streams = await stack.enter_async_context(
                stdio_client(params, errlog=self._errlog or sys.stderr)
            )
            state.leash = find_leash(self._leash_token(state))
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



def _env_timeout_ms(env: Mapping[str, str], name: str) -> int | None:
    """A timeout variable's milliseconds (unset or empty: None); a bad value is a UsageError."""
    text = env.get(name, "").strip()
    if not text:
        return None
    return parse_timeout_ms(int(text) if text.isdigit() else text, f"the {name} environment variable")


def _describe(exc: BaseException) -> str:
    """The innermost useful message of an exception (group)."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    text = str(exc).strip() or type(exc).__name__
    return text if len(text) < 500 else text[:500] + "…"
