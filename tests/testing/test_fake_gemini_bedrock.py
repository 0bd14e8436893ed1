"""The fake provider's Gemini and Bedrock dialects over real HTTP: the script's text, thinking,
calls and usage in each wire format, the checks (answered calls, signatures), faults, listings."""

from __future__ import annotations

import base64
import json
import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
from botocore.credentials import Credentials
from botocore.eventstream import EventStreamBuffer

import tether
from tether.providers.aws_auth import AwsAccess, sign_request
from tether.providers.sse import SSEParser
from tether.testing.fake_provider import FAKE_AWS_KEYS, FakeProvider, validate_script

GEMINI = "/v1beta/models/gemini-test:streamGenerateContent?alt=sse"
BEDROCK = "/model/anthropic.claude-test%3A0/invoke-with-response-stream"
USER = {"role": "user", "parts": [{"text": "hi"}]}
BEDROCK_BODY = {
    "anthropic_version": "bedrock-2023-05-31",
    "max_tokens": 100,
    "messages": [{"role": "user", "content": "hi"}],
}


def gemini(url: str, body: dict[str, Any], path: str = GEMINI) -> httpx.Response:
    with httpx.Client(timeout=10) as client:
        return client.post(url + path, json=body, headers={"x-goog-api-key": "k"})


def gemini_chunks(response: httpx.Response) -> list[dict[str, Any]]:
    parser = SSEParser()
    return [json.loads(e.data) for e in parser.feed(response.content) + parser.finish()]


def bedrock(url: str, body: dict[str, Any], secret: str | None = None) -> httpx.Response:
    (key, right), = FAKE_AWS_KEYS.items()  # fmt: skip
    access = AwsAccess(Credentials(key, secret or right), "us-east-1", url)
    content = json.dumps(body).encode()
    headers = sign_request(
        access, "POST", url + BEDROCK, {"content-type": "application/json"}, content
    )
    with httpx.Client(timeout=10) as client:
        return client.post(url + BEDROCK, content=content, headers=headers)


def bedrock_events(response: httpx.Response) -> list[tuple[str, dict[str, Any]]]:
    """(message type, Anthropic event or exception body) per frame, decoded by botocore."""
    buffer = EventStreamBuffer()
    buffer.add_data(response.content)
    out = []
    for message in buffer:
        payload = json.loads(message.payload)
        if message.headers[":message-type"] == "event":
            payload = json.loads(base64.b64decode(payload["bytes"]))
        out.append((str(message.headers[":message-type"]), payload))
    return out


def test_gemini_text_thinking_calls_and_usage() -> None:
    turn = {
        "thinking": "hmm",
        "text": "Hello there",
        "tool_calls": [
            {"name": "Bash", "arguments": {"command": "ls"}},
            {"name": "Read", "arguments": {"file_path": "x"}, "id": "mine"},
        ],
        "usage": {"input": 10, "output": 4, "cached": 6},
        "chunk_size": 5,
    }
    with FakeProvider([turn]) as fake:
        response = gemini(fake.url, {"contents": [USER]})
        (sent,) = fake.of("gemini")
    assert response.headers["content-type"].startswith("text/event-stream")
    assert sent["model"] == "gemini-test" and sent["path"] == GEMINI
    chunks = gemini_chunks(response)
    parts = [p for c in chunks for p in c["candidates"][0]["content"]["parts"]]
    assert "".join(p["text"] for p in parts if p.get("thought")) == "hmm"
    assert [p["text"] for p in parts if "text" in p and not p.get("thought") and p["text"]] == [
        "Hello",
        " ther",
        "e",
    ]
    calls = [p["functionCall"] for p in parts if "functionCall" in p]
    assert [(c["name"], c["args"]) for c in calls] == [
        ("Bash", {"command": "ls"}),
        ("Read", {"file_path": "x"}),
    ]
    assert calls[0]["id"].startswith("fc-") and calls[1]["id"] == "mine"
    assert chunks[-1]["candidates"][0]["finishReason"] == "STOP"
    usage = chunks[-1]["usageMetadata"]
    assert (usage["promptTokenCount"], usage["cachedContentTokenCount"]) == (16, 6)
    assert usage["candidatesTokenCount"] == 4


