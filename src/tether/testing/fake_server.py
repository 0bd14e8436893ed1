"""The fake provider's HTTP side: the threaded server, which dialect a request's route speaks, the
checks it must pass, and how an answer (SSE or AWS event stream), a fault or a listing is written.

`fake_provider.FakeProvider` owns the script and the records; this module only serves them.
Standard library only, except the Bedrock signature check (botocore, imported on that route).
"""

from __future__ import annotations

import json
import re
import socket
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING, Any
from urllib.parse import unquote, urlsplit

from tether.testing.fake_dialects import EVENT_BUILDERS, Plan, error_body
from tether.testing.fake_invariants import CHECKS

if TYPE_CHECKING:
    from tether.testing.fake_provider import FakeProvider

# Exact POST paths of the three core dialects; Chat Completions also under any prefix
# (OpenRouter's /api/v1, z.ai's /api/paas/v4), Gemini and Bedrock by pattern.
DIALECTS = {
    "/v1/messages": "anthropic",
    "/v1/responses": "responses",
    "/responses": "responses",
    "/v1/chat/completions": "chat",
    "/chat/completions": "chat",
}
EXHAUSTED = {"error": "fake provider script exhausted"}
_GEMINI = re.compile(r"/(?:[^/]+/)*models/(?P<model>[^/:]+):streamGenerateContent")
_BEDROCK = re.compile(r"/model/(?P<model>[^/]+)/invoke-with-response-stream")
_CONTENT_TYPE = {"bedrock": "application/vnd.amazon.eventstream"}
_HANG_LIMIT_S = 600.0


def route(path: str) -> tuple[str, str | None] | None:
    """(dialect, model named by the path) for a POST path, or None when nothing serves it."""
    if path in DIALECTS:
        return DIALECTS[path], None
    if path.endswith("/chat/completions"):
        return "chat", None
    if match := _GEMINI.fullmatch(path):
        return "gemini", match["model"]
    if match := _BEDROCK.fullmatch(path):
        return "bedrock", unquote(match["model"])
    return None


def dialect_error(dialect: str, status: int, message: str) -> dict[str, Any]:
    """An error body in the shape the dialect's real service sends."""
    if dialect == "gemini":
        from tether.testing.fake_gemini import gemini_error

        return gemini_error(status, message)
    if dialect == "bedrock":
        return {"message": message}
    return error_body(dialect, status, message)


def request_problems(
    dialect: str, query: str, headers: dict[str, str], body: dict[str, Any]
) -> list[str]:
    """What the real service would refuse with a 400 (every tool result answers a call, …)."""
    if dialect == "gemini":
        from tether.testing.fake_gemini import check_gemini

        problems = check_gemini(body, headers)
        if "alt=sse" not in query.split("&"):
            problems.append("streamGenerateContent without alt=sse answers a JSON array, not SSE")
        return problems
    if dialect == "bedrock":
        from tether.testing.fake_bedrock import check_bedrock_body

        return check_bedrock_body(body) + CHECKS["anthropic"](body)
    return CHECKS[dialect](body)


def build_events(
    dialect: str, turn: dict[str, Any], body: dict[str, Any], model: str | None, fake: FakeProvider
) -> list[bytes]:
    plan = Plan.from_turn(turn, body)
    if dialect == "gemini":
        from tether.testing.fake_gemini import gemini_events

        return gemini_events(plan, model or "gemini", fake._next_id, turn)
    if dialect == "bedrock":
        from tether.testing.fake_bedrock import bedrock_frames

        return bedrock_frames(plan, body, fake._next_id, turn)
    return EVENT_BUILDERS[dialect](plan, body, fake._next_id)


