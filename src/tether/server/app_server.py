"""`tether server`: the App Server (reference §12.1) on `websockets`' asyncio server.

HTTP is answered in the `process_request` hook, before any upgrade: every request passes the
Host (DNS rebinding), bearer and Origin checks of `auth.py` first; `/healthz` and `/readyz`
say `ok`; `/app-server-info` (authenticated) describes the server; the configured path (or
`/`) upgrades, `?channel=` (split channels) gets 426. Each websocket is one client speaking
protocol v2; frames larger than `--max-frame-bytes` close it (1009); pings every 30 s and a
client silent for 90 s after its last pong is reaped. SIGTERM / SIGINT stop it cleanly.
With `--openai-api`, `/v1/*` never reaches this hook: `openai_bridge.py` serves it.
Its command line is parsed into `ServerOptions` by `cli/server_cmd.py`.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import signal
import sys
import time
import traceback
import uuid
import weakref
from collections.abc import Awaitable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import orjson
from websockets.asyncio.server import Server, ServerConnection, serve
from websockets.exceptions import ConnectionClosed
from websockets.http11 import Request, Response

from tether.errors import TetherError, UsageError
from tether.runtime.turns.checkpoints import CheckpointStore, new_owner
from tether.server import auth, protocol_v2, v2_frames
from tether.server.external_tools import (
    ExternalToolBroker,
    ExternalToolCallResponse,
    ExternalToolsUpdate,
)
from tether.server.protocol_v2 import (
    AbortMessage,
    ApprovalResponse,
    AppServerInfo,
    ChangeDeviceState,
    CreateMessage,
    FrameError,
    RuntimeScope,
    RuntimeStart,
    Sync,
)
from tether.server.request_kit import RequestFrame
from tether.server.runtime import ConversationRuntime
from tether.server.runtime_start import (
    ServerContext,
    check_workspace,
    open_store,
    sandbox_available,
    start_runtime,
)

DEFAULT_LISTEN = "ws://127.0.0.1:0"
DEFAULT_PATH = "/ws"
DEFAULT_MAX_FRAME = 16 * 1024 * 1024
OUTBOX_LIMIT = 10_000  # frames waiting for a client that does not read; past it, it is closed
HEALTH_PATHS = ("/healthz", "/readyz", "/metrics")


@dataclass
class ServerOptions:
    listen: str = DEFAULT_LISTEN
    policy: auth.AuthPolicy = field(default_factory=auth.AuthPolicy)
    max_frame_bytes: int = DEFAULT_MAX_FRAME
    ping_interval: float = 30.0
    ping_timeout: float = 60.0  # a ping unanswered this long closes: ~90 s since the last pong
    max_queue: int = 32
    cwd: Path | None = None
    openai_api: bool = False  # also serve /v1/* (server/openai_bridge.py)
    max_connections_per_ip: int = 64  # open websockets one address may hold (slowloris, e10)
    idle_release_after: float = 60.0  # seconds before an idle runtime is released (issue 22)
    store: str | None = None  # a postgresql:// URL (runtime/session/pg_store.py); None: the local store
    log_format: str = "text"
    lease_ttl: float = 15.0  # seconds a stopped worker keeps its conversations (--store)


def parse_listen_url(url: str) -> tuple[str, int, str]:
    """(host, port, path) of a `ws://host:port[/path]` listen URL; UsageError otherwise."""
    try:
        parts = urlsplit(url)
        port = parts.port if parts.port is not None else 0
    except ValueError as exc:
        raise UsageError(f"--listen {url!r}: {exc}") from None
    if parts.scheme != "ws":
        raise UsageError(f"--listen {url!r}: only ws:// listen URLs are supported")
    if (
        parts.username
        or parts.password
        or parts.query
        or parts.fragment
        or "?" in url
        or "#" in url
    ):
        raise UsageError(f"--listen {url!r}: the URL cannot include auth, a query or a fragment")
    if not parts.hostname:
        raise UsageError(f"--listen {url!r}: the URL needs a host")
    path = parts.path if parts.path not in ("", "/") else DEFAULT_PATH
    return auth.normalize_host(parts.hostname), port, path


class Connection:
    """One websocket client: an outbox drained by a writer task, and the runtimes it started."""

    def __init__(self, ws: ServerConnection, ident: str, grant: auth.Grant) -> None:
        self.ws = ws
        self.id = ident
        self.grant = grant  # what its bearer token lets it address
        self.outbox: asyncio.Queue[dict[str, Any]] = asyncio.Queue(OUTBOX_LIMIT)
        self.runtimes: dict[RuntimeScope, ConversationRuntime] = {}
        self.terminals: dict[str, Any] = {}  # terminal_id -> terminals.Terminal
        self.closed = False

    def send_frame(self, frame: dict[str, Any]) -> None:
        if self.closed:
            return
        try:
            self.outbox.put_nowait(frame)
        except asyncio.QueueFull:
            self.closed = True
            asyncio.ensure_future(self.ws.close(1008, "client is not reading its frames"))

    async def pump(self) -> None:
        try:
            while True:
                frame = await self.outbox.get()
                await self.ws.send(orjson.dumps(frame).decode())
        except ConnectionClosed:
            self.closed = True


class AppServer:
    def __init__(self, options: ServerOptions, ctx: ServerContext) -> None:
        self.options = options
        self.ctx = ctx
        self.host, self.port, self.path = parse_listen_url(options.listen)
        auth.check_listen(self.host, options.policy)
        self.instance = uuid.uuid4().hex[:8]
        self.runtimes: dict[RuntimeScope, ConversationRuntime] = {}
        self.connections: set[Connection] = set()
        self.allowed_hosts: frozenset[str] | None = None
        self._server: Server | None = None
        self._ids = itertools.count(1)
        # The grant of each upgrade's credential, from process_request to handle.
        self._grants: weakref.WeakKeyDictionary[ServerConnection, auth.Grant] = (
            weakref.WeakKeyDictionary()
        )
        self.cron: Any = None  # the scheduler (cron_bridge.CronService), once started
        self.external = ExternalToolBroker()  # client-executed tools (external_tools.py)
        self._background: set[asyncio.Future[None]] = set()
        self.bridge: Any = None
        if options.openai_api:
            from tether.server.openai_bridge import OpenAIBridge

            self.bridge = OpenAIBridge(self)

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"ws://{host}:{self.port}{self.path}"

    async def start(self) -> str:
        """Bind, resume what a dead server left queued, then accept connections: a port that
        is taken fails before any resumed turn begins, and no new input can come first."""
        from tether.server.durable_inputs import resume_inputs

        bind = "127.0.0.1" if self.host == "localhost" else self.host  # one socket, one port
        self._server = await serve(
            self.handle,
            bind,
            self.port,
            process_request=self.process_request,
            max_size=self.options.max_frame_bytes,
            ping_interval=self.options.ping_interval,
            ping_timeout=self.options.ping_timeout,
            server_header=None,
            create_connection=self.bridge.connection_class() if self.bridge else None,
            start_serving=False,
        )
        self.port = self._server.sockets[0].getsockname()[1]
        self.allowed_hosts = auth.allowed_host_headers(self.host, self.port)
        if self.ctx.fleet is not None:
            self.ctx.fleet.start(self)  # the fleet's sweep: leases, then what they bring
        else:
            resume_inputs(self)
        await self._server.start_serving()
        return self.url

    def start_scheduler(self) -> None:
        """Fire schedules from `$TETHER_HOME/cron.db` into this server's runtimes (one
        scheduler per process; the store's lease makes one per TETHER_HOME fire)."""
        from tether.server.cron_bridge import CronService

        self.cron = CronService(self)
        self.cron.start()

    async def stop(self) -> None:
        """Stop accepting, end running turns (clients still get their turn_finished), flush
        what is queued for each client, then close every connection (1001)."""
        if self.cron is not None:
            await self.cron.stop()  # first: no new fires into runtimes being closed
        for task in list(self._background):
            task.cancel()  # the fleet sweep: it would resume into runtimes being closed
        if self.ctx.fleet is not None:
            await self.ctx.fleet.stop_async()  # leases given up: another takes them at once
        if self._server is not None:
            self._server.close(close_connections=False)
        if self.bridge is not None:
            self.bridge.stop_taking()  # before the runtimes close: their inputs are cancelled
        await asyncio.gather(*(rt.close() for rt in self.runtimes.values()), return_exceptions=True)
        self.runtimes.clear()
        if self.bridge is not None:
            await self.bridge.close()
        deadline = time.monotonic() + 2
        while (
            any(not c.closed and not c.outbox.empty() for c in self.connections)
            and time.monotonic() < deadline
        ):
            await asyncio.sleep(0.01)
        await asyncio.gather(
            *(c.ws.close(1001, "server shutting down") for c in list(self.connections)),
            return_exceptions=True,
        )
        if self._server is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 10)
        if self.ctx.input_writer is not None:
            self.ctx.input_writer.close()
        if self.ctx.inputs is not None:
            self.ctx.inputs.close()  # what still waits stays queued for the next start

    # --- HTTP, before any upgrade -------------------------------------------------------------

    async def process_request(
        self, connection: ServerConnection, request: Request
    ) -> Response | None:
        url = urlsplit(request.path)
        checked = auth.check_request(
            list(request.headers.raw_items()),
            self.options.policy,
            allowed_hosts=self.allowed_hosts,
            now=time.time(),
        )
        rejection = checked if isinstance(checked, auth.Rejection) else None
        if url.path in HEALTH_PATHS:
            if url.path == "/metrics":  # authenticated, unscoped (ops.metrics_refusal)
                from tether.server.ops import metrics_refusal

                rejection = metrics_refusal(checked)
            if rejection is not None and (rejection.status != 401 or url.path == "/metrics"):
                return connection.respond(rejection.status, rejection.message + "\n")
            return await self._ops(connection, url.path)
        if rejection is not None:
            return connection.respond(rejection.status, rejection.message + "\n")
        if url.path == "/app-server-info":
            response = connection.respond(200, orjson.dumps(self.info(None)).decode())
            del response.headers["Content-Type"]
            response.headers["Content-Type"] = "application/json"
            return response
        if url.path not in (self.path, "/"):
            return connection.respond(404, f"no such endpoint: {url.path}\n")
        peer = _peer(connection)
        held = sum(1 for c in self.connections if not c.closed and _peer(c.ws) == peer)
        if held >= self.options.max_connections_per_ip:
            return connection.respond(
                429, f"too many connections from {peer} ({held}); close one and retry\n"
            )
        if "channel" in parse_qs(url.query, keep_blank_values=True):
            return connection.respond(
                426, "split channels are not supported: connect without ?channel=\n"
            )
        assert isinstance(checked, auth.Grant)
        self._grants[connection] = checked
        return None

    async def _ops(self, connection: ServerConnection, path: str) -> Response:
        """/healthz: the process answers; /readyz: and its store does (503 naming why not);
        /metrics: Prometheus text (the process's counters, the store's gauges). The store's
        probe runs in a worker thread: it is a connection and a query."""
        from tether.server import ops

        if path == "/healthz":
            return connection.respond(200, "ok\n")
        if path == "/readyz":
            ready, why = await asyncio.to_thread(ops.health, self.options.store)
            return connection.respond(200 if ready else 503, why + "\n")
        depths = [len(rt.queue) for rt in self.runtimes.values()]  # read here, on the loop
        text = await asyncio.to_thread(ops.metrics_text, self.options.store, depths,
                                       len(self.runtimes))
        response = connection.respond(200, text)
        del response.headers["Content-Type"]
        response.headers["Content-Type"] = "text/plain; version=0.0.4; charset=utf-8"
        return response

    def info(self, request_id: str | None) -> dict[str, Any]:
        """app_server_info_response; `runtime_workspace_sandbox` says whether a runtime_start
        asking for the sandbox would get it here (the probe runs once per process)."""
        from tether.server.requests import REQUESTS, capabilities

        return v2_frames.app_server_info_response(
            request_id, workspace_sandbox=sandbox_available() is None,
            families=capabilities(), requests=sorted(REQUESTS),
        )

    # --- websocket clients --------------------------------------------------------------------

    async def handle(self, ws: ServerConnection) -> None:
        # No recorded grant cannot happen after process_request; if it did, grant nothing.
        grant = self._grants.pop(ws, auth.NO_GRANT)
        conn = Connection(ws, f"app-server-{next(self._ids)}", grant)
        self.connections.add(conn)
        writer = asyncio.ensure_future(conn.pump())
        try:
            async for raw in ws:
                pending = self.dispatch(conn, raw)
                if pending is not None:  # an input being recorded: this client's next frame
                    await pending  # waits for it, so its frames keep their order
        except ConnectionClosed:
            pass
        finally:
            self.connections.discard(conn)
            conn.closed = True
            for rt in conn.runtimes.values():
                rt.unsubscribe(conn)
            self.external.client_gone(conn)
            if conn.terminals:
                from tether.server.terminals import close_all

                close_all(conn)
            writer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await writer

    def dispatch(self, conn: Connection, raw: str | bytes) -> Awaitable[None] | None:
        """Act on one client frame; an input returns what to await (its durable commit)."""
        try:
            frame = protocol_v2.parse_frame(raw)
            if isinstance(frame, CreateMessage):
                return self._create_message(conn, frame)
            self._dispatch(conn, frame)
        except Exception as exc:
            self._report(conn, exc)
        return None

    def _report(self, conn: Connection, exc: Exception) -> None:
        if isinstance(exc, FrameError):
            conn.send_frame(
                v2_frames.error_frame(
                    exc.message, request_id=exc.request_id, frame_type=exc.frame_type
                )
            )
            return
        traceback.print_exc(file=sys.stderr)  # a server bug: say so, keep the connection
        conn.send_frame(
            v2_frames.error_frame(f"internal server error ({type(exc).__name__}: {exc})")
        )

    async def _create_message(self, conn: Connection, frame: CreateMessage) -> None:
        """Queue an input; `input_accepted` goes out once it is on disk."""
        try:
            rt = self._runtime_of(conn, frame)
            # Another client may have moved the runtime to a mode this one may not use.
            refusal = conn.grant.mode_refusal(rt.p.flags.permission_mode)
            if refusal is not None:
                raise FrameError(
                    f"{refusal}: this conversation's runtime runs in it now",
                    request_id=frame.request_id, frame_type="input",
                )
            answer = await rt.enqueue(frame)
            if frame.request_id is not None:
                conn.send_frame(rt.stream.input_accepted(frame.request_id, answer))
        except Exception as exc:
            self._report(conn, exc)

    def _runtime_of(self, conn: Connection, frame: Any) -> ConversationRuntime:
        rt = conn.runtimes.get(frame.runtime)
        if rt is None:
            raise FrameError(
                f"runtime {frame.runtime.agent_id}/{frame.runtime.conversation_id} is not started on "
                "this connection; send runtime_start first",
                request_id=frame.request_id,
            )
        return rt

    def _dispatch(self, conn: Connection, frame: protocol_v2.ClientFrame) -> None:
        if isinstance(frame, AppServerInfo):
            conn.send_frame(self.info(frame.request_id))
            return
        if isinstance(frame, RuntimeStart):
            self.runtime_start(conn, frame)
            return
        if isinstance(frame, RequestFrame):  # the request families: server/requests.py
            from tether.server.requests import answer

            self._hold(answer(self, conn, frame))
            return
        if isinstance(frame, ExternalToolCallResponse):
            problem = self.external.answer(frame)
            if problem is not None:
                raise FrameError(
                    problem, request_id=frame.request_id, frame_type="external_tool_call_response"
                )
            return
        rt = self._runtime_of(conn, frame)
        if isinstance(frame, ApprovalResponse):
            problem = rt.answer_approval(frame)
            if problem is not None:
                raise FrameError(problem, request_id=frame.request_id, frame_type="input")
        elif isinstance(frame, ChangeDeviceState):
            try:
                rt.change_device_state(frame.mode, frame.cwd, conn.grant)
            except TetherError as exc:
                raise FrameError(
                    f"change_device_state: {exc}",
                    request_id=frame.request_id,
                    frame_type="change_device_state",
                ) from None
            if frame.request_id is not None:
                conn.send_frame(
                    v2_frames.change_device_state_response(frame.request_id, applied=not rt.busy)
                )
        elif isinstance(frame, AbortMessage):
            aborted = rt.abort(frame.run_id)
            if frame.request_id is not None:
                conn.send_frame(
                    v2_frames.abort_message_response(frame.request_id, aborted=aborted)
                )
        elif isinstance(frame, Sync):
            if frame.after_event_seq is not None:  # answered after the state frames
                from tether.server.event_replay import replay_to

                replay_to(self.ctx, rt, conn.id, frame.after_event_seq)
            for state in rt.state_frames():
                conn.send_frame(state)
        elif isinstance(frame, ExternalToolsUpdate):
            try:
                names = self.external.register(conn, rt, frame.tools)
            except TetherError as exc:
                raise FrameError(str(exc), request_id=frame.request_id,
                                 frame_type="runtime_external_tools_update") from None
            conn.send_frame(
                v2_frames.runtime_external_tools_update_response(frame.request_id, names)
            )

    def _hold(self, task: asyncio.Future[None]) -> None:
        self._background.add(task)  # held until done: the loop keeps only weak references
        task.add_done_callback(self._background.discard)

    def runtime_start(self, conn: Connection, frame: RuntimeStart) -> None:
        try:
            rt, resolved = start_runtime(
                self.ctx, self.runtimes, self.instance, conn.grant, frame
            )
            self.external.check(rt, frame.external_tools)
            recovered = rt.recover_now()
        except (TetherError, OSError) as exc:
            conn.send_frame(v2_frames.runtime_start_failed(frame.request_id, str(exc)))
            return
        rt.subscribe(conn)
        conn.runtimes[resolved.scope] = rt
        if frame.external_tools:
            self.external.register(conn, rt, frame.external_tools)
        conn.send_frame(
            v2_frames.runtime_start_response(
                frame.request_id,
                resolved.scope,
                model=rt.p.session.model,
                tools=rt.p.registry.names(),
                workspace_sandbox=rt.sandboxed,
                created_agent=resolved.created_agent,
                created_conversation=resolved.created_conversation,
                recovered=recovered,
                interrupted=rt.interrupted,
            )
        )
        for state in rt.state_frames():
            conn.send_frame(state)


