"""`tether server --openai-api`: the real server process, driven by httpx as an OpenAI client,
against the fake provider."""

from __future__ import annotations

import hashlib
import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from websockets.sync.client import connect

from tests.server.support import MODEL, ServerProcess, bash, server_env
from tether.backends.local.store import LocalStore
from tether.testing.fake_provider import FakeProvider

TOKEN = "openai-bridge-token"


class Api:
    """One `tether server --openai-api` process and an httpx client at its HTTP root."""

    def __init__(self, fake: FakeProvider, tmp: Path, *args: str) -> None:
        self.home = tmp / "tether-home"
        self.project = tmp / "project"
        self.project.mkdir(exist_ok=True)
        self.store = LocalStore(self.home)
        self.proc = ServerProcess(
            server_env(fake.url, self.home, tmp), self.project, "--openai-api", *args
        )
        self.ws_url = self.proc.url
        self.base = self.proc.url.replace("ws://", "http://").removesuffix("/ws")
        self.http = httpx.Client(base_url=self.base, timeout=30)

    def agent(self, name: str = "tether") -> str:
        return self.store.create_agent(model=MODEL, system="You are a test agent.", name=name).id

    def close(self) -> None:
        self.http.close()
        assert self.proc.stop() == 0


@pytest.fixture
def fake() -> Iterator[FakeProvider]:
    with FakeProvider() as provider:
        yield provider


@pytest.fixture
def api(fake: FakeProvider, tmp_path: Path) -> Iterator[Api]:
    server = Api(fake, tmp_path, "--max-frame-bytes", "65536")
    try:
        yield server
    finally:
        server.close()


def chat(model: str, text: str, **extra: Any) -> dict[str, Any]:
    return {"model": model, "messages": [{"role": "user", "content": text}], **extra}


def sse_data(response: httpx.Response) -> list[str]:
    return [line[len("data: ") :] for line in response.iter_lines() if line.startswith("data: ")]


def sent_texts(request: dict[str, Any]) -> str:
    """Everything the agent sent the model in one request, as one string to search."""
    return json.dumps(request["body"])


# --- models ----------------------------------------------------------------------------------


def test_models_lists_every_agent(api: Api) -> None:
    first, second = api.agent("one"), api.agent("two")
    listed = api.http.get("/v1/models")
    assert listed.status_code == 200 and listed.headers["content-type"] == "application/json"
    body = listed.json()
    assert body["object"] == "list"
    assert [m["id"] for m in body["data"]] == [first, second]
    for model in body["data"]:
        assert model["object"] == "model" and model["owned_by"] == "tether"
        assert abs(model["created"] - time.time()) < 300
    one = api.http.get(f"/v1/models/{first}")
    assert one.status_code == 200 and one.json()["id"] == first
    missing = api.http.get("/v1/models/agent-nope")
    assert missing.status_code == 404 and missing.json()["error"]["code"] == "model_not_found"


# --- chat completions ------------------------------------------------------------------------


def test_chat_completion_runs_a_turn_on_the_default_conversation(
    api: Api, fake: FakeProvider
) -> None:
    agent = api.agent()
    fake.set_script(
        [
            {"text": "hello from the agent", "usage": {"input": 11, "output": 5, "cached": 3}},
            {"text": "second answer"},
        ]
    )
    earlier = [
        {"role": "system", "content": "client-side system prompt"},
        {"role": "user", "content": "client-side earlier question"},
        {"role": "assistant", "content": "client-side earlier answer"},
    ]
    body = {
        "model": agent,
        "messages": [*earlier, {"role": "user", "content": "hi there"}],
        "temperature": 0.2,
    }
    response = api.http.post("/v1/chat/completions", json=body)
    assert response.status_code == 200, response.text
    completion = response.json()
    assert completion["object"] == "chat.completion" and completion["model"] == agent
    assert completion["id"].startswith("chatcmpl-")
    (choice,) = completion["choices"]
    assert choice["message"] == {
        "role": "assistant",
        "content": "hello from the agent",
        "refusal": None,
    }
    assert choice["finish_reason"] == "stop"
    usage = completion["usage"]
    assert usage["prompt_tokens"] == 14 and usage["completion_tokens"] == 5
    assert usage["total_tokens"] == 19 and usage["prompt_tokens_details"]["cached_tokens"] == 3
    sent = sent_texts(fake.requests[-1])
    assert "hi there" in sent and "client-side" not in sent  # earlier messages: ignored
    again = api.http.post("/v1/chat/completions", json=chat(agent, "and now?"))
    assert again.json()["choices"][0]["message"]["content"] == "second answer"
    history = sent_texts(fake.requests[-1])
    assert "hi there" in history and "hello from the agent" in history  # the agent's own history
    conversations = api.store.list_conversations(agent)
    assert [c.id for c in conversations] == ["default"]