class _Server(ThreadingHTTPServer):
    # Join handler threads on close (tests must not leak sockets). Without keep-alive every
    # response closes its connection; with it, `wake_idle_connections` ends the idle reads.
    daemon_threads = False
    block_on_close = True
    fake: FakeProvider
    tls: Any = None  # an ssl.SSLContext in TLS mode

    def __init__(self, *args: Any, **kw: Any) -> None:
        super().__init__(*args, **kw)
        self._open: set[socket.socket] = set()
        self._open_lock = threading.Lock()

    def get_request(self) -> tuple[Any, Any]:
        sock, addr = super().get_request()
        if self.fake.keep_alive:
            # Each SSE event is its own small write; without this, Nagle holds the body's last
            # bytes for the client's delayed ACK (~40 ms), which only a connection still open
            # after the answer would notice. Real API servers send immediately too.
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if self.tls is not None:  # the handshake runs in the handler thread, after the RTT
            sock = self.tls.wrap_socket(sock, server_side=True, do_handshake_on_connect=False)
        with self._open_lock:
            self._open.add(sock)
        return sock, addr

    def shutdown_request(self, request: Any) -> None:
        with self._open_lock:
            self._open.discard(request)
        super().shutdown_request(request)

    def wake_idle_connections(self) -> None:
        with self._open_lock:
            for sock in self._open:
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass

    def handle_error(self, request: Any, client_address: Any) -> None:
        import ssl

        if isinstance(sys.exc_info()[1], (OSError, ssl.SSLError)):
            return  # a client that went away or failed its handshake: nothing to report
        super().handle_error(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    timeout = 30  # a client that never sends its body does not pin a thread forever
    server: _Server
    connection_number = 0

    def setup(self) -> None:
        fake = self.server.fake
        self.connection_number = fake._connected()
        if fake.rtt_s:
            fake._stopping.wait(fake.rtt_s)  # the TCP handshake's round trip
        if self.server.tls is not None:
            if fake.rtt_s:
                fake._stopping.wait(fake.rtt_s)  # TLS 1.3: one more, full or resumed
            self.request.settimeout(self.timeout)
            self.request.do_handshake()
            fake._connected(handshake=True, resumed=self.request.session_reused)
        super().setup()
        if fake.keep_alive:  # an idle connection is closed after this (its reads time out)
            self.connection.settimeout(fake.idle_timeout_s)

    def log_message(self, format: str, *args: Any) -> None:
        pass  # quiet: tests read `requests`, not stderr

    def _target(self) -> tuple[str, str, str]:
        """(path, query, path?query as recorded)."""
        parts = urlsplit(self.path)
        return parts.path, parts.query, parts.path + (f"?{parts.query}" if parts.query else "")

    def _headers(self) -> dict[str, str]:
        return {k.lower(): v for k, v in self.headers.items()}

    def do_GET(self) -> None:
        fake = self.server.fake
        path, _, target = self._target()
        if path in ("/_requests", "/_violations"):
            self._json(200, fake._snapshot(path[2:]))
        elif path == "/_stats":
            self._json(200, fake.stats())
        elif fake.models is not None and (listing := self._listing(path)) is not None:
            fake._record({"kind": "list", "path": target, "headers": self._headers(),
                          "body": None, "connection": self.connection_number})  # fmt: skip
            self._json(200, listing)
        else:
            self._json(404, {"error": f"no such endpoint: GET {path}"})

    def _listing(self, path: str) -> dict[str, Any] | None:
        """The model listings discovery asks for: Ollama's, Gemini's, OpenAI's `/models`."""
        fake = self.server.fake
        rows = [m if isinstance(m, dict) else {"id": m} for m in fake.models or []]
        if fake.ollama and path in ("/api/tags", "/api/ps"):
            names = [str(m["id"]) for m in rows][: 1 if path == "/api/ps" else None]
            return {"models": [{"name": n, "model": n, "size": 1} for n in names]}
        if path.endswith("/models") and "/v1beta/" in path:
            return {"models": [
                {"name": f"models/{m['id']}", "inputTokenLimit": m.get("context_length"),
                 "supportedGenerationMethods": m.get("methods", ["generateContent"])}
                for m in rows
            ]}  # fmt: skip
        if path.endswith("/models"):
            data = [{"object": "model", "owned_by": "fake", **m} for m in rows]
            return {"object": "list", "data": data}
        return None

    def do_POST(self) -> None:
        fake = self.server.fake
        path, query, target = self._target()
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        routed = route(path)
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = None
            if routed is not None or path == "/_script":
                self._json(400, {"error": f"request body is not JSON: {raw[:200]!r}"})
                return
        if path == "/_script":
            script = body.get("script") if isinstance(body, dict) else body
            try:
                fake.set_script(script)  # type: ignore[arg-type]
            except ValueError as exc:
                self._json(400, {"error": str(exc)})
                return
            self._json(200, {"ok": True, "turns": len(script)})  # type: ignore[arg-type]
            return
        if routed is None:
            self._json(404, {"error": f"no such endpoint: POST {path}"})
            return
        dialect, model = routed
        headers = self._headers()
        entry: dict[str, Any] = {
            "path": target,
            "headers": headers,
            "body": body,
            "connection": self.connection_number,
            "kind": dialect,
            "model": model or (body.get("model") if isinstance(body, dict) else None),
        }
        index = fake._record(entry)
        if dialect == "bedrock" and not self._signed(index, entry, raw):
            return
        if not isinstance(body, dict):
            self._json(400, dialect_error(dialect, 400, "request body must be a JSON object"))
            return
        problems = request_problems(dialect, query, headers, body)
        if problems:
            fake._violation(index, target, problems)
            self._json(400, dialect_error(dialect, 400, "; ".join(problems)))
            return
        turn = fake._next_turn()
        if turn is None:
            self._json(500, EXHAUSTED)
            return
        if fake.rtt_s and fake._stopping.wait(fake.rtt_s):  # the request's round trip
            return
        if turn.get("delay_ms") and fake._stopping.wait(turn["delay_ms"] / 1000):
            return
        self._answer(dialect, model, body, turn)

    def _signed(self, index: int, entry: dict[str, Any], raw: bytes) -> bool:
        """Bedrock checks every SigV4 signature (with botocore's signer), as AWS does: 403 if bad."""
        from tether.testing.fake_bedrock import verify_sigv4

        fake = self.server.fake
        headers = entry["headers"]
        url = f"http://{headers.get('host')}{self.path}"  # the scheme is not signed
        why = verify_sigv4("POST", url, headers, raw, fake.aws_secrets, region=fake.region)
        entry["signature"] = why or "valid"
        if why is None:
            return True
        fake._violation(index, entry["path"], [f"signature: {why}"])
        message = f"The request signature we calculated does not match ({why})"
        self._json(403, {"message": message}, {"x-amzn-ErrorType": "InvalidSignatureException"})
        return False

    def _answer(
        self, dialect: str, model: str | None, body: dict[str, Any], turn: dict[str, Any]
    ) -> None:
        fake = self.server.fake
        fault = turn.get("fault") or {}
        if fault.get("hang"):
            fake._stopping.wait(_HANG_LIMIT_S)
            self.close_connection = True
            return
        if "status" in fault:
            self._fault(dialect, fault)
            return
        events = build_events(dialect, turn, body, model, fake)
        limit = fault.get("cut_after_events")
        self.send_response(200)
        self.send_header(
            "Content-Type", _CONTENT_TYPE.get(dialect, "text/event-stream; charset=utf-8")
        )
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        keep = fake.keep_alive and limit is None
        if not keep:
            self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = not keep
        try:
            for event in events if limit is None else events[:limit]:
                self.wfile.write(b"%x\r\n%s\r\n" % (len(event), event))
            # A cut stream leaves its chunked body unfinished, unless `graceful` asks for a
            # clean end of body that still lacks the dialect's terminal event.
            if limit is None or fault.get("graceful"):
                self.wfile.write(b"0\r\n\r\n")
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client went away; nothing to tell it

    def _fault(self, dialect: str, fault: dict[str, Any]) -> None:
        status = int(fault["status"])
        headers = {}
        if fault.get("retry_after") is not None:
            headers["Retry-After"] = str(fault["retry_after"])
        if fault.get("retry_after_ms") is not None:
            headers["retry-after-ms"] = str(fault["retry_after_ms"])
        body = fault.get("body")
        if body is None:
            body = dialect_error(dialect, status, f"fake provider fault: HTTP {status}")
        self._json(status, body, headers)

    def _json(self, status: int, payload: Any, headers: dict[str, str] | None = None) -> None:
        data = payload.encode() if isinstance(payload, str) else json.dumps(payload).encode()
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            if not self.server.fake.keep_alive:
                self.send_header("Connection", "close")
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
            return
        self.close_connection = not self.server.fake.keep_alive
