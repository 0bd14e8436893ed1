"""A loopback server for the providers beyond the three core dialects: Gemini, Bedrock (event
stream, SigV4-checked), any OpenAI-compatible preset path, and model listings for discovery.

`FakeMoreProviders(script, models=[...], ollama=True, aws_secrets={key: secret}, region=...)`
plays one script turn per model request, like `fake_provider.FakeProvider` (same turn keys, plus
`finish` / `block` for Gemini and `exception` for Bedrock), records every request (`requests`,
with the raw path and, for Bedrock, the signature verdict) and refuses what the real service
would (`violations`). Routes:

- `POST …/models/{model}:streamGenerateContent?alt=sse`: Gemini
- `POST /model/{id}/invoke-with-response-stream`: Bedrock (403 on a bad signature)
- `POST …/chat/completions` (any prefix: OpenRouter, Groq, z.ai paths): Chat Completions
- `GET …/models`: `{"data": [...]}` from `models` (Gemini's `{"models": [...]}` under /v1beta/); `GET /api/tags`, `/api/ps`: Ollama's listings
  when `ollama` (the first of `models` counts as loaded)

Standard library only, but the Bedrock signature check imports botocore.
"""

from __future__ import annotations

import itertools
import json
import re
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import unquote, urlsplit

from tether.testing.fake_bedrock import bedrock_frames, check_bedrock_body, verify_sigv4
from tether.testing.fake_dialects import EVENT_BUILDERS, Plan, error_body
from tether.testing.fake_gemini import check_gemini, gemini_error, gemini_events
from tether.testing.fake_invariants import CHECKS
from tether.testing.fake_provider import EXHAUSTED, validate_script

_EXTRA_KEYS = ("finish", "block", "exception")
_GEMINI = re.compile(r"/(?:[^/]+/)*models/(?P<model>[^/:]+):streamGenerateContent")
_BEDROCK = re.compile(r"/model/(?P<model>[^/]+)/invoke-with-response-stream")


def _validate(script: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The common turn checks, on each turn without this server's own keys."""
    common = [{k: v for k, v in t.items() if k not in _EXTRA_KEYS} for t in script]
    validate_script(common)
    return [dict(t) for t in script]


class FakeMoreProviders:
    def __init__(
        self,
        script: list[dict[str, Any]] | None = None,
        *,
        models: list[Any] | None = None,
        ollama: bool = False,
        aws_secrets: dict[str, str] | None = None,
        region: str = "us-east-1",
    ) -> None:
        self._lock = threading.Lock()
        self._script = _validate(script or [])
        self._cursor = 0
        self._ids = itertools.count(1)
        self.models = list(models or [])
        self.ollama = ollama
        self.aws_secrets = dict(aws_secrets or {})
        self.region = region
        self.requests: list[dict[str, Any]] = []
        self.violations: list[dict[str, Any]] = []
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None
        self._stopping = threading.Event()  # releases handlers held by a `hang` fault

    def __enter__(self) -> FakeMoreProviders:
        server = _Server(("127.0.0.1", 0), _Handler)
        server.fake = self
        self._server = server
        self._thread = threading.Thread(
            target=server.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True
        )
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        server, self._server = self._server, None
        self._stopping.set()
        if server is not None:
            server.shutdown()
            server.server_close()
        if self._thread is not None:
            self._thread.join()

    @property
    def url(self) -> str:
        assert self._server is not None, "use FakeMoreProviders as a context manager"
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}"

    def of(self, kind: str) -> list[dict[str, Any]]:
        """The recorded requests of one kind: gemini | bedrock | chat | list."""
        with self._lock:
            return [r for r in self.requests if r["kind"] == kind]

    def _next_turn(self) -> dict[str, Any] | None:
        with self._lock:
            if self._cursor >= len(self._script):
                return None
            self._cursor += 1
            return self._script[self._cursor - 1]

    def _record(self, entry: dict[str, Any]) -> None:
        with self._lock:
            self.requests.append(entry)

    def _violation(self, path: str, problems: list[str]) -> None:
        with self._lock:
            self.violations.append({"path": path, "problems": problems})


