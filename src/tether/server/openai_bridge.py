"""`tether server --openai-api`: the OpenAI-compatible HTTP API of the App Server (reference
§12.1), where a model is an agent: `GET /v1/models`, `POST /v1/chat/completions`,
`POST /v1/responses`, streaming or not.

`websockets` reads only bodiless GET requests, so `/v1/*` never reaches it: the connection
class (`http_connection.py`) looks at the request line and, for `/v1/`, serves the HTTP exchange
itself (one request per connection, `Connection: close`); anything else goes on to the websocket
handshake.
Every request passes the same Host / bearer / Origin checks as the upgrade. A completion is one
turn on the agent's `default` conversation, through the same `ConversationRuntime` a websocket
client of that conversation drives: a busy conversation queues the input (bounded by
`--max-queue`; a full queue is 429). Earlier request messages are accepted and ignored (the
agent keeps its own history); only the last one, a user message, is sent. Nobody can answer an
approval over this API, so `ask` is denied with the headless denial text. The returned text is
every assistant text of the turn, runs separated by a blank line, streamed or not.
"""

from __future__ import annotations

import asyncio
import itertools
import sys
import time
import traceback
import uuid
from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING, Any

import orjson
from websockets.asyncio.server import ServerConnection

from tether.errors import NotFound, TetherError, UsageError
from tether.protocol.messages import ImagePart, TextPart, UserPart
from tether.server import auth
from tether.server.http_connection import (
    REQUEST_TIMEOUT_S,
    ApiError,
    HttpConnection,
)
from tether.server.protocol_v2 import (
    CreateMessage,
    NewMessage,
    RuntimeScope,
)
from tether.server.turn_watch import OPENAI_SOURCE, TurnWatch, join_first
from tether.server.v2_frames import EventStream, TurnFinished

if TYPE_CHECKING:
    from tether.server.app_server import AppServer
    from tether.server.runtime import ConversationRuntime

_FINISH = {"max_tokens_exceeded": "length", "max_steps": "length"}