def test_streaming_chat_completion_deltas_join_to_the_text(api: Api, fake: FakeProvider) -> None:
    agent = api.agent()
    text = "streaming words arrive one small piece at a time"
    fake.set_script([{"text": text, "chunk_size": 4, "usage": {"input": 7, "output": 9}}])
    request = chat(agent, "stream please", stream=True, stream_options={"include_usage": True})
    with api.http.stream("POST", "/v1/chat/completions", json=request) as response:
        assert response.status_code == 200
        assert response.headers["content-type"] == "text/event-stream"
        data = sse_data(response)
    assert data[-1] == "[DONE]"
    chunks = [json.loads(d) for d in data[:-1]]
    assert all(c["object"] == "chat.completion.chunk" and c["model"] == agent for c in chunks)
    assert len({c["id"] for c in chunks}) == 1
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    pieces = [
        c["choices"][0]["delta"].get("content", "")
        for c in chunks
        if c["choices"] and c["choices"][0]["delta"].get("content")
    ]
    assert len(pieces) > 3 and "".join(pieces) == text
    finals = [c for c in chunks if c["choices"] and c["choices"][0]["finish_reason"]]
    assert [c["choices"][0]["finish_reason"] for c in finals] == ["stop"]
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] == 9


def test_ask_is_denied_with_the_headless_text(api: Api, fake: FakeProvider) -> None:
    agent = api.agent()
    fake.set_script([{"tool_calls": [bash("echo ran > ran.txt")]}, {"text": "I could not run it"}])
    response = api.http.post("/v1/chat/completions", json=chat(agent, "run something"))
    assert response.status_code == 200, response.text
    assert response.json()["choices"][0]["message"]["content"] == "I could not run it"
    assert not (api.project / "ran.txt").exists()
    answer = sent_texts(fake.requests[-1])
    assert "Tool requires approval (headless mode)" in answer and "allowedTools" in answer


def test_a_busy_conversation_queues_the_next_completion(api: Api, fake: FakeProvider) -> None:
    agent = api.agent()
    fake.set_script([{"text": "first", "delay_ms": 800}, {"text": "second"}])
    results: dict[str, str] = {}

    def ask(label: str) -> None:
        with httpx.Client(base_url=api.base, timeout=30) as client:
            reply = client.post("/v1/chat/completions", json=chat(agent, label))
            results[label] = reply.json()["choices"][0]["message"]["content"]

    slow = threading.Thread(target=ask, args=("one",))
    slow.start()
    deadline = time.monotonic() + 10
    while not fake.requests and time.monotonic() < deadline:
        time.sleep(0.02)
    ask("two")  # submitted while "one" runs: waits for it, then runs
    slow.join(20)
    assert results == {"one": "first", "two": "second"}


def test_a_client_that_leaves_mid_stream_stops_its_turn(api: Api, fake: FakeProvider) -> None:
    """The HTTP turn runs in the runtime a websocket client of the default conversation sees."""
    agent = api.agent()
    fake.set_script([{"fault": {"hang": True}}])
    with connect(api.ws_url, open_timeout=10) as ws:
        start = {
            "type": "runtime_start",
            "request_id": "s",
            "agent_id": agent,
            "conversation_id": "default",
            "cwd": str(api.project),
        }
        ws.send(json.dumps(start))
        started = wait_frame(ws, "runtime_start_response")
        assert started["runtime"]["conversation_id"] == "default", started
        request = chat(agent, "hang", stream=True)
        with api.http.stream("POST", "/v1/chat/completions", json=request) as response:
            lines = response.iter_lines()
            assert next(lines).startswith("data: ")  # the role chunk: the turn is queued
            deadline = time.monotonic() + 10
            while not fake.requests and time.monotonic() < deadline:
                time.sleep(0.02)
            assert fake.requests  # the model is being asked (and never answers)
        finished = wait_frame(ws, "turn_finished")
        assert finished["stop_reason"] == "cancelled"
        assert finished["request_id"].startswith("openai-")