def test_gemini_refuses_unanswered_calls_and_plain_json_streams() -> None:
    call = {"role": "model", "parts": [{"functionCall": {"name": "Bash", "args": {}, "id": "c1"}}]}

    def answer(name: str, id_: str | None = None) -> dict[str, Any]:
        fr: dict[str, Any] = {"name": name, "response": {"output": "ok"}}
        fr.update({"id": id_} if id_ else {})
        return {"role": "user", "parts": [{"functionResponse": fr}]}

    with FakeProvider([{"text": "fine"}]) as fake:
        wrong_name = gemini(fake.url, {"contents": [USER, call, answer("Read")]})
        wrong_id = gemini(fake.url, {"contents": [USER, call, answer("Bash", "c9")]})
        not_sse = gemini(fake.url, {"contents": [USER]}, GEMINI.removesuffix("?alt=sse"))
        ok = gemini(fake.url, {"contents": [USER, call, answer("Bash", "c1")]})
        problems = [v["problems"] for v in fake.violations]
    assert [r.status_code for r in (wrong_name, wrong_id, not_sse, ok)] == [400, 400, 400, 200]
    assert wrong_name.json()["error"]["status"] == "INVALID_ARGUMENT"
    assert "do not answer the calls ['Bash']" in problems[0][0]
    assert "c9" in problems[1][0] and "alt=sse" in problems[2][0]


def test_gemini_faults_and_safety_stops() -> None:
    script = [
        {"fault": {"status": 429, "retry_after": 2}},
        {"text": "I will not", "finish": "SAFETY"},
        {"text": "abcdefgh", "chunk_size": 2, "fault": {"cut_after_events": 2, "graceful": True}},
    ]
    with FakeProvider(script) as fake:
        limited = gemini(fake.url, {"contents": [USER]})
        unsafe = gemini_chunks(gemini(fake.url, {"contents": [USER]}))
        cut = gemini_chunks(gemini(fake.url, {"contents": [USER]}))
    assert limited.status_code == 429 and limited.headers["retry-after"] == "2"
    assert limited.json()["error"]["status"] == "RESOURCE_EXHAUSTED"
    assert unsafe[-1]["candidates"][0]["finishReason"] == "SAFETY"
    assert len(cut) == 2 and all("finishReason" not in c["candidates"][0] for c in cut)


def test_bedrock_frames_carry_anthropic_events_with_split_arguments() -> None:
    turn = {
        "text": "Hi",
        "tool_calls": [{"name": "Bash", "arguments": {"command": "ls -la"}}],
        "usage": {"input": 12, "output": 3, "cached": 40},
        "chunk_size": 4,
    }
    with FakeProvider([turn]) as fake:
        response = bedrock(fake.url, BEDROCK_BODY)
        (sent,) = fake.of("bedrock")
    assert fake.violations == [] and sent["signature"] == "valid"
    assert sent["model"] == "anthropic.claude-test:0" and sent["path"] == BEDROCK
    assert response.headers["content-type"] == "application/vnd.amazon.eventstream"
    events = [e for kind, e in bedrock_events(response) if kind == "event"]
    kinds = [e["type"] for e in events]
    assert kinds[0] == "message_start" and kinds[-1] == "message_stop" and "ping" not in kinds
    assert events[0]["message"]["usage"]["cache_read_input_tokens"] == 40
    pieces = [
        e["delta"]["partial_json"]
        for e in events
        if e["type"] == "content_block_delta" and e["delta"]["type"] == "input_json_delta"
    ]
    assert len(pieces) > 1 and json.loads("".join(pieces)) == {"command": "ls -la"}
    assert "amazon-bedrock-invocationMetrics" in events[-1]