class OpenAIBridge:
    def __init__(self, server: AppServer) -> None:
        self.server = server
        self.live: set[HttpConnection] = set()
        self.keys: dict[HttpConnection, str] = {}  # a request's Idempotency-Key header
        self.closing = False
        self._ids = itertools.count(1)

    def connection_class(self) -> type[ServerConnection]:
        """The `create_connection` for `websockets.serve`: /v1/ here, the rest to websockets."""
        return type("BridgedConnection", (HttpConnection,), {"bridge": self})

    def stop_taking(self) -> None:
        """Take no more requests and withdraw the inputs still waiting for their turn (their
        clients get 503 and the durable queue says cancelled: nothing runs them later); a
        running turn ends as the runtime closes it."""
        self.closing = True
        for conn in list(self.live):
            if conn.watch is None or not conn.watch.started:
                conn.notify_lost("closing")

    async def close(self, grace: float = 2.0) -> None:
        """Answer requests still waiting (503), give responses a moment to flush, then cut."""
        self.closing = True
        for conn in list(self.live):
            conn.notify_lost("closing")
        deadline = time.monotonic() + grace
        while self.live and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        for conn in list(self.live):
            conn.transport.abort()

    # --- one HTTP exchange -------------------------------------------------------------------

    async def serve(self, conn: HttpConnection) -> None:
        self.live.add(conn)
        try:
            try:
                async with asyncio.timeout(REQUEST_TIMEOUT_S):
                    request = await self.read_request(conn)
            except TimeoutError:
                raise ApiError(408, "the request was not received in time") from None
            if request is not None:
                await self.dispatch(conn, *request)
        except ApiError as exc:
            if not conn.head_sent:
                await conn.send_json(exc.status, exc.body())
                if conn.declared_body and not conn.body_read:
                    await conn.linger()
        except Exception as exc:  # a server bug: say so, keep the server
            traceback.print_exc(file=sys.stderr)
            if not conn.head_sent:
                error = ApiError(500, f"internal server error ({type(exc).__name__}: {exc})")
                await conn.send_json(500, error.body())
        finally:
            if conn.watch is not None:  # nobody waits for its turn any more
                conn.watch.give_up("lost")
                conn.watch.rt.unsubscribe(conn.watch)
            conn.finish()
            self.live.discard(conn)
            self.keys.pop(conn, None)

    async def read_request(self, conn: HttpConnection) -> tuple[str, str, bytes] | None:
        """(method, path, body) of an authorized request; the body is read only after the
        Host / bearer / Origin checks, and only up to the frame limit."""
        head = await conn.read_head()
        if head is None:
            return None
        method, path, headers, length = head
        server = self.server
        checked = auth.check_request(
            headers, server.options.policy, allowed_hosts=server.allowed_hosts, now=time.time()
        )
        if isinstance(checked, auth.Rejection):
            raise ApiError(checked.status, checked.message)
        conn.grant = checked
        key = next((v for k, v in headers if k.lower() == "idempotency-key"), None)
        if key is not None:
            if not key or len(key) > 255:
                raise ApiError(400, "the Idempotency-Key header must be 1-255 characters")
            self.keys[conn] = key
        limit = server.options.max_frame_bytes
        if length > limit:
            raise ApiError(
                413,
                f"the request body ({length} bytes) is larger than this server accepts "
                f"({limit} bytes, --max-frame-bytes)",
            )
        body = await conn.read_body(length, headers)
        return None if body is None else (method, path, body)

    async def dispatch(self, conn: HttpConnection, method: str, path: str, body: bytes) -> None:
        routes: dict[str, tuple[str, Callable[..., Any]]] = {
            "/v1/models": ("GET", self.models),
            "/v1/chat/completions": ("POST", self.chat_completions),
            "/v1/responses": ("POST", self.responses),
        }
        if path.startswith("/v1/models/") and method == "GET":
            model = self.model_entry(conn, path.removeprefix("/v1/models/"))
            await conn.send_json(200, model)
            return
        if path not in routes:
            raise ApiError(404, f"no such endpoint: {path}")
        allowed, handler = routes[path]
        if method != allowed:
            raise ApiError(405, f"{path} takes {allowed}, not {method}")
        if allowed == "GET":
            await conn.send_json(200, handler(conn))
        else:
            await handler(conn, _json_object(body))

    # --- endpoints ---------------------------------------------------------------------------

    def models(self, conn: HttpConnection) -> dict[str, Any]:
        agents = [
            a for a in self.server.ctx.store.list_agents() if conn.grant.refusal(a.id, None) is None
        ]
        return {"object": "list", "data": [_model(a.id, a.created_at) for a in agents]}

    def model_entry(self, conn: HttpConnection, agent_id: str) -> dict[str, Any]:
        record = self._agent(conn, agent_id)
        return _model(record.id, record.created_at)

    async def chat_completions(self, conn: HttpConnection, body: dict[str, Any]) -> None:
        agent_id = _model_field(body)
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise ApiError(400, "'messages' must be a non-empty list", "messages")
        n = len(messages) - 1
        last = messages[n]
        if not isinstance(last, dict) or last.get("role") != "user":
            raise ApiError(
                400,
                f"messages[{n}] must be the user message to send (the agent keeps its own history)",
                f"messages[{n}].role",
            )
        parts = _parts(last.get("content"), f"messages[{n}].content", "text", "image_url")
        stream = _stream_field(body)
        options = body.get("stream_options")
        include_usage = isinstance(options, dict) and options.get("include_usage") is True
        watch = await self._start_turn(conn, agent_id, parts, last.get("content"))
        ident, created = f"chatcmpl-{uuid.uuid4().hex}", int(time.time())
        base = {"id": ident, "created": created, "model": agent_id, "system_fingerprint": None}

        def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
            choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
            return {**base, "object": "chat.completion.chunk", "choices": [choice]}

        if not stream:
            finished = await watch.finished()
            await conn.send_json(
                200,
                {
                    **base,
                    "object": "chat.completion",
                    "choices": [
                        {
                            "index": 0,
                            "message": {
                                "role": "assistant",
                                "content": watch.text,
                                "refusal": None,
                            },
                            "logprobs": None,
                            "finish_reason": _finish_reason(finished),
                        }
                    ],
                    "usage": watch.chat_usage(),
                },
            )
            return
        await conn.start_sse()
        await conn.send_event(chunk({"role": "assistant", "content": ""}))
        try:
            async for piece in watch.texts():
                await conn.send_event(chunk({"content": piece}))
            finish = _finish_reason(watch.done)
        except ApiError as exc:
            await conn.send_event(exc.body())
        else:
            await conn.send_event(chunk({}, finish))
            if include_usage:
                await conn.send_event({**chunk({}), "choices": [], "usage": watch.chat_usage()})
        await conn.send_raw(b"data: [DONE]\n\n")

    async def responses(self, conn: HttpConnection, body: dict[str, Any]) -> None:
        agent_id = _model_field(body)
        value = body.get("input")
        where = "input"
        if isinstance(value, list) and value:
            where = f"input[{len(value) - 1}]"
            value = value[-1]
            if not isinstance(value, dict) or value.get("role") != "user":
                raise ApiError(400, f"{where} must be the user message to send", f"{where}.role")
            where, value = f"{where}.content", value.get("content")
        parts = _parts(value, where, "input_text", "input_image")
        stream = _stream_field(body)
        watch = await self._start_turn(conn, agent_id, parts, value)
        rid, mid = f"resp_{uuid.uuid4().hex}", f"msg_{uuid.uuid4().hex}"
        created = int(time.time())

        def response(
            status: str, text: str | None, error: ApiError | None = None
        ) -> dict[str, Any]:
            output = []
            if text is not None:
                part = {"type": "output_text", "text": text, "annotations": []}
                message = {"type": "message", "id": mid, "status": "completed"}
                output = [{**message, "role": "assistant", "content": [part]}]
            failure = error and {"code": error.code or "server_error", "message": error.message}
            return {
                **dict(id=rid, object="response", created_at=created, status=status),
                **dict(model=agent_id, output=output, error=failure, incomplete_details=None),
                **dict(parallel_tool_calls=False, tool_choice="none", tools=[], metadata={}),
                "usage": watch.responses_usage() if status == "completed" else None,
            }

        if not stream:
            await watch.finished()
            await conn.send_json(200, response("completed", watch.text))
            return
        seq = itertools.count()
        await conn.start_sse()

        async def event(kind: str, **fields: Any) -> None:
            await conn.send_event({"type": kind, "sequence_number": next(seq), **fields}, kind)

        at = {"item_id": mid, "output_index": 0, "content_index": 0}
        empty = {"type": "output_text", "text": "", "annotations": []}
        await event("response.created", response=response("in_progress", None))
        await event("response.in_progress", response=response("in_progress", None))
        item = {"type": "message", "id": mid, "status": "in_progress", "role": "assistant"}
        await event("response.output_item.added", output_index=0, item={**item, "content": []})
        await event("response.content_part.added", **at, part=empty)
        try:
            async for piece in watch.texts():
                await event("response.output_text.delta", **at, delta=piece)
        except ApiError as exc:
            await event("response.failed", response=response("failed", None, exc))
            return
        part = {**empty, "text": watch.text}
        await event("response.output_text.done", **at, text=watch.text)
        await event("response.content_part.done", **at, part=part)
        done_item = {**item, "status": "completed", "content": [part]}
        await event("response.output_item.done", output_index=0, item=done_item)
        await event("response.completed", response=response("completed", watch.text))

    # --- turns -------------------------------------------------------------------------------

    def _agent(self, conn: HttpConnection, agent_id: str) -> Any:
        refusal = conn.grant.refusal(agent_id, None)  # before the lookup: no existence oracle
        if refusal is not None:
            raise ApiError(403, refusal, "model", "model_not_granted")
        try:
            return self.server.ctx.store.get_agent(agent_id)
        except NotFound:
            raise ApiError(
                404,
                f"The model {agent_id!r} does not exist: models are agent ids (GET /v1/models)",
                "model",
                "model_not_found",
            ) from None

    def runtime_for(self, conn: HttpConnection, agent_id: str) -> ConversationRuntime:
        """The runtime of the agent's default conversation, shared with websocket clients."""
        from tether.server.idle_release import register_runtime
        from tether.server.runtime import ConversationRuntime
        from tether.server.runtime_start import (
            build_prepared,
            check_scoped_folder,
            check_workspace,
            effective_mode,
            sandbox_available,
        )

        server = self.server
        self._agent(conn, agent_id)
        scope = RuntimeScope(agent_id, server.ctx.store.default_conversation(agent_id).id)
        refusal = conn.grant.refusal(agent_id, scope.conversation_id)
        if refusal is not None:
            raise ApiError(403, refusal, "model", "model_not_granted")
        rt = server.runtimes.get(scope)
        if rt is None:
            home = server.ctx.store.home
            cwd = check_workspace(None, server.ctx.default_cwd, home, scoped=conn.grant.scoped)
            if conn.grant.scoped:
                check_scoped_folder(home, cwd)
            refusal = conn.grant.mode_refusal(effective_mode(home, cwd, None))
            if refusal is not None:
                raise ApiError(403, refusal, "model", "mode_not_granted")
            if conn.grant.scoped and (why := sandbox_available()) is not None:
                raise ApiError(403, f"a scoped token's conversations run in the workspace "
                                    f"sandbox, which cannot be enforced here: {why}")
            prepared = build_prepared(
                server.ctx, scope, cwd, None, workspace_sandbox=conn.grant.scoped
            )
            rt = ConversationRuntime(server.ctx, prepared, EventStream(scope, server.instance))
            register_runtime(server.ctx, server.runtimes, rt)
        refusal = conn.grant.mode_refusal(rt.p.flags.permission_mode)
        if refusal is not None:
            raise ApiError(403, refusal, "model", "mode_not_granted")
        if conn.grant.scoped and not rt.sandboxed:
            raise ApiError(403, "this agent's conversation runs without the workspace sandbox, "
                                "which a scoped token's conversations need", "model",
                           "sandbox_required")
        return rt

    async def _start_turn(
        self, conn: HttpConnection, agent_id: str, parts: tuple[UserPart, ...], content: Any
    ) -> TurnWatch:
        if self.closing:
            raise ApiError(503, "the server is shutting down")
        try:
            rt = self.runtime_for(conn, agent_id)
        except UsageError as exc:  # the request cannot be served as asked (workspace, mode)
            raise ApiError(400, f"cannot start agent {agent_id}: {exc}") from None
        except TetherError as exc:
            raise ApiError(500, f"cannot start agent {agent_id}: {exc}") from None
        watch = TurnWatch(rt, f"openai-{next(self._ids)}")
        rt.subscribe(watch)
        message = NewMessage(f"cm-{uuid.uuid4().hex[:12]}", parts, content)
        key = self.keys.get(conn)
        command = CreateMessage(watch.request_id, key, rt.scope, (message,))
        answer = await rt.enqueue(command, source=OPENAI_SOURCE)
        if not answer.accepted:
            rt.unsubscribe(watch)
            if answer.full:
                raise ApiError(429, str(answer.error), None, "conversation_queue_full")
            raise ApiError(503, str(answer.error), None, "input_not_accepted")
        if answer.duplicate and key is not None:
            join_first(watch, key, answer)
        watch.queue_item_id = answer.queue_item_id
        conn.watch = watch
        return watch