# --- serving -------------------------------------------------------------------------------------


def make_context(options: ServerOptions, env: dict[str, str]) -> ServerContext:
    from tether.runtime.session.session import tether_home

    home = tether_home(env)
    if options.cwd is not None:  # `--cwd` inside TETHER_HOME: refuse now, not at each start
        check_workspace(str(options.cwd), options.cwd, home)
    from tether.runtime.turns.input_queue import SqliteInputQueue

    owner = new_owner()
    inputs: Any = None
    checkpoints: Any = None
    fleet: Any = None
    if options.store is not None:  # one session: the owner is the worker's name in the store
        from tether.runtime.session.pg_store import open_pg_store
        from tether.server.fleet_leases import FleetLeases

        pg = open_pg_store(options.store, owner)
        inputs, checkpoints = pg.inputs, pg.checkpoints
        fleet = FleetLeases(pg.session, pg.inputs, pg.url, options.lease_ttl)
    return ServerContext(
        store=open_store(home, fleet),
        checkpoints=checkpoints or CheckpointStore(home / "checkpoints.db"),
        env=env,
        default_cwd=options.cwd or Path.cwd(),
        owner=owner,
        max_queue=options.max_queue,
        idle_release_after=options.idle_release_after,
        inputs=inputs or SqliteInputQueue(home / "inputs.db", owner),
        fleet=fleet,
    )


async def serve_until_signalled(options: ServerOptions) -> int:
    ctx = make_context(options, dict(os.environ))
    server = AppServer(options, ctx)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        url = await server.start()
    except OSError as exc:
        ctx.checkpoints.close()
        raise TetherError(f"cannot listen on {options.listen}: {exc.strerror or exc}") from None
    if os.environ.get("TETHER_CRON", "1") != "0":
        server.start_scheduler()
    sys.stdout.write(url + "\n")
    sys.stdout.flush()
    try:
        await stop.wait()
    finally:
        await server.stop()
        ctx.checkpoints.close()
    return 0


def run_server(options: ServerOptions) -> int:
    """Run the server `options` describe (parsed by `cli/server_cmd.py`) until SIGINT/SIGTERM:
    a long-lived process, so collections walk only what is new; logs in `--log-format`."""
    from tether.runtime.session import gc_policy

    gc_policy.serving()
    from tether.server.ops import configure_logging

    configure_logging(options.log_format)
    return asyncio.run(serve_until_signalled(options))


def _peer(connection: Any) -> str:
    address = getattr(connection, "remote_address", None)
    return str(address[0]) if address else "?"
