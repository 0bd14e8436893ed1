"""ApiBackend against a scripted loopback server speaking the Letta routes it uses: what each
send puts on the wire, and which failures are retried (only before any model output)."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest

from tether.backends.api.backend import STALE_APPROVAL, ApiBackend
from tether.backends.api.client import LettaClient
from tether.core.tools import ToolContextStore, ToolRegistry
from tether.protocol.chunks import ErrorChunk, RetryNotice, StopReason
from tether.protocol.messages import TextPart, UserMessage
from tether.protocol.tool_calls import ToolReturn
from tether.protocol.turns import ConversationRef, TurnInput
from tether.providers.retry import RetryPolicy

TEXT: list[dict[str, Any]] = [{"message_type": "assistant_message", "otid": "o1", "content": "hi", "seq_id": 1,
         "run_id": "run-1"}, {"message_type": "stop_reason", "stop_reason": "end_turn"}]
PENDING: list[dict[str, Any]] = [{"message_type": "stop_reason", "stop_reason": "error"},
           {"message_type": "error_message", "run_id": "run-0", "error_type": "internal_error",
            "message": "CONFLICT: Cannot send a new message: The agent is waiting for approval on "
                       "a tool call. Please approve or deny the pending request before continuing."}]


def sse(events: list[dict[str, Any]]) -> bytes:
    out = b""
    for e in events:
        kind = b"event: error\n" if e.get("message_type") == "error_message" else b""
        out += kind + b"data: " + json.dumps(e).encode() + b"\n\n"
    return out + (b"" if any(e.get("message_type") == "error_message" for e in events)
                  else b"data: [DONE]\n\n")


class Script:
    """Answers in order, per path; records every request body."""

    def __init__(self) -> None:
        self.answers: dict[str, list[tuple[int, str, bytes]]] = {}
        self.bodies: list[tuple[str, str, Any]] = []

    def add(self, path: str, status: int, body: bytes, ctype: str = "text/event-stream") -> None:
        self.answers.setdefault(path, []).append((status, ctype, body))


@pytest.fixture
def letta() -> Iterator[tuple[str, Script]]:
    script = Script()

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, *args: Any) -> None:
            pass

        def _answer(self) -> None:
            raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            path = self.path.split("?")[0]
            script.bodies.append((self.command, self.path, json.loads(raw) if raw else None))
            queue = script.answers.get(path) or [(404, "application/json", b'{"detail":"no"}')]
            status, ctype, body = queue.pop(0) if len(queue) > 1 else queue[0]
            self.send_response(status)
            self.send_header("content-type", ctype)
            self.send_header("content-length", str(len(body)))
            self.send_header("connection", "close")
            self.end_headers()
            self.wfile.write(body)

        do_GET = do_POST = _answer

    httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=httpd.serve_forever, kwargs={"poll_interval": 0.02}, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}", script
    finally:
        httpd.shutdown()
        httpd.server_close()
        thread.join()


def _send(backend: ApiBackend, conv: ConversationRef, turn: TurnInput) -> list[Any]:
    registry = ToolRegistry()
    ctx = ToolContextStore().snapshot(registry, Path.cwd(), "standard")

    async def go() -> list[Any]:
        return [c async for c in backend.send(conv, turn, ctx)]

    return asyncio.run(go())


def _user(text: str) -> TurnInput:
    return TurnInput(user=UserMessage("ui-msg-1", (TextPart(text),), 1, "otid-1"))


FAST = RetryPolicy(max_retries=3, base_delay_s=0.01)


def test_a_user_turn_on_the_default_conversation(letta: tuple[str, Script]) -> None:
    url, script = letta
    script.add("/v1/conversations/default/messages", 200, sse(TEXT))
    backend = ApiBackend(LettaClient(url, "k"), override_model="openai-proxy/other")
    chunks = _send(backend, ConversationRef("agent-1", "default"), _user("hello"))
    assert [c.stop_reason for c in chunks if isinstance(c, StopReason)] == ["end_turn"]
    body = script.bodies[-1][2]
    assert body["agent_id"] == "agent-1" and body["override_model"] == "openai-proxy/other"
    assert body["background"] is True and body["stream_tokens"] is True and body["client_tools"] == []
    assert body["messages"] == [{"type": "message", "role": "user", "otid": "otid-1",
                                 "content": [{"type": "text", "text": "hello"}]}]


def test_answers_are_one_approval_message(letta: tuple[str, Script]) -> None:
    url, script = letta
    script.add("/v1/conversations/conv-1/messages", 200, sse(TEXT))
    turn = TurnInput(approvals=(
        ToolReturn("call-1", "Bash", "ok\n", False, stdout=("ok",)),
        ToolReturn("call-2", "Write", "Permission denied by rule: Write", True, denied=True),
    ))
    _send(ApiBackend(LettaClient(url, None)), ConversationRef("agent-1", "conv-1"), turn)
    (message,) = script.bodies[-1][2]["messages"]
    assert message["type"] == "approval" and message["otid"].startswith("tether-")
    assert message["approvals"] == [
        {"type": "tool", "tool_call_id": "call-1", "tool_return": "ok\n", "status": "success",
         "stdout": ["ok"]},
        {"type": "approval", "tool_call_id": "call-2", "approve": False,
         "reason": "Permission denied by rule: Write"},
    ]


def test_transient_failures_before_output_are_retried(letta: tuple[str, Script]) -> None:
    url, script = letta
    path = "/v1/conversations/conv-1/messages"
    script.add(path, 503, b'{"detail":"warming up"}', "application/json")
    script.add(path, 200, sse(TEXT))
    chunks = _send(ApiBackend(LettaClient(url, None), retry=FAST), ConversationRef("a", "conv-1"),
                   _user("x"))
    notices = [c for c in chunks if isinstance(c, RetryNotice)]
    assert len(notices) == 1 and "warming up" in notices[0].message and url in notices[0].message
    assert chunks[-1] == StopReason("end_turn", "run-1")


def test_a_refusal_is_not_retried_and_names_the_server(letta: tuple[str, Script]) -> None:
    url, script = letta
    script.add("/v1/conversations/conv-1/messages", 400, b'{"detail":"bad body"}', "application/json")
    chunks = _send(ApiBackend(LettaClient(url, None), retry=FAST), ConversationRef("a", "conv-1"),
                   _user("x"))
    assert not any(isinstance(c, RetryNotice) for c in chunks)
    error = next(c for c in chunks if isinstance(c, ErrorChunk))
    assert "bad body" in error.message and url in error.message
    assert chunks[-1].stop_reason == "llm_api_error"


def test_409_is_the_busy_error(letta: tuple[str, Script]) -> None:
    url, script = letta
    script.add("/v1/conversations/conv-1/messages", 409, json.dumps(
        {"detail": "CONFLICT: Another request (run_id=run-7) is currently being processed",
         "run_id": "run-7"}).encode(), "application/json")
    chunks = _send(ApiBackend(LettaClient(url, None), retry=FAST), ConversationRef("a", "conv-1"),
                   _user("x"))
    error = next(c for c in chunks if isinstance(c, ErrorChunk))
    assert error.message.startswith("Conversation conv-1 is busy with another active run on the "
                                    f"Letta server at {url} (run run-7)")
    assert chunks[-1] == StopReason("error", "run-7")


def test_a_pending_approval_is_denied_and_the_message_sent_with_the_denial(
    letta: tuple[str, Script]
) -> None:
    url, script = letta
    path = "/v1/conversations/conv-1/messages"
    script.add(path, 200, sse(PENDING))
    script.add(path, 200, sse(TEXT))
    history = [{"message_type": "approval_request_message",
                "tool_call": {"tool_call_id": "call-old", "name": "Bash", "arguments": "{}"}},
               {"message_type": "user_message", "content": "earlier"}]
    script.answers["/v1/conversations/conv-1/messages"].insert(1, (200, "application/json",
                                                                   json.dumps(history).encode()))
    chunks = _send(ApiBackend(LettaClient(url, None)), ConversationRef("a", "conv-1"), _user("next"))
    assert chunks[-1] == StopReason("end_turn", "run-1")
    assert not any(isinstance(c, ErrorChunk) for c in chunks)  # the recovery is not an error
    posts = [b for m, p, b in script.bodies if m == "POST"]
    assert len(posts) == 2
    denial, user = posts[1]["messages"]
    assert denial["approvals"] == [{"type": "approval", "tool_call_id": "call-old",
                                    "approve": False, "reason": STALE_APPROVAL}]
    assert user["content"] == [{"type": "text", "text": "next"}]


def test_stashed_answers_the_server_no_longer_waits_for_are_dropped(
    letta: tuple[str, Script], tmp_path: Path
) -> None:
    url, script = letta
    path = "/v1/conversations/conv-1/messages"
    stale = [{"message_type": "stop_reason", "stop_reason": "error"},
             {"message_type": "error_message", "run_id": "run-0", "error_type": "internal_error",
              "message": "An unknown error occurred with the LLM streaming request.",
              "detail": "Cannot process approval response: No tool call is currently awaiting "
                        "approval. Please send a regular message to interact with the agent."}]
    script.add(path, 200, sse(stale))
    script.add(path, 200, sse(TEXT))
    backend = ApiBackend(LettaClient(url, None), stash_dir=tmp_path)
    conv = ConversationRef("a", "conv-1")
    asyncio.run(backend.record(conv, TurnInput(approvals=(
        ToolReturn("call-1", "Bash", "Interrupted by user", True, denied=True),))))
    assert list(tmp_path.glob("*.json"))
    chunks = _send(backend, conv, _user("next"))
    assert chunks[-1] == StopReason("end_turn", "run-1")
    posts = [b for m, _, b in script.bodies if m == "POST"]
    assert [m["type"] for m in posts[0]["messages"]] == ["approval", "message"]
    assert [m["type"] for m in posts[1]["messages"]] == ["message"]
    assert not list(tmp_path.glob("*.json"))
