"""The Letta client against a small loopback HTTP server: what it refuses and how each failure
is named (the server's URL, the server's own words)."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from tether.backends.api.client import LettaClient, LettaConflict, LettaNotFound
from tether.errors import ProviderError, ProviderHTTPError, StreamCut

# path -> (status, content type, body)
Route = tuple[int, str, bytes]


class _Handler(BaseHTTPRequestHandler):
    routes: dict[str, Route] = {}
    seen: list[tuple[str, str, dict[str, str]]] = []

    def log_message(self, *args: Any) -> None:
        pass

    def _answer(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        self.rfile.read(length)
        self.seen.append((self.command, self.path, {k.lower(): v for k, v in self.headers.items()}))
        status, ctype, body = self.routes.get(self.path.split("?")[0], (404, "application/json",
                                                                         b'{"detail":"nope"}'))
        self.send_response(status)
        self.send_header("content-type", ctype)
        self.send_header("content-length", str(len(body)))
        self.send_header("connection", "close")
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = _answer


@pytest.fixture
def server() -> Iterator[tuple[str, type[_Handler]]]:
    handler = type("H", (_Handler,), {"routes": {}, "seen": []})
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}", handler
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join()


def _drain(client: LettaClient, path: str) -> list[dict[str, Any]]:
    async def go() -> list[dict[str, Any]]:
        return [e.data async for e in client.stream(path, {"messages": []})]

    return asyncio.run(go())


def test_a_stream_that_is_not_an_event_stream_is_refused(server: Any) -> None:
    url, h = server
    h.routes["/v1/conversations/c/messages"] = (200, "application/json", b'{"messages": []}')
    with pytest.raises(ProviderError) as err:
        _drain(LettaClient(url, "k"), "/v1/conversations/c/messages")
    assert "not a text/event-stream" in str(err.value) and url in str(err.value)
    assert "'application/json'" in str(err.value)


def test_events_then_done_and_the_bearer_key(server: Any) -> None:
    url, h = server
    body = b'data: {"message_type":"ping"}\n\ndata: {"message_type":"stop_reason","stop_reason":"end_turn"}\n\ndata: [DONE]\n\n'
    h.routes["/s"] = (200, "text/event-stream; charset=utf-8", body)
    events = _drain(LettaClient(url, "sk-let-1"), "/s")
    assert [e["message_type"] for e in events] == ["ping", "stop_reason"]
    assert h.seen[-1][2]["authorization"] == "Bearer sk-let-1"
    assert h.seen[-1][2]["accept"] == "text/event-stream"


def test_a_stream_without_done_is_cut(server: Any) -> None:
    url, h = server
    h.routes["/s"] = (200, "text/event-stream", b'data: {"message_type":"ping"}\n\n')
    with pytest.raises(StreamCut) as err:
        _drain(LettaClient(url, None), "/s")
    assert err.value.retryable and url in str(err.value)


def test_409_is_the_conflict_with_the_active_run(server: Any) -> None:
    url, h = server
    detail = {"detail": "CONFLICT: Cannot send a new message: Another request (run_id=run-9) is "
                        "currently being processed for this conversation.", "run_id": "run-9"}
    h.routes["/s"] = (409, "application/json", json.dumps(detail).encode())
    with pytest.raises(LettaConflict) as err:
        _drain(LettaClient(url, None), "/s")
    assert err.value.run_id == "run-9" and "currently being processed" in str(err.value)


@pytest.mark.parametrize("status, retryable", [(500, True), (503, True), (429, True), (400, False)])
def test_http_errors_carry_the_servers_words_and_whether_to_retry(
    server: Any, status: int, retryable: bool
) -> None:
    url, h = server
    h.routes["/v1/agents/"] = (status, "application/json", b'{"detail":"the reason"}')
    with pytest.raises(ProviderHTTPError) as err:
        asyncio.run(LettaClient(url, None, retry_base_s=0.01).request("GET", "/v1/agents/"))
    assert err.value.retryable is retryable
    assert [p for _, p, _ in h.seen].count("/v1/agents/") == (4 if retryable else 1)
    assert "the reason" in str(err.value) and url in str(err.value) and str(status) in str(err.value)


def test_not_found_and_refused_credentials(server: Any) -> None:
    url, h = server
    with pytest.raises(LettaNotFound):
        asyncio.run(LettaClient(url, None).request("GET", "/v1/agents/agent-x"))
    h.routes["/v1/agents/"] = (401, "application/json", b'{"detail":"bad key"}')
    with pytest.raises(ProviderHTTPError) as err:
        asyncio.run(LettaClient(url, "wrong").request("GET", "/v1/agents/"))
    assert "LETTA_API_KEY" in str(err.value) and "tether connect letta" in str(err.value)


def test_a_read_is_tried_again_after_a_transient_failure(server: Any) -> None:
    url, h = server
    h.routes["/v1/agents/agent-1"] = (503, "application/json", b'{"detail":"busy"}')
    client = LettaClient(url, None, retry_base_s=0.05)

    async def heal_then_read() -> Any:
        async def heal() -> None:
            await asyncio.sleep(0.1)
            h.routes["/v1/agents/agent-1"] = (200, "application/json", b'{"id":"agent-1"}')

        healing = asyncio.ensure_future(heal())
        try:
            return await client.request("GET", "/v1/agents/agent-1")
        finally:
            await healing

    assert asyncio.run(heal_then_read()) == {"id": "agent-1"}
    assert [p for m, p, _ in h.seen].count("/v1/agents/agent-1") >= 2
    h.routes["/v1/agents/"] = (503, "application/json", b'{"detail":"busy"}')
    with pytest.raises(ProviderHTTPError):  # a write is never sent twice
        asyncio.run(client.request("POST", "/v1/agents/", {"name": "x"}))
    assert [(m, p) for m, p, _ in h.seen].count(("POST", "/v1/agents/")) == 1


def test_an_unreachable_server_is_named() -> None:
    with pytest.raises(ProviderError) as err:
        asyncio.run(LettaClient("http://127.0.0.1:9", None).request("POST", "/v1/agents/", {}))
    assert "cannot reach the Letta server at http://127.0.0.1:9" in str(err.value)
    assert err.value.retryable


@pytest.mark.parametrize("bad", ["api.letta.com", "ftp://host", "http://"])
def test_a_base_url_that_is_not_a_server_url(bad: str) -> None:
    with pytest.raises(ProviderError) as err:
        LettaClient(bad, None)
    assert "LETTA_BASE_URL" in str(err.value) and repr(bad) in str(err.value)
