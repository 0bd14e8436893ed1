"""A real loopback HTTP server that plays a script of model turns in three provider dialects.

`FakeProvider(script)` serves Anthropic Messages (`/v1/messages`), OpenAI Responses
(`/v1/responses`, `/responses`) and Chat Completions (`/v1/chat/completions`,
`/chat/completions`) as streaming SSE, one script turn per model request whatever the dialect.
It records every request, refuses (400, recorded in `violations`) histories a real provider
would refuse, and injects faults: an HTTP status with Retry-After, a stream cut after N events,
a hang. Other processes drive it through `GET /_requests`, `GET /_violations` and
`POST /_script`. Standard library only (`python -m tether.testing.fake_provider --port 0`).

Script turn keys: text, thinking, tool_calls [{name, arguments (object or raw string), id?}],
usage {input, output, cached?, cache_write?}, chunk_size (default 7), stop (end_turn | max_tokens),
delay_ms, fault ({status, retry_after?, retry_after_ms?, body?} | {cut_after_events: N,
graceful?} | {hang: true}). A cut closes the connection mid chunked body; with `graceful: true`
the body ends cleanly, so only the missing terminal event tells the client it was cut. Keys
starting with "_" are comments; any other unknown key is an error (it is usually a typo).

Connection options (all off by default: every answer then closes its connection):
`keep_alive=True` serves many requests per connection and closes one idle for
`idle_timeout_s` (a FIN, as real servers do); `tls=True` serves https with a throwaway
self-signed certificate (`ca_file` is what clients trust, via SSL_CERT_FILE); `rtt_ms` adds a
network round trip per TCP handshake, per TLS handshake and per request, standing in for a
hosted API. `connections`, `handshakes` and `resumed_handshakes` count what was accepted
(also `GET /_stats`), and each recorded request names the connection it came on.
"""

from __future__ import annotations

import argparse
import itertools
import json
import signal
import socket
import sys
import tempfile
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from tether.testing.fake_dialects import EVENT_BUILDERS, Plan, error_body
from tether.testing.fake_invariants import CHECKS

DIALECTS = {
    "/v1/messages": "anthropic",
    "/v1/responses": "responses",
    "/responses": "responses",
    "/v1/chat/completions": "chat",
    "/chat/completions": "chat",
}
EXHAUSTED = {"error": "fake provider script exhausted"}
_TURN_KEYS = frozenset(
    {"text", "thinking", "tool_calls", "usage", "chunk_size", "stop", "delay_ms", "fault"}
)
_HANG_LIMIT_S = 600.0


def validate_script(script: Any) -> list[dict[str, Any]]:
    """The script as a list of turns, or ValueError naming the first bad turn and key."""
    if not isinstance(script, list):
        raise ValueError(
            f"fake provider script must be a JSON list of turns, got {type(script).__name__}"
        )
    for n, turn in enumerate(script):
        where = f"script turn {n}"
        if not isinstance(turn, dict):
            raise ValueError(f"{where} must be an object")
        unknown = {k for k in turn if not k.startswith("_")} - _TURN_KEYS  # "_x": a comment
        if unknown:
            raise ValueError(
                f"{where}: unknown keys {sorted(unknown)}; allowed: {sorted(_TURN_KEYS)}"
            )
        for call in turn.get("tool_calls") or []:
            if not isinstance(call, dict) or not isinstance(call.get("name"), str):
                raise ValueError(f"{where}: each tool call needs a string 'name'")
        if turn.get("stop", "end_turn") not in ("end_turn", "max_tokens"):
            raise ValueError(f"{where}: stop must be 'end_turn' or 'max_tokens'")
        fault = turn.get("fault")
        if fault is not None and not (
            isinstance(fault, dict)
            and (
                isinstance(fault.get("status"), int)
                or isinstance(fault.get("cut_after_events"), int)
                or fault.get("hang") is True
            )
        ):
            raise ValueError(
                f"{where}: fault must be {{status: int}}, {{cut_after_events: int}} or {{hang: true}}"
            )
    return list(script)


