"""A real loopback HTTP server that plays a script of model turns in five provider dialects.

`FakeProvider(script)` serves Anthropic Messages (`/v1/messages`), OpenAI Responses
(`/v1/responses`, `/responses`), Chat Completions (`…/chat/completions`, any prefix), Gemini
(`…/models/{model}:streamGenerateContent?alt=sse`) as streaming SSE, and Bedrock
(`/model/{id}/invoke-with-response-stream`: AWS event-stream frames around Anthropic events, every
SigV4 signature checked with botocore against `aws_secrets`, 403 when wrong), one script turn per
model request whatever the dialect. It records every request (`requests`, each with its `kind`
= dialect, `model`, and for Bedrock the `signature` verdict; `of(kind)` filters them), refuses
(400, recorded in `violations`) histories a real provider would refuse, and injects faults: an
HTTP status with Retry-After, a stream cut after N events, a hang. With `models=[...]` it also
answers the listings discovery asks for (`GET …/models`, Gemini's under /v1beta/, and with
`ollama=True` `/api/tags` and `/api/ps`), recorded as kind `list`. Other processes drive it
through `GET /_requests`, `GET /_violations` and `POST /_script`. Standard library only, but
the Bedrock route imports botocore (`python -m tether.testing.fake_provider --port 0`).

Script turn keys: text, thinking, tool_calls [{name, arguments (object or raw string), id?}],
usage {input, output, cached?, cache_write?}, chunk_size (default 7), stop (end_turn | max_tokens),
delay_ms, fault ({status, retry_after?, retry_after_ms?, body?} | {cut_after_events: N,
graceful?} | {hang: true}); Gemini only: finish (a finishReason such as SAFETY, after the text),
block (a promptFeedback blockReason: no candidates); Bedrock only: exception (an exception
frame such as throttlingException instead of the answer). Every dialect but Gemini streams a
tool call's arguments in `chunk_size` pieces; Gemini sends each call whole, with an id (none when
the script's id is ""). A cut closes the connection mid chunked body; with `graceful: true`
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
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

# `_Server`, `_Handler` and the route table stay importable from here (tests subclass them).
from tether.testing.fake_server import DIALECTS, EXHAUSTED, _Handler, _Server

__all__ = ["DIALECTS", "EXHAUSTED", "FAKE_AWS_KEYS", "FakeProvider", "_Handler", "_Server"]

# The key pair the Bedrock route accepts unless told otherwise (`AWS_ACCESS_KEY_ID` /
# `AWS_SECRET_ACCESS_KEY` of a test run); region us-east-1.
FAKE_AWS_KEYS = {"AKIDTETHERFAKE": "tether/fake/secret"}
_TURN_KEYS = frozenset(
    {"text", "thinking", "tool_calls", "usage", "chunk_size", "stop", "delay_ms", "fault",
     "finish", "block", "exception"}
)  # fmt: skip
_NAMES = ("finish", "block", "exception")  # dialect-only keys, each a string when given


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
        for key in _NAMES:
            if key in turn and not (isinstance(turn[key], str) and turn[key]):
                raise ValueError(f"{where}: {key} must be a non-empty string")
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
        models: list[Any] | None = None,
        ollama: bool = False,
        aws_secrets: dict[str, str] | None = None,
        region: str = "us-east-1",
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
        # Model listings ([id | {id, context_length?, methods?}]); None: GET …/models is a 404.
        self.models = list(models) if models is not None else None
        self.ollama = ollama
        self.aws_secrets = dict(FAKE_AWS_KEYS if aws_secrets is None else aws_secrets)
        self.region = region

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

    def _record(self, entry: dict[str, Any]) -> int:
        with self._lock:
            self.requests.append(entry)
            return len(self.requests) - 1

    def of(self, kind: str) -> list[dict[str, Any]]:
        """The recorded requests of one kind: anthropic | responses | chat | gemini | bedrock | list."""
        with self._lock:
            return [r for r in self.requests if r.get("kind") == kind]

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