def _finish_reason(finished: TurnFinished | None) -> str:
    return _FINISH.get(finished.stop_reason, "stop") if finished is not None else "stop"


# --- request fields -----------------------------------------------------------------------------


def _json_object(body: bytes) -> dict[str, Any]:
    try:
        value = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise ApiError(400, f"the request body is not valid JSON: {exc}") from None
    if not isinstance(value, dict):
        raise ApiError(400, "the request body must be a JSON object")
    return value


def _model_field(body: dict[str, Any]) -> str:
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise ApiError(400, "'model' is required: an agent id (GET /v1/models)", "model")
    return model


def _stream_field(body: dict[str, Any]) -> bool:
    stream = body.get("stream", False)
    if stream is not None and not isinstance(stream, bool):
        raise ApiError(400, "'stream' must be a boolean", "stream")
    return bool(stream)


def _parts(content: Any, where: str, text_type: str, image_type: str) -> tuple[UserPart, ...]:
    """OpenAI message content (a string, or text and data-URL image parts) as message parts."""
    if isinstance(content, str):
        if content:
            return (TextPart(content),)
        raise ApiError(400, f"'{where}' must not be empty", where)
    if not isinstance(content, list) or not content:
        raise ApiError(400, f"'{where}' must be a string or a non-empty list of parts", where)
    parts: list[UserPart] = []
    for n, part in enumerate(content):
        at = f"{where}[{n}]"
        kind = part.get("type") if isinstance(part, dict) else None
        if kind == text_type and isinstance(part.get("text"), str):
            parts.append(TextPart(part["text"]))
        elif kind == image_type:
            url = part.get("image_url")
            url = url.get("url") if isinstance(url, dict) else url
            mime, _, data = str(url or "").removeprefix("data:").partition(";base64,")
            if not (isinstance(url, str) and url.startswith("data:") and data):
                raise ApiError(400, f"'{at}' must be a base64 data: URL", f"{at}.image_url")
            parts.append(ImagePart(data, mime))
        else:
            raise ApiError(
                400, f"'{at}.type' must be {text_type!r} or {image_type!r}", f"{at}.type"
            )
    return tuple(parts)


def _model(agent_id: str, created_at: str) -> dict[str, Any]:
    try:
        created = int(datetime.fromisoformat(created_at).timestamp())
    except ValueError:
        created = 0
    return {"id": agent_id, "object": "model", "created": created, "owned_by": "tether"}