class FakeProvider:
    """Use as a context manager, or `start()` / `stop()`. `url` is `http://127.0.0.1:PORT`."""

    def __init__(
        self,
        script: list[dict[str, Any]] | None = None,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        keep_alive: bool = False,
        tls: bool = False,
        rtt_ms: float = 0.0,
        idle_timeout_s: float = 5.0,
        cert_dir: str | Path | None = None,
    ) -> None:
        if rtt_ms < 0 or idle_timeout_s <= 0:
            raise ValueError(
                f"rtt_ms must be >= 0 and idle_timeout_s > 0 (got {rtt_ms}, {idle_timeout_s})"
            )
        self.keep_alive = keep_alive
        self.rtt_s = rtt_ms / 1000
        self.idle_timeout_s = idle_timeout_s
        self.tls = tls
        self._cert_dir = Path(cert_dir) if cert_dir is not None else None
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        self.ca_file: Path | None = None
        self.connections = 0
        self.handshakes = 0
        self.resumed_handshakes = 0
        self._lock = threading.Lock()
        self._script = validate_script(script or [])
        self._cursor = 0
        self._ids = itertools.count(1)
        self._host, self._port = host, port
        self._stopping = threading.Event()
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None
        self.requests: list[dict[str, Any]] = []
        self.violations: list[dict[str, Any]] = []

    # --- lifecycle -------------------------------------------------------------------------

    def start(self) -> FakeProvider:
        if self._server is not None:
            return self
        server = _Server((self._host, self._port), _Handler)
        server.fake = self
        if self.tls:
            from tether.testing.fake_tls import self_signed_certificate, server_context

            if self._cert_dir is None:
                self._tmp = tempfile.TemporaryDirectory(prefix="fake-provider-tls-")
                self._cert_dir = Path(self._tmp.name)
            cert, key = self_signed_certificate(self._cert_dir)
            self.ca_file = cert
            server.tls = server_context(cert, key)
        self._server = server
        self._thread = threading.Thread(
            target=server.serve_forever,
            kwargs={"poll_interval": 0.02},
            daemon=True,
            name="fake-provider",
        )
        self._thread.start()
        return self

    def stop(self) -> None:
        server, self._server = self._server, None
        if server is None:
            return
        self._stopping.set()  # releases handlers sleeping in delay_ms or hang
        server.shutdown()
        server.wake_idle_connections()
        server.server_close()  # joins the handler threads
        if self._thread is not None:
            self._thread.join()
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None

    def __enter__(self) -> FakeProvider:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def url(self) -> str:
        if self._server is None:
            raise RuntimeError(
                "FakeProvider is not running: call start() or use it as a context manager"
            )
        host, port = self._server.server_address[:2]
        return f"{'https' if self.tls else 'http'}://{host!s}:{port}"

    # --- script and records (called from handler threads) ----------------------------------

    def set_script(self, script: list[dict[str, Any]]) -> None:
        """Replace the script and start again from its first turn."""
        checked = validate_script(script)
        with self._lock:
            self._script, self._cursor = checked, 0

    @property
    def remaining(self) -> int:
        with self._lock:
            return len(self._script) - self._cursor

    def _next_turn(self) -> dict[str, Any] | None:
        with self._lock:
            if self._cursor >= len(self._script):
                return None
            self._cursor += 1
            return self._script[self._cursor - 1]

    def _next_id(self) -> int:
        with self._lock:
            return next(self._ids)

    def _record(self, path: str, headers: dict[str, str], body: Any, connection: int = 0) -> int:
        with self._lock:
            self.requests.append(
                {"path": path, "headers": headers, "body": body, "connection": connection}
            )
            return len(self.requests) - 1

    def _connected(self, handshake: bool = False, resumed: bool = False) -> int:
        """Count a connection (or its TLS handshake); returns the connection's number."""
        with self._lock:
            if handshake:
                self.handshakes += 1
                self.resumed_handshakes += resumed
                return self.connections - 1
            self.connections += 1
            return self.connections - 1

    def stats(self) -> dict[str, int]:
        with self._lock:
            return {
                "connections": self.connections,
                "handshakes": self.handshakes,
                "resumed_handshakes": self.resumed_handshakes,
                "requests": len(self.requests),
            }

    def _violation(self, index: int, path: str, problems: list[str]) -> None:
        with self._lock:
            self.violations.append({"request": index, "path": path, "problems": problems})

    def _snapshot(self, what: str) -> list[dict[str, Any]]:
        with self._lock:
            return list(self.requests if what == "requests" else self.violations)


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

    def do_GET(self) -> None:
        path = urlsplit(self.path).path
        if path == "/_requests":
            self._json(200, self.server.fake._snapshot("requests"))
        elif path == "/_violations":
            self._json(200, self.server.fake._snapshot("violations"))
        elif path == "/_stats":
            self._json(200, self.server.fake.stats())
        else:
            self._json(404, {"error": f"no such endpoint: GET {path}"})

    def do_POST(self) -> None:
        fake = self.server.fake
        path = urlsplit(self.path).path
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        try:
            body = json.loads(raw) if raw else None
        except ValueError:
            body = None
            if path in DIALECTS or path == "/_script":
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
        dialect = DIALECTS.get(path)
        if dialect is None:
            self._json(404, {"error": f"no such endpoint: POST {path}"})
            return
        index = fake._record(
            path, {k.lower(): v for k, v in self.headers.items()}, body, self.connection_number
        )
        if not isinstance(body, dict):
            self._json(400, error_body(dialect, 400, "request body must be a JSON object"))
            return
        problems = CHECKS[dialect](body)
        if problems:
            fake._violation(index, path, problems)
            self._json(400, error_body(dialect, 400, "; ".join(problems)))
            return
        turn = fake._next_turn()
        if turn is None:
            self._json(500, EXHAUSTED)
            return
        if fake.rtt_s and fake._stopping.wait(fake.rtt_s):  # the request's round trip
            return
        if turn.get("delay_ms") and fake._stopping.wait(turn["delay_ms"] / 1000):
            return
        self._answer(dialect, body, turn)

    def _answer(self, dialect: str, body: dict[str, Any], turn: dict[str, Any]) -> None:
        fake = self.server.fake
        fault = turn.get("fault") or {}
        if fault.get("hang"):
            fake._stopping.wait(_HANG_LIMIT_S)
            self.close_connection = True
            return
        if "status" in fault:
            self._fault(dialect, fault)
            return
        events = EVENT_BUILDERS[dialect](Plan.from_turn(turn, body), body, fake._next_id)
        limit = fault.get("cut_after_events")
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream; charset=utf-8")
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
            body = error_body(dialect, status, f"fake provider fault: HTTP {status}")
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m tether.testing.fake_provider",
        description="Serve a script of model turns as Anthropic / OpenAI streaming APIs on loopback.",
    )
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port (default)")
    parser.add_argument(
        "--script", metavar="FILE", help="JSON list of turns (replace later with POST /_script)"
    )
    parser.add_argument(
        "--keep-alive", action="store_true", help="serve many requests per connection"
    )
    parser.add_argument(
        "--idle-timeout",
        type=float,
        default=5.0,
        metavar="S",
        help="with --keep-alive: close a connection idle this long (default 5)",
    )
    parser.add_argument(
        "--tls", action="store_true", help="serve https with a self-signed certificate"
    )
    parser.add_argument(
        "--cert-dir",
        metavar="DIR",
        help="with --tls: write cert.pem (trust it via SSL_CERT_FILE) and key.pem here",
    )
    parser.add_argument(
        "--rtt-ms",
        type=float,
        default=0.0,
        help="add this round trip per TCP handshake, TLS handshake and request",
    )
    args = parser.parse_args(argv)
    if args.rtt_ms < 0 or args.idle_timeout <= 0:
        parser.error("--rtt-ms must be >= 0 and --idle-timeout > 0")
    if args.cert_dir and not args.tls:
        parser.error("--cert-dir only applies with --tls")
    script: Any = []
    if args.script:
        try:
            with open(args.script, encoding="utf-8") as f:
                script = json.load(f)
            validate_script(script)
        except (OSError, ValueError) as exc:
            print(f"fake_provider: cannot use script {args.script}: {exc}", file=sys.stderr)
            return 2
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    options = {
        "keep_alive": args.keep_alive,
        "idle_timeout_s": args.idle_timeout,
        "tls": args.tls,
        "cert_dir": args.cert_dir,
        "rtt_ms": args.rtt_ms,
    }
    with FakeProvider(script, host=args.host, port=args.port, **options) as fake:
        print(fake.url, flush=True)
        while not stop.wait(0.2):
            pass
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