class _Server(ThreadingHTTPServer):
    daemon_threads = False
    block_on_close = True
    fake: FakeMoreProviders


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    timeout = 30
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:
        pass

    def do_GET(self) -> None:
        fake = self.server.fake
        path = urlsplit(self.path).path
        fake._record({"kind": "list", "path": self.path, "headers": self._headers(), "body": None})
        if fake.ollama and path in ("/api/tags", "/api/ps"):
            names = [m if isinstance(m, str) else m["id"] for m in fake.models]
            names = names[:1] if path == "/api/ps" else names
            self._send(200, {"models": [{"name": n, "model": n, "size": 1} for n in names]})
        elif path.endswith("/models") and "/v1beta/" in path:  # Gemini's own listing shape
            rows = [m if isinstance(m, dict) else {"id": m} for m in fake.models]
            self._send(200, {"models": [
                {"name": f"models/{m['id']}", "inputTokenLimit": m.get("context_length"),
                 "supportedGenerationMethods": m.get("methods", ["generateContent"])}
                for m in rows
            ]})  # fmt: skip
        elif path.endswith("/models"):
            data = [
                {"id": m, "object": "model", "owned_by": "fake"} if isinstance(m, str) else m
                for m in fake.models
            ]
            self._send(200, {"object": "list", "data": data})
        else:
            self._send(404, {"error": f"no such endpoint: GET {path}"})

    def do_POST(self) -> None:
        fake = self.server.fake
        parts = urlsplit(self.path)
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        headers = self._headers()
        try:
            body = json.loads(raw)
        except ValueError:
            body = None
        gemini, bedrock = _GEMINI.fullmatch(parts.path), _BEDROCK.fullmatch(parts.path)
        if gemini:
            kind, model = "gemini", gemini["model"]
        elif bedrock:
            kind, model = "bedrock", unquote(bedrock["model"])
        elif parts.path.endswith("/chat/completions"):
            kind, model = "chat", str((body or {}).get("model", ""))
        else:
            self._send(404, {"error": f"no such endpoint: POST {parts.path}"})
            return
        entry: dict[str, Any] = {
            "kind": kind,
            "path": self.path,
            "model": model,
            "headers": headers,
            "body": body,
        }
        fake._record(entry)
        problems = self._problems(kind, parts.query, headers, body, raw)
        if kind == "bedrock" and fake.aws_secrets:
            why = verify_sigv4("POST", f"http://{headers.get('host')}{self.path}", headers, raw,
                               fake.aws_secrets, region=fake.region)  # fmt: skip
            entry["signature"] = why or "valid"
            if why:
                fake._violation(self.path, [f"signature: {why}"])
                self._send(
                    403, {"message": f"The request signature we calculated does not match ({why})"}
                )
                return
        if problems:
            fake._violation(self.path, problems)
            self._send(400, self._error(kind, "; ".join(problems)))
            return
        turn = fake._next_turn()
        if turn is None:
            self._send(500, EXHAUSTED)
            return
        fault = turn.get("fault") or {}
        if fault.get("hang"):  # the request arrived; the answer never starts
            fake._stopping.wait(600)
            self.close_connection = True
            return
        if "status" in fault:
            extra = {"Retry-After": str(fault["retry_after"])} if "retry_after" in fault else {}
            self._send(int(fault["status"]), self._error(kind, "fake fault"), extra)
            return
        plan = Plan.from_turn(turn, body)
        ids = fake._ids.__next__
        if kind == "gemini":
            events = gemini_events(plan, model, ids, turn)
            ctype = "text/event-stream"
        elif kind == "bedrock":
            events = bedrock_frames(plan, body, ids, turn)
            ctype = "application/vnd.amazon.eventstream"
        else:
            events = EVENT_BUILDERS["chat"](plan, body, ids)
            ctype = "text/event-stream"
        limit = fault.get("cut_after_events")
        cut = limit is not None and not fault.get(
            "graceful"
        )  # graceful: a clean end, no final event
        self._stream(ctype, events if limit is None else events[:limit], cut=cut)

    def _problems(
        self, kind: str, query: str, headers: dict[str, str], body: Any, raw: bytes
    ) -> list[str]:
        if not isinstance(body, dict):
            return [f"request body is not a JSON object: {raw[:100]!r}"]
        if kind == "gemini":
            problems = check_gemini(body, headers)
            if "alt=sse" not in query.split("&"):
                problems.append(
                    "streamGenerateContent without alt=sse answers a JSON array, not SSE"
                )
            return problems
        if kind == "bedrock":
            return check_bedrock_body(body) + CHECKS["anthropic"]({**body, "model": "m"})
        return CHECKS["chat"](body)

    def _error(self, kind: str, message: str) -> dict[str, Any]:
        if kind == "gemini":
            return gemini_error(400, message)
        if kind == "bedrock":
            return {"message": message}
        return error_body("chat", 400, message)

    def _headers(self) -> dict[str, str]:
        return {k.lower(): v for k, v in self.headers.items()}

    def _stream(self, ctype: str, events: list[bytes], *, cut: bool) -> None:
        self.send_response(200)
        self.send_header("Content-Type", ctype)
        self.send_header("Transfer-Encoding", "chunked")
        self.send_header("Connection", "close")
        self.end_headers()
        self.close_connection = True
        try:
            for event in events:
                self.wfile.write(b"%x\r\n%s\r\n" % (len(event), event))
            if not cut:
                self.wfile.write(b"0\r\n\r\n")
        except (BrokenPipeError, ConnectionResetError):
            pass

    def _send(self, status: int, payload: Any, headers: dict[str, str] | None = None) -> None:
        data = json.dumps(payload).encode()
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.send_header("Connection", "close")
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            pass
        self.close_connection = True
