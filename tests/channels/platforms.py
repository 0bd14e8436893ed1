"""Test helpers for channels: loopback fakes of the platforms' HTTP endpoints (a webhook
receiver, the Telegram Bot API), and the real `tether server` + `tether channel-gateway`
processes wired together on a temporary TETHER_HOME."""

from __future__ import annotations

import hashlib
import hmac
import json
import os
import signal
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

from tests.e2e.support import TETHER
from tests.server.support import ServerProcess, server_env
from tether.backends.local.store import LocalStore

MODEL = "anthropic/claude-test"
SECRET = "webhook-test-secret"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def wait_until(pred: Callable[[], Any], timeout: float = 20, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = pred()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def sign(body: bytes, secret: str = SECRET) -> str:
    return "sha256=" + hmac.new(secret.encode(), body, hashlib.sha256).hexdigest()


class Recorder(ThreadingHTTPServer):
    """A loopback HTTP server that records every request and answers through `respond`."""

    daemon_threads = True

    def __init__(self, respond: Callable[[Recorder, str, dict[str, Any]], tuple[int, Any]]):
        self.calls: list[tuple[str, dict[str, Any], dict[str, str]]] = []
        self.respond = respond
        self.hold = threading.Event()  # set: answers wait (to kill a client mid-request)
        self.release = threading.Event()
        super().__init__(("127.0.0.1", 0), _RecordingHandler)
        threading.Thread(target=self.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"

    def close(self) -> None:
        self.release.set()
        self.shutdown()
        self.server_close()


class _RecordingHandler(BaseHTTPRequestHandler):
    server: Recorder

    def log_message(self, *args: Any) -> None:
        pass

    def _body(self) -> dict[str, Any]:
        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        kind = self.headers.get("Content-Type", "")
        if not raw:
            return {}
        if "json" in kind:
            data = json.loads(raw)
            return data if isinstance(data, dict) else {"_": data}
        from urllib.parse import parse_qsl

        return dict(parse_qsl(raw.decode()))

    def do_POST(self) -> None:
        body = self._body()
        self.server.calls.append((self.path, body, dict(self.headers)))
        if self.server.hold.is_set():
            self.server.release.wait(30)
        status, answer = self.server.respond(self.server, self.path, body)
        data = json.dumps(answer).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST


def webhook_receiver() -> Recorder:
    return Recorder(lambda srv, path, body: (200, {"message_id": f"out-{len(srv.calls)}"}))


def post_webhook(port: int, body: dict[str, Any], signature: str | None = None) -> int:
    raw = json.dumps(body).encode()
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/webhook", raw, method="POST",
        headers={"Content-Type": "application/json",
                 "X-Tether-Signature": signature if signature is not None else sign(raw)},
    )
    try:
        with urllib.request.urlopen(request, timeout=20) as response:
            return int(response.status)
    except urllib.error.HTTPError as exc:
        return int(exc.code)


class Stack:
    """A `tether server` and a `tether channel-gateway` on one TETHER_HOME."""

    def __init__(self, fake_url: str, home: Path, tmp: Path, project: Path,
                 *server_args: str, gateway_args: tuple[str, ...] = ()) -> None:
        self.env = server_env(fake_url, home, tmp)
        self.env["TETHER_CRON"] = "0"
        self.home, self.project = home, project
        self.gateway_args = gateway_args
        self.server = ServerProcess(self.env, project, *server_args)
        self.gateway: subprocess.Popen[str] | None = None
        self.gateway_lines: list[str] = []

    def agent(self) -> str:
        store = LocalStore(self.home)
        return store.create_agent(model=MODEL, system="You answer chat messages.").id

    def channels(self, *args: str) -> Any:
        proc = subprocess.run(
            [TETHER, "channels", *args], env=self.env,
            cwd=self.project, capture_output=True, text=True, timeout=60,
        )
        assert proc.returncode == 0, proc.stderr
        return json.loads(proc.stdout)

    def start_gateway(self) -> None:
        self.gateway_lines = []
        self.gateway = subprocess.Popen(
            [TETHER, "channel-gateway", "--server", self.server.url, "--cwd", str(self.project),
             *self.gateway_args],
            env=self.env, cwd=self.project, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
            text=True,
        )
        proc = self.gateway

        def pump() -> None:
            assert proc.stdout is not None
            for line in proc.stdout:
                self.gateway_lines.append(line)

        self._pump = threading.Thread(target=pump, daemon=True)
        self._pump.start()
        wait_until(lambda: any("ready" in x for x in self.gateway_lines) or
                   proc.poll() is not None, 30, "the gateway to start")
        assert proc.poll() is None, "".join(self.gateway_lines)

    def kill_gateway(self) -> None:
        assert self.gateway is not None
        os.kill(self.gateway.pid, signal.SIGKILL)
        self.gateway.wait(10)
        self._reap()

    def _reap(self) -> None:
        assert self.gateway is not None
        self._pump.join(10)
        if self.gateway.stdout is not None:
            self.gateway.stdout.close()

    def stop(self) -> None:
        if self.gateway is not None and self.gateway.poll() is None:
            self.gateway.terminate()
            try:
                self.gateway.wait(15)
            except subprocess.TimeoutExpired:
                self.gateway.kill()
                self.gateway.wait(5)
            self._reap()
        self.server.stop()


def webhook_stack(fake_url: str, home: Path, tmp: Path, project: Path, receiver: Recorder,
                  route_chat: str, *account: str, listen: tuple[str, ...] = ()) -> tuple[Stack, int]:
    """A Stack (its server started with `listen`) with a new agent, the webhook channel
    configured to post to `receiver` (plus the `account` flags) and `route_chat` routed to the
    agent: the stack and the port the webhook listens on."""
    stack = Stack(fake_url, home, tmp, project, *listen)
    try:
        port = free_port()
        agent = stack.agent()
        stack.channels("configure", "webhook", "--set", f"secret={SECRET}",
                       "--set", f"outbound_url={receiver.url}/out", "--set", f"port={port}",
                       *account)
        stack.channels("route", "add", "webhook", route_chat, "--agent", agent)
    except BaseException:
        stack.stop()
        raise
    return stack, port


class FakeTelegram:
    """The Telegram Bot API methods the channel uses (getMe, getUpdates with offsets and
    confirmation, sendMessage), on loopback; python-telegram-bot talks to it via base_url."""

    TOKEN = "123456:TEST-token"

    def __init__(self) -> None:
        self.updates: list[dict[str, Any]] = []
        self.sent: list[dict[str, Any]] = []
        self.confirmed = 0
        self._next_update = 1
        self._next_message = 1000
        self._lock = threading.Lock()
        self.http = Recorder(self._respond)

    @property
    def base_url(self) -> str:
        return f"{self.http.url}/bot"

    def close(self) -> None:
        self.http.close()

    def dm(self, user_id: int, text: str, name: str = "Ann") -> int:
        """A private message from `user_id` waiting for the bot; returns its update id."""
        with self._lock:
            uid = self._next_update
            self._next_update += 1
            self.updates.append({"update_id": uid, "message": {
                "message_id": 500 + uid, "date": int(time.time()),
                "chat": {"id": user_id, "type": "private", "first_name": name},
                "from": {"id": user_id, "is_bot": False, "first_name": name},
                "text": text,
            }})
            return uid

    def _respond(self, srv: Recorder, path: str, body: dict[str, Any]) -> tuple[int, Any]:
        method = path.rsplit("/", 1)[-1]
        if not path.startswith(f"/bot{self.TOKEN}/"):
            return 401, {"ok": False, "error_code": 401, "description": "Unauthorized"}
        if method == "getMe":
            return 200, {"ok": True, "result": {"id": 1, "is_bot": True, "first_name": "Tether",
                                                "username": "tether_test_bot"}}
        if method == "getUpdates":
            offset = int(body.get("offset") or 0)
            deadline = time.monotonic() + min(float(body.get("timeout") or 0), 0.3)
            while True:
                with self._lock:
                    if offset:
                        self.confirmed = max(self.confirmed, offset - 1)
                        self.updates = [u for u in self.updates if u["update_id"] >= offset]
                    pending = list(self.updates)
                if pending or time.monotonic() >= deadline:
                    return 200, {"ok": True, "result": pending}
                time.sleep(0.05)
        if method == "sendMessage":
            with self._lock:
                self._next_message += 1
                self.sent.append(dict(body))
                chat = int(body["chat_id"])
                return 200, {"ok": True, "result": {
                    "message_id": self._next_message, "date": int(time.time()),
                    "chat": {"id": chat, "type": "private"}, "text": body.get("text", ""),
                    "from": {"id": 1, "is_bot": True, "first_name": "Tether"},
                }}
        return 404, {"ok": False, "error_code": 404, "description": f"no method {method}"}


class FakeSlack:
    """Slack's Web API methods the channel uses (auth.test, apps.connections.open,
    chat.postMessage) and a Socket Mode websocket on loopback; slack-sdk reaches both through
    WebClient(base_url=...). `push` sends an events_api envelope; `acks` are the envelope ids
    the client acknowledged."""

    BOT = "UBOT"

    def __init__(self) -> None:
        from websockets.sync.server import serve

        self.posts: list[dict[str, Any]] = []
        self.acks: list[str] = []
        self.sockets: list[Any] = []
        self._ts = 1000
        self._envelopes = 0
        self.ws_server = serve(self._socket, "127.0.0.1", 0)
        self.ws_port = self.ws_server.socket.getsockname()[1]
        threading.Thread(target=self.ws_server.serve_forever, daemon=True).start()
        self.http = Recorder(self._respond)

    @property
    def base_url(self) -> str:
        return f"{self.http.url}/api/"

    def close(self) -> None:
        self.ws_server.shutdown()
        self.http.close()

    def _socket(self, ws: Any) -> None:
        self.sockets.append(ws)
        ws.send(json.dumps({"type": "hello", "num_connections": 1}))
        try:
            for raw in ws:
                frame = json.loads(raw)
                if "envelope_id" in frame:
                    self.acks.append(frame["envelope_id"])
        except Exception:  # noqa: BLE001 - the client went away
            pass
        finally:
            self.sockets.remove(ws)

    def push(self, event: dict[str, Any]) -> str:
        self._envelopes += 1
        envelope = f"env-{self._envelopes}"
        wait_until(lambda: self.sockets, what="a Socket Mode connection")
        self.sockets[-1].send(json.dumps({
            "envelope_id": envelope, "type": "events_api", "accepts_response_payload": False,
            "payload": {"type": "event_callback", "event_id": f"Ev{self._envelopes}",
                        "event": event},
        }))
        return envelope

    def _respond(self, srv: Recorder, path: str, body: dict[str, Any]) -> tuple[int, Any]:
        method = path.rsplit("/", 1)[-1]
        if method == "auth.test":
            return 200, {"ok": True, "user_id": self.BOT, "bot_id": "BBOT", "team_id": "T1"}
        if method == "apps.connections.open":
            return 200, {"ok": True, "url": f"ws://127.0.0.1:{self.ws_port}/link"}
        if method == "chat.postMessage":
            self._ts += 1
            self.posts.append(dict(body))
            return 200, {"ok": True, "channel": body.get("channel"), "ts": f"{self._ts}.000100"}
        return 200, {"ok": False, "error": "unknown_method"}