def wait_frame(ws: Any, kind: str, timeout: float = 20) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while True:
        frame = json.loads(ws.recv(timeout=max(0.1, deadline - time.monotonic())))
        if frame.get("type") == kind:
            return dict(frame)


def test_request_errors_are_openai_shaped(api: Api) -> None:
    agent = api.agent()
    post = api.http.post
    cases: list[tuple[Any, int, str | None, str]] = [
        (chat("agent-nope", "hi"), 404, "model", "does not exist"),
        (b"{not json", 400, None, "not valid JSON"),
        (b"[1, 2]", 400, None, "must be a JSON object"),
        ({"messages": [{"role": "user", "content": "hi"}]}, 400, "model", "'model' is required"),
        ({"model": agent}, 400, "messages", "'messages' must be a non-empty list"),
        ({"model": agent, "messages": []}, 400, "messages", "non-empty list"),
        (
            {"model": agent, "messages": [{"role": "assistant", "content": "x"}]},
            400,
            "messages[0].role",
            "must be the user message",
        ),
        (chat(agent, ""), 400, "messages[0].content", "must not be empty"),
        (
            {"model": agent, "messages": [{"role": "user", "content": [{"type": "audio"}]}]},
            400,
            "messages[0].content[0].type",
            "must be 'text' or 'image_url'",
        ),
        (chat(agent, "hi", stream="yes"), 400, "stream", "must be a boolean"),
    ]
    for body, status, param, needle in cases:
        if isinstance(body, bytes):
            response = post(
                "/v1/chat/completions", content=body, headers={"Content-Type": "application/json"}
            )
        else:
            response = post("/v1/chat/completions", json=body)
        assert response.status_code == status, (body, response.text)
        error = response.json()["error"]
        assert needle in error["message"] and error["param"] == param, (body, error)
        assert error["type"] == ("not_found_error" if status == 404 else "invalid_request_error")
    too_big = post("/v1/chat/completions", json=chat(agent, "x" * 100_000))
    assert too_big.status_code == 413 and "--max-frame-bytes" in too_big.json()["error"]["message"]
    assert api.http.get("/v1/chat/completions").status_code == 405
    assert api.http.get("/v1/nowhere").json()["error"]["message"] == "no such endpoint: /v1/nowhere"
    assert api.http.get("/healthz").text == "ok\n"  # the rest of the server is unchanged


def test_websocket_clients_share_the_port(api: Api) -> None:
    with connect(api.ws_url, open_timeout=10) as ws:
        ws.send(json.dumps({"type": "app_server_info", "request_id": "a"}))
        info = json.loads(ws.recv(timeout=10))
        assert info["type"] == "app_server_info_response" and info["request_id"] == "a"


def test_shutdown_answers_every_waiting_request(fake: FakeProvider, tmp_path: Path) -> None:
    fake.set_script([{"fault": {"hang": True}}])
    api = Api(fake, tmp_path)
    agent = api.agent()
    streamed: list[str] = []
    queued: list[httpx.Response] = []
    failures: list[BaseException] = []  # a thread's exception, so a failure says what happened

    def stream() -> None:
        request = chat(agent, "hang", stream=True)
        try:
            with (
                httpx.Client(base_url=api.base, timeout=30) as client,
                client.stream("POST", "/v1/chat/completions", json=request) as response,
            ):
                for data in sse_data(response):
                    streamed.append(data)
        except BaseException as exc:
            failures.append(exc)

    def wait() -> None:
        with httpx.Client(base_url=api.base, timeout=30) as client:
            queued.append(client.post("/v1/chat/completions", json=chat(agent, "next")))

    running = threading.Thread(target=stream)
    running.start()
    deadline = time.monotonic() + 10
    while not fake.requests and time.monotonic() < deadline:
        time.sleep(0.02)
    waiting = threading.Thread(target=wait)
    waiting.start()
    time.sleep(0.5)  # let it reach the conversation's queue
    api.close()  # SIGTERM: exits 0
    running.join(10)
    waiting.join(10)
    assert not failures and streamed, (failures, streamed)
    assert streamed[-1] == "[DONE]"
    assert json.loads(streamed[-2])["error"]["code"] == "turn_cancelled"
    (response,) = queued
    assert response.status_code == 503 and "shutting down" in response.json()["error"]["message"]


