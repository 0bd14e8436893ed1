"""The fake provider itself: dialect streams, invariant checks, faults, control endpoints, CLI."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

import tether
from tether.providers.sse import SSEEvent, SSEParser
from tether.testing.fake_invariants import check_anthropic, check_chat, check_responses
from tether.testing.fake_provider import FakeProvider, validate_script

USER = {"role": "user", "content": "hi"}


def post(url: str, body: Any) -> httpx.Response:
    with httpx.Client(timeout=10) as client:
        return client.post(url, json=body)


def events(response: httpx.Response) -> list[SSEEvent]:
    parser = SSEParser()
    return parser.feed(response.content) + parser.finish()


def payloads(response: httpx.Response) -> list[Any]:
    return [json.loads(e.data) if e.data != "[DONE]" else "[DONE]" for e in events(response)]


def test_one_script_serves_every_dialect_in_order() -> None:
    script = [{"text": "one"}, {"text": "two"}, {"text": "three"}]
    with FakeProvider(script) as fake:
        a = post(f"{fake.url}/v1/messages", {"model": "m", "messages": [USER]})
        r = post(f"{fake.url}/responses", {"model": "m", "input": "hi"})
        c = post(f"{fake.url}/chat/completions", {"model": "m", "messages": [USER]})
        exhausted = post(f"{fake.url}/v1/chat/completions", {"model": "m", "messages": [USER]})
        assert [q["path"] for q in fake.requests] == [
            "/v1/messages",
            "/responses",
            "/chat/completions",
            "/v1/chat/completions",
        ]
        assert fake.requests[0]["body"] == {"model": "m", "messages": [USER]}
    assert a.headers["content-type"].startswith("text/event-stream")
    deltas = [p["delta"]["text"] for p in payloads(a) if p["type"] == "content_block_delta"]
    assert deltas == ["one"]
    assert [e.event for e in events(a)][-1] == "message_stop"
    assert any(p.get("delta") == "two" for p in payloads(r))
    assert payloads(r)[-1]["type"] == "response.completed"
    assert [p["choices"][0]["delta"].get("content") for p in payloads(c)[1:2]] == ["three"]
    assert payloads(c)[-1] == "[DONE]"
    assert exhausted.status_code == 500 and exhausted.json() == {
        "error": "fake provider script exhausted"
    }


def test_usage_in_terminal_events_and_chat_usage_only_when_asked() -> None:
    turn = {"text": "x", "usage": {"input": 11, "output": 3, "cached": 5}}
    with FakeProvider([turn] * 4) as fake:
        a = payloads(post(f"{fake.url}/v1/messages", {"messages": [USER]}))
        r = payloads(post(f"{fake.url}/v1/responses", {"input": "hi"}))
        asked = payloads(
            post(
                f"{fake.url}/v1/chat/completions",
                {"messages": [USER], "stream_options": {"include_usage": True}},
            )
        )
        silent = payloads(post(f"{fake.url}/v1/chat/completions", {"messages": [USER]}))
    assert a[0]["message"]["usage"]["input_tokens"] == 11
    assert a[0]["message"]["usage"]["cache_read_input_tokens"] == 5
    assert [p["usage"]["output_tokens"] for p in a if p["type"] == "message_delta"] == [3]
    assert r[-1]["response"]["usage"]["input_tokens"] == 16
    assert r[-1]["response"]["usage"]["input_tokens_details"] == {"cached_tokens": 5}
    assert asked[-2]["choices"] == [] and asked[-2]["usage"]["prompt_tokens"] == 16
    assert not any("usage" in p for p in silent if p != "[DONE]")


def test_tool_call_ids_are_numbered_per_dialect_and_explicit_ids_win() -> None:
    turn = {
        "tool_calls": [
            {"name": "A", "arguments": {}},
            {"name": "B", "arguments": "{}", "id": "mine"},
        ]
    }
    with FakeProvider([turn, turn]) as fake:
        a = payloads(post(f"{fake.url}/v1/messages", {"messages": [USER]}))
        c = payloads(post(f"{fake.url}/v1/chat/completions", {"messages": [USER]}))
    a_ids = [p["content_block"]["id"] for p in a if p["type"] == "content_block_start"]
    c_ids = [
        tc["id"]
        for p in c
        if p != "[DONE]"
        for ch in p["choices"]
        for tc in ch["delta"].get("tool_calls", [])
        if "id" in tc
    ]
    assert a_ids[0].startswith("toolu_") and a_ids[1] == "mine"
    assert c_ids[0].startswith("call_") and c_ids[1] == "mine"


def test_violations_are_refused_with_the_id_and_consume_no_turn() -> None:
    bad = {
        "messages": [
            USER,
            {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": "toolu_1", "name": "X", "input": {}}],
            },
            {
                "role": "user",
                "content": [{"type": "tool_result", "tool_use_id": "toolu_9", "content": "?"}],
            },
        ]
    }
    with FakeProvider([{"text": "fine"}]) as fake:
        refused = post(f"{fake.url}/v1/messages", bad)
        assert refused.status_code == 400
        assert refused.json()["error"]["type"] == "invalid_request_error"
        assert (
            "toolu_9" in refused.json()["error"]["message"]
            and "toolu_1" in refused.json()["error"]["message"]
        )
        assert fake.violations[0]["request"] == 0 and fake.violations[0]["path"] == "/v1/messages"
        assert post(f"{fake.url}/v1/messages", {"messages": [USER]}).status_code == 200
        assert len(fake.requests) == 2


def test_anthropic_check() -> None:
    use = {
        "role": "assistant",
        "content": [{"type": "tool_use", "id": "t1", "name": "X", "input": {}}],
    }
    result = {
        "role": "user",
        "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "ok"}],
    }
    assert check_anthropic({"messages": [USER, use, result]}) == []
    (unanswered,) = check_anthropic({"messages": [USER, use]})
    assert "without `tool_result`" in unanswered and "t1" in unanswered
    # A result one message too late does not answer the call.
    assert len(check_anthropic({"messages": [USER, use, USER, result]})) == 2
    assert len(check_anthropic({"messages": [USER, use, result, result]})) == 1


def test_responses_check() -> None:
    call = {"type": "function_call", "call_id": "c1", "name": "X", "arguments": "{}"}
    output = {"type": "function_call_output", "call_id": "c1", "output": "ok"}
    assert check_responses({"input": [call, output]}) == []
    assert check_responses({"input": "plain"}) == []
    assert check_responses({"input": [output, call]})[0].startswith("input[0]: No tool call found")
    assert check_responses({"input": [call]}) == ["No tool output found for function call c1."]
    assert "Duplicate" in check_responses({"input": [call, output, output]})[0]


def test_chat_check() -> None:
    call = {
        "role": "assistant",
        "content": "",
        "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "X", "arguments": "{}"}}
        ],
    }
    tool = {"role": "tool", "tool_call_id": "c1", "content": "ok"}
    assert check_chat({"messages": [USER, call, tool, USER]}) == []
    assert "did not have response messages: c1" in check_chat({"messages": [USER, call, USER]})[0]
    assert (
        "unknown tool_call_id c9"
        in check_chat({"messages": [USER, call, {**tool, "tool_call_id": "c9"}]})[0]
    )
    problems = check_chat({"messages": [USER, {**call, "content": None}, tool]})
    assert problems and "null" in problems[0]


def test_fault_status_with_retry_after_and_custom_body() -> None:
    script = [
        {"fault": {"status": 429, "retry_after": 0}},
        {"fault": {"status": 503, "body": "upstream sad"}},
    ]
    with FakeProvider(script) as fake:
        limited = post(f"{fake.url}/v1/messages", {"messages": [USER]})
        sad = post(f"{fake.url}/v1/chat/completions", {"messages": [USER]})
    assert limited.status_code == 429 and limited.headers["retry-after"] == "0"
    assert limited.json()["error"]["type"] == "rate_limit_error"
    assert sad.status_code == 503 and sad.text == "upstream sad"


def test_cut_after_events_closes_mid_body() -> None:
    script = [{"text": "abcdefghijklmn", "fault": {"cut_after_events": 3}}]
    with (
        FakeProvider(script) as fake,
        httpx.Client(timeout=10) as client,
        pytest.raises(httpx.RemoteProtocolError),
    ):
        client.post(f"{fake.url}/v1/messages", json={"messages": [USER]})


def test_delay_and_hang_and_prompt_stop() -> None:
    with FakeProvider([{"text": "slow", "delay_ms": 200}, {"fault": {"hang": True}}]) as fake:
        started = time.monotonic()
        assert post(f"{fake.url}/v1/chat/completions", {"messages": [USER]}).status_code == 200
        assert time.monotonic() - started >= 0.2
        with httpx.Client(timeout=0.3) as client, pytest.raises(httpx.ReadTimeout):
            client.post(f"{fake.url}/v1/chat/completions", json={"messages": [USER]})
        stopping = time.monotonic()
    assert time.monotonic() - stopping < 30  # stop() released the hanging handler


def test_control_endpoints_replace_the_script_and_report() -> None:
    with FakeProvider([{"text": "old"}]) as fake, httpx.Client(timeout=10) as client:
        assert client.post(f"{fake.url}/_script", json=[{"text": "new"}]).json() == {
            "ok": True,
            "turns": 1,
        }
        bad = client.post(f"{fake.url}/_script", json=[{"txt": "typo"}])
        assert bad.status_code == 400 and "txt" in bad.json()["error"]
        reply = client.post(f"{fake.url}/v1/chat/completions", json={"messages": [USER]})
        client.post(
            f"{fake.url}/v1/chat/completions",
            json={"messages": [{"role": "user", "content": None}]},
        )
        recorded = client.get(f"{fake.url}/_requests").json()
        violations = client.get(f"{fake.url}/_violations").json()
    assert '"new"' in reply.text
    assert [r["path"] for r in recorded] == ["/v1/chat/completions"] * 2
    assert violations[0]["request"] == 1 and "null" in violations[0]["problems"][0]


def test_script_validation() -> None:
    with pytest.raises(ValueError, match="list"):
        validate_script({"text": "x"})
    assert validate_script([{"_why": "comments are allowed", "text": "a"}])
    with pytest.raises(ValueError, match="turn 1.*unknown keys"):
        validate_script([{"text": "a"}, {"txt": "b"}])
    with pytest.raises(ValueError, match="fault"):
        validate_script([{"fault": {"status": "429"}}])
    with pytest.raises(ValueError, match="stop"):
        validate_script([{"stop": "tool_use"}])


def test_cli_prints_its_url_serves_and_exits_on_sigterm(tmp_path: Path) -> None:
    script = tmp_path / "script.json"
    script.write_text(json.dumps([{"text": "from the cli"}]))
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(
            [str(Path(tether.__file__).parents[1]), os.environ.get("PYTHONPATH", "")]
        ),
    }
    with subprocess.Popen(
        [
            sys.executable,
            "-m",
            "tether.testing.fake_provider",
            "--port",
            "0",
            "--script",
            str(script),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    ) as proc:
        try:
            assert proc.stdout is not None
            url = proc.stdout.readline().strip()
            assert url.startswith("http://127.0.0.1:")
            reply = post(f"{url}/v1/responses", {"input": "hi"})
            assert '"from the cli"' in reply.text
        finally:
            proc.send_signal(signal.SIGTERM)
            _, err = proc.communicate(timeout=10)
    assert proc.returncode == 0, err


def test_cli_rejects_a_bad_script_file(tmp_path: Path) -> None:
    script = tmp_path / "script.json"
    script.write_text("[{")
    env = {**os.environ, "PYTHONPATH": str(Path(tether.__file__).parents[1])}
    out = subprocess.run(
        [sys.executable, "-m", "tether.testing.fake_provider", "--script", str(script)],
        capture_output=True, text=True, env=env, timeout=20,
    )  # fmt: skip
    assert out.returncode == 2 and "cannot use script" in out.stderr