def test_bedrock_checks_signature_and_body_and_sends_exceptions() -> None:
    script = [{"exception": "throttlingException"}, {"fault": {"status": 503}}]
    with FakeProvider(script) as fake:
        forged = bedrock(fake.url, BEDROCK_BODY, secret="wrong")
        with httpx.Client(timeout=10) as client:
            unsigned = client.post(fake.url + BEDROCK, json=BEDROCK_BODY)
        extra = bedrock(fake.url, {**BEDROCK_BODY, "model": "m", "stream": True})
        unanswered = bedrock(fake.url, {**BEDROCK_BODY, "messages": [
            {"role": "user", "content": "hi"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "X", "input": {}}]},
        ]})  # fmt: skip
        throttled = bedrock_events(bedrock(fake.url, BEDROCK_BODY))
        unavailable = bedrock(fake.url, BEDROCK_BODY)
        verdicts = [r.get("signature") for r in fake.of("bedrock")]
        problems = [v["problems"] for v in fake.violations]
    assert (forged.status_code, unsigned.status_code) == (403, 403)
    assert "signature" in forged.json()["message"]
    assert verdicts[:2] == ["signature mismatch", "no AWS4-HMAC-SHA256 authorization header"]
    assert extra.status_code == 400 and "extraneous key [model]" in extra.json()["message"]
    assert unanswered.status_code == 400 and "t1" in problems[3][0]
    assert throttled == [("exception", {"message": "fake bedrock exception"})]
    assert unavailable.status_code == 503 and "message" in unavailable.json()


def test_listings_only_when_models_are_given() -> None:
    with FakeProvider([]) as fake, httpx.Client(timeout=10) as client:
        assert client.get(f"{fake.url}/v1/models").status_code == 404
        assert fake.requests == []
    listing = [{"id": "gemini-test", "context_length": 1000}, "small"]
    with FakeProvider([], models=listing, ollama=True) as fake, httpx.Client(timeout=10) as c:
        openai = c.get(f"{fake.url}/v1/models").json()
        google = c.get(f"{fake.url}/v1beta/models").json()
        loaded = c.get(f"{fake.url}/api/ps").json()
        assert [r["path"] for r in fake.of("list")] == ["/v1/models", "/v1beta/models", "/api/ps"]
    assert [m["id"] for m in openai["data"]] == ["gemini-test", "small"]
    assert google["models"][0] == {
        "name": "models/gemini-test",
        "inputTokenLimit": 1000,
        "supportedGenerationMethods": ["generateContent"],
    }
    assert [m["name"] for m in loaded["models"]] == ["gemini-test"]


def test_dialect_keys_are_validated() -> None:
    assert validate_script([{"finish": "SAFETY"}, {"block": "OTHER"}, {"exception": "x"}])
    for key in ("finish", "block", "exception"):
        with pytest.raises(ValueError, match=f"turn 0: {key} must be a non-empty string"):
            validate_script([{key: 1}])


def test_cli_serves_gemini_and_bedrock(tmp_path: Path) -> None:
    script = tmp_path / "script.json"
    script.write_text(json.dumps([{"text": "from gemini"}, {"text": "from bedrock"}]))
    env = {**os.environ, "PYTHONPATH": str(Path(tether.__file__).parents[1])}
    with subprocess.Popen(
        [sys.executable, "-m", "tether.testing.fake_provider", "--script", str(script)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env,
    ) as proc:  # fmt: skip
        try:
            assert proc.stdout is not None
            url = proc.stdout.readline().strip()
            said = gemini_chunks(gemini(url, {"contents": [USER]}))
            framed = bedrock_events(bedrock(url, BEDROCK_BODY))
        finally:
            proc.send_signal(signal.SIGTERM)
            _, err = proc.communicate(timeout=10)
    assert proc.returncode == 0, err
    parts = [p for c in said for p in c["candidates"][0]["content"]["parts"]]
    assert "".join(p["text"] for p in parts) == "from gemini"
    texts = [e["delta"]["text"] for _, e in framed if e.get("type") == "content_block_delta"]
    assert "".join(texts) == "from bedrock"