# --- auth ------------------------------------------------------------------------------------


def test_bearer_auth_applies_to_the_api(fake: FakeProvider, tmp_path: Path) -> None:
    fake.set_script([{"text": "authorized"}])
    digest = hashlib.sha256(TOKEN.encode()).hexdigest()
    auth = ("--ws-auth", "capability-token", "--ws-token-sha256", digest)
    api = Api(fake, tmp_path, *auth, "--max-frame-bytes", "65536")
    try:
        agent = api.agent()
        bare = api.http.get("/v1/models")
        assert bare.status_code == 401
        assert bare.json()["error"]["type"] == "authentication_error"
        assert api.http.post("/v1/chat/completions", json=chat(agent, "hi")).status_code == 401
        wrong = api.http.get("/v1/models", headers={"Authorization": "Bearer wrong"})
        assert wrong.status_code == 401
        good = {"Authorization": f"Bearer {TOKEN}"}
        assert api.http.get("/v1/models", headers=good).json()["data"][0]["id"] == agent
        with_origin = {**good, "Origin": "https://app.example"}
        reply = api.http.post("/v1/chat/completions", json=chat(agent, "hi"), headers=with_origin)
        assert reply.json()["choices"][0]["message"]["content"] == "authorized"
        evil = api.http.get("/v1/models", headers={"Host": "evil.example"})
        assert evil.status_code == 403
        huge = api.http.post("/v1/chat/completions", json=chat(agent, "x" * 200_000))
        assert huge.status_code == 401  # not 413: nothing is read before the bearer checks out
    finally:
        api.close()


def test_origin_without_auth_is_forbidden(api: Api) -> None:
    api.agent()
    response = api.http.get("/v1/models", headers={"Origin": "https://evil.example"})
    assert response.status_code == 403 and response.json()["error"]["type"] == "permission_error"


# --- responses -------------------------------------------------------------------------------


def test_responses_api(api: Api, fake: FakeProvider) -> None:
    agent = api.agent()
    fake.set_script(
        [{"text": "a plain response"}, {"text": "a streamed response", "chunk_size": 5}]
    )
    plain = api.http.post("/v1/responses", json={"model": agent, "input": "hello"})
    assert plain.status_code == 200, plain.text
    body = plain.json()
    assert body["object"] == "response" and body["status"] == "completed"
    assert body["output"][0]["content"][0] == {
        "type": "output_text",
        "text": "a plain response",
        "annotations": [],
    }
    assert body["usage"]["output_tokens"] > 0
    request = {
        "model": agent,
        "stream": True,
        "input": [{"role": "user", "content": [{"type": "input_text", "text": "stream it"}]}],
    }
    with api.http.stream("POST", "/v1/responses", json=request) as response:
        events = [json.loads(d) for d in sse_data(response)]
    kinds = [e["type"] for e in events]
    assert kinds[0] == "response.created" and kinds[-1] == "response.completed"
    deltas = [e["delta"] for e in events if e["type"] == "response.output_text.delta"]
    assert len(deltas) > 1 and "".join(deltas) == "a streamed response"
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    assert events[-1]["response"]["output"][0]["content"][0]["text"] == "a streamed response"
    bad = api.http.post("/v1/responses", json={"model": agent, "input": [{"role": "system"}]})
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "input[0].role"


# --- the official client (a dev dependency) ---------------------------------------------------


def test_official_openai_client(api: Api, fake: FakeProvider) -> None:
    import openai

    agent = api.agent()
    fake.set_script([{"text": "hi from tether"}, {"text": "streamed from tether"}])
    client = openai.OpenAI(base_url=api.base + "/v1", api_key="unused")
    assert [m.id for m in client.models.list()] == [agent]
    done = client.chat.completions.create(model=agent, messages=[{"role": "user", "content": "hi"}])
    assert done.choices[0].message.content == "hi from tether"
    stream = client.chat.completions.create(
        model=agent, messages=[{"role": "user", "content": "again"}], stream=True
    )
    text = "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    assert text == "streamed from tether"
    with pytest.raises(openai.NotFoundError):
        client.chat.completions.create(
            model="agent-nope", messages=[{"role": "user", "content": "x"}]
        )
