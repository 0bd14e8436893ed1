"""End to end: the real `tether` script against loopback fakes of Gemini, Bedrock (signatures
checked with botocore), an OpenAI-compatible preset (OpenRouter) and a discovered Ollama model."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.support import TETHER, Run, run_tether, transcript_lines
from tether.testing.fake_provider import FakeProvider

AKID, SECRET = "AKIDTETHERTEST", "tether/test/secret/key"
BEDROCK_MODEL = "us.anthropic.claude-sonnet-4-5-20250929-v1:0"
_SCRUB = (
    "ANTHROPIC_",
    "OPENAI_",
    "GEMINI_",
    "GOOGLE_",
    "AWS_",
    "OLLAMA_",
    "OPENROUTER_",
    "TETHER_",
)

# model handle -> (env pointing tether at the fake, how requests are told apart in the fake)
PROVIDERS: dict[str, tuple[Callable[[str], dict[str, str]], str]] = {
    "google/gemini-2.5-pro": (
        lambda url: {"GEMINI_API_KEY": "g-test", "GEMINI_BASE_URL": f"{url}/v1beta"},
        "gemini",
    ),
    f"bedrock/{BEDROCK_MODEL}": (
        lambda url: {
            "AWS_ACCESS_KEY_ID": AKID,
            "AWS_SECRET_ACCESS_KEY": SECRET,
            "AWS_REGION": "us-east-1",
            "AWS_ENDPOINT_URL_BEDROCK_RUNTIME": url,
            "AWS_EC2_METADATA_DISABLED": "true",
        },
        "bedrock",
    ),
    "openrouter/anthropic/claude-sonnet-4.5": (
        lambda url: {"OPENROUTER_API_KEY": "or-test", "OPENROUTER_BASE_URL": f"{url}/api/v1"},
        "chat",
    ),
    "ollama/": (lambda url: {"OLLAMA_BASE_URL": url}, "chat"),
}
MODELS = list(PROVIDERS)


def env_for(url: str, model: str, home: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(_SCRUB)}
    env.pop("PYTHONUNBUFFERED", None)
    env["TETHER_HOME"] = str(home)
    env.update(PROVIDERS[model][0](url) if model in PROVIDERS else {})
    env.update(extra)
    return env


def fake_for(script: list[dict[str, Any]]) -> FakeProvider:
    return FakeProvider(
        script, models=["qwen3:latest", "llama3.2:latest"], ollama=True, aws_secrets={AKID: SECRET}
    )


def tether(
    model: str, fake: FakeProvider, home: Path, cwd: Path, *args: str, prompt: str = "hi"
) -> Run:
    return run_tether(
        ["-p", prompt, "--model", model, "--output-format", "stream-json", *args],
        env=env_for(fake.url, model, home),
        cwd=cwd,
    )


@pytest.mark.parametrize("model", MODELS)
def test_text_reply_stream_json(model: str, workdir: Path, tether_home: Path) -> None:
    turn = {"text": "Hello from elsewhere", "usage": {"input": 11, "output": 5, "cached": 7}}
    with fake_for([turn]) as fake:
        run = tether(model, fake, tether_home, workdir)
        sent = fake.of(PROVIDERS[model][1])
        assert fake.violations == []
    assert run.code == 0, run.stderr
    init, result = run.events[0], run.events[-1]
    assert (init["type"], init["subtype"], init["model"]) == ("system", "init", model)
    texts = run.of_type("message", "assistant_message")
    assert "".join(t["content"] for t in texts) == "Hello from elsewhere"
    assert result["type"] == "result" and result["subtype"] == "success"
    assert result["result"] == "Hello from elsewhere"
    assert result["usage"]["completion_tokens"] == 5
    assert len(sent) == 1
    if PROVIDERS[model][1] != "chat":  # Chat Completions servers here send no cached count
        assert result["usage"]["cached_input_tokens"] == 7
    _assert_request_shape(model, sent[0])


def _assert_request_shape(model: str, sent: dict[str, Any]) -> None:
    body = sent["body"]
    if model.startswith("google/"):
        assert sent["path"] == "/v1beta/models/gemini-2.5-pro:streamGenerateContent?alt=sse"
        assert sent["headers"]["x-goog-api-key"] == "g-test"
        assert body["contents"][-1]["parts"][-1]["text"].endswith("hi")
        assert body["systemInstruction"]["parts"][0]["text"]
        declarations = body["tools"][0]["functionDeclarations"]
        assert "Bash" in {d["name"] for d in declarations}
        assert "additionalProperties" not in json.dumps(declarations)
    elif model.startswith("bedrock/"):
        assert sent["signature"] == "valid" and sent["model"] == BEDROCK_MODEL
        assert body["anthropic_version"] == "bedrock-2023-05-31" and "model" not in body
        assert sent["headers"]["authorization"].startswith(f"AWS4-HMAC-SHA256 Credential={AKID}/")
    elif model.startswith("openrouter/"):
        assert sent["path"] == "/api/v1/chat/completions"
        assert body["model"] == "anthropic/claude-sonnet-4.5"
        assert sent["headers"]["authorization"] == "Bearer or-test"
        assert sent["headers"]["x-title"] == "tether"
    else:
        assert body["model"] == "qwen3:latest"  # the loaded model (`/api/ps`), not "default"


@pytest.mark.parametrize("model", MODELS)
def test_parallel_tool_calls_then_answer(model: str, workdir: Path, tether_home: Path) -> None:
    one, two = workdir / "one.txt", workdir / "two.txt"
    writes = [
        {"name": "Write", "arguments": {"file_path": str(one), "content": "one\n"}},
        {"name": "Write", "arguments": {"file_path": str(two), "content": "two\n"}},
    ]
    with fake_for([{"tool_calls": writes, "chunk_size": 3}, {"text": "wrote both"}]) as fake:
        run = tether(model, fake, tether_home, workdir, "--yolo", prompt="write files")
        sent = fake.of(PROVIDERS[model][1])
        assert fake.violations == []
    assert run.code == 0, run.stderr
    assert one.read_text() == "one\n" and two.read_text() == "two\n"
    calls = run.of_type("message", "tool_call_message")
    returns = run.of_type("message", "tool_return_message")
    assert [json.loads(c["tool_call"]["arguments"])["file_path"] for c in calls] == [
        str(one),
        str(two),
    ]
    assert {r["tool_call_id"] for r in returns} == {c["tool_call"]["tool_call_id"] for c in calls}
    assert all(r["status"] == "success" for r in returns)
    assert run.events[-1]["result"] == "wrote both" and len(sent) == 2
    replay = json.dumps(sent[1]["body"])
    if model.startswith("google/"):  # results go back as functionResponse parts, in call order
        last = sent[1]["body"]["contents"][-1]["parts"]
        assert [p["functionResponse"]["name"] for p in last] == ["Write", "Write"]
    else:
        assert all(c["tool_call"]["tool_call_id"] in replay for c in calls)
    roles = [e["message"]["role"] for e in transcript_lines(tether_home)[1:]]
    assert roles == ["user", "assistant", "toolResult", "toolResult", "assistant"]


@pytest.mark.parametrize("model", MODELS)
def test_429_then_success_shows_retry(model: str, workdir: Path, tether_home: Path) -> None:
    with fake_for([{"fault": {"status": 429, "retry_after": 0}}, {"text": "after retry"}]) as fake:
        run = tether(model, fake, tether_home, workdir)
    assert run.code == 0, run.stderr
    retries = run.of_type("retry")
    assert len(retries) == 1 and retries[0]["attempt"] == 1
    assert run.events[-1]["result"] == "after retry"


@pytest.mark.parametrize("model", MODELS)
def test_cut_stream_is_an_error(model: str, workdir: Path, tether_home: Path) -> None:
    script = [
        {
            "text": "this answer will be cut off midway",
            "chunk_size": 1,
            "fault": {"cut_after_events": 8},
        }
    ]
    with fake_for(script) as fake:
        run = tether(model, fake, tether_home, workdir)
    assert run.code == 1
    assert run.of_type("error")[-1]["stop_reason"] == "llm_api_error"
    assert not run.of_type("result")
    roles = [e["message"]["role"] for e in transcript_lines(tether_home)[1:]]
    assert roles == ["user"]


@pytest.mark.parametrize(
    ("turn", "words"),
    [
        ({"text": "I will not", "finish": "SAFETY"}, "finishReason SAFETY"),
        ({"finish": "RECITATION"}, "finishReason RECITATION"),
        ({"block": "PROHIBITED_CONTENT"}, "blockReason PROHIBITED_CONTENT"),
    ],
)
def test_gemini_safety_stop_is_a_named_error(
    turn: dict, words: str, workdir: Path, tether_home: Path
) -> None:
    with fake_for([turn]) as fake:
        run = tether("google/gemini-2.5-pro", fake, tether_home, workdir)
        assert len(fake.of("gemini")) == 1  # not retried
    assert run.code == 1
    error = run.of_type("error")[-1]
    assert words in error["message"] and error["stop_reason"] == "llm_api_error"


def test_connect_bedrock_then_run_with_the_stored_keys(workdir: Path, tether_home: Path) -> None:
    with fake_for([{"text": "signed and served"}]) as fake:
        env = env_for(fake.url, "none", tether_home)
        saved = run_tether(
            ["connect", "bedrock", "--access-key", AKID, "--secret-key", SECRET, "--region", "us-east-1",
             "--base-url", fake.url],
            env=env, cwd=workdir,
        )  # fmt: skip
        assert saved.code == 0, saved.stderr
        run = run_tether(
            ["-p", "hi", "--model", f"amazon-bedrock/{BEDROCK_MODEL}"], env=env, cwd=workdir
        )
        (sent,) = fake.of("bedrock")
    assert run.code == 0, run.stderr
    assert run.stdout == "signed and served\n" and sent["signature"] == "valid"
    record = json.loads((tether_home / "providers" / "auth.json").read_text())[0]
    assert (record["name"], record["access_key"], record["region"]) == (
        "lc-bedrock",
        AKID,
        "us-east-1",
    )
    bad = run_tether(["connect", "bedrock", "--access-key", AKID], env=env, cwd=workdir)
    assert bad.code == 1 and "--secret-key" in bad.stderr


def test_wrong_bedrock_secret_is_refused_by_the_signature_check(
    workdir: Path, tether_home: Path
) -> None:
    with fake_for([{"text": "never"}]) as fake:
        env = env_for(
            fake.url, f"bedrock/{BEDROCK_MODEL}", tether_home, AWS_SECRET_ACCESS_KEY="wrong"
        )
        run = run_tether(["-p", "hi", "--model", f"bedrock/{BEDROCK_MODEL}"], env=env, cwd=workdir)
        assert fake.violations and "signature mismatch" in fake.violations[0]["problems"][0]
    assert run.code == 1 and "HTTP 403" in run.stderr and "signature" in run.stderr


def test_custom_provider_by_connect_and_discovery_errors(workdir: Path, tether_home: Path) -> None:
    with FakeProvider([{"text": "from the gateway"}], models=["gw-model-a", "gw-model-b"]) as fake:
        env = env_for(fake.url, "none", tether_home)
        saved = run_tether(
            ["connect", "gateway", "--base-url", f"{fake.url}/v1", "--api-key", "gw-key"],
            env=env,
            cwd=workdir,
        )
        assert saved.code == 0, saved.stderr
        assert "--model gateway/" in saved.stdout
        run = run_tether(["-p", "hi", "--model", "gateway/"], env=env, cwd=workdir)
        wrong = run_tether(["-p", "hi", "--model", "gateway/gw-model-z"], env=env, cwd=workdir)
        (sent,) = fake.of("chat")
    assert run.code == 0 and run.stdout == "from the gateway\n", run.stderr
    assert (
        sent["body"]["model"] == "gw-model-a"
        and sent["headers"]["authorization"] == "Bearer gw-key"
    )
    assert wrong.code == 1
    assert "has no model 'gw-model-z'; it has: gw-model-a, gw-model-b" in wrong.stderr


def test_models_lists_configured_providers_with_windows(
    tether_home: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from tether.cli.commands import run_subcommand

    listing = [{"id": "qwen3-32b", "context_length": 40960}, "tiny"]
    with FakeProvider([], models=listing) as fake:
        monkeypatch.setenv("LMSTUDIO_BASE_URL", f"{fake.url}/v1")
        monkeypatch.setenv("ANTHROPIC_API_KEY", "a-key")
        monkeypatch.setenv("ANTHROPIC_BASE_URL", "http://127.0.0.1:9")  # down: an error row
        assert run_subcommand("models", []) == 0
        rows = json.loads(capsys.readouterr().out)
        assert run_subcommand("models", ["--provider", "anthropic"]) == 1
        assert "cannot list the models of anthropic" in capsys.readouterr().err
    assert rows[0]["provider"] == "anthropic" and "error" in rows[0]
    assert rows[1:] == [
        {
            "handle": "lmstudio/qwen3-32b",
            "provider": "lmstudio",
            "model": "qwen3-32b",
            "context_window": 40960,
        },
        {
            "handle": "lmstudio/tiny",
            "provider": "lmstudio",
            "model": "tiny",
            "context_window": None,
        },
    ]


@pytest.mark.parametrize("model", ["google/gemini-2.5-pro", f"bedrock/{BEDROCK_MODEL}"])
def test_sigint_while_waiting_for_the_model_cancels(
    model: str, workdir: Path, tether_home: Path
) -> None:
    with fake_for([{"fault": {"hang": True}}]) as fake:
        proc = subprocess.Popen(
            [TETHER, "-p", "hi", "--model", model, "--output-format", "stream-json"],
            env=env_for(fake.url, model, tether_home), cwd=workdir, stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        )  # fmt: skip
        deadline = time.monotonic() + 20
        while not fake.of(PROVIDERS[model][1]) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert fake.of(PROVIDERS[model][1]), "the request never arrived"
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=20)
    assert proc.returncode == 130, err
    last = json.loads(out.splitlines()[-1])
    assert last["type"] == "error" and last["stop_reason"] == "cancelled"


@pytest.mark.parametrize("model", ["google/gemini-2.5-pro", f"bedrock/{BEDROCK_MODEL}"])
def test_compaction_summary_goes_to_the_same_provider(
    model: str, workdir: Path, tether_home: Path
) -> None:
    lean = ["--system-custom", "You are terse.", "--tools", "", "--reflection-trigger", "off"]
    kind = PROVIDERS[model][1]
    conversation: list[str] = []
    script = [
        {"text": "noted 0"},
        {"text": "noted 1"},
        {"text": "SUMMARY: two long parts."},
        {"text": "third"},
    ]
    with fake_for(script) as fake:
        env = env_for(fake.url, model, tether_home, TETHER_CONTEXT_WINDOW="2048")
        for n, words in enumerate(["lorem ipsum " * 150, "lorem ipsum " * 150, "dolor sit " * 300]):
            args = [
                "-p",
                f"part {n}: {words}",
                "--model",
                model,
                "--output-format",
                "stream-json",
                *lean,
            ]
            run = run_tether(
                args + (["--conversation", conversation[0]] if conversation else []),
                env=env,
                cwd=workdir,
            )
            assert run.code == 0, run.stderr
            conversation = conversation or [run.events[-1]["conversation_id"]]
        requests = fake.of(kind)
        assert fake.violations == []
    assert run.events[-1]["result"] == "third"
    assert len(requests) == 4  # two turns, the summary call, the third turn: one provider
    summary = json.dumps(requests[2]["body"])
    assert "You are summarising" in summary and "lorem ipsum" in summary
    assert "SUMMARY: two long parts." in json.dumps(requests[3]["body"])
    assert "part 0" not in json.dumps(requests[3]["body"])


def test_models_for_google_uses_its_listing(
    tether_home: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from tether.cli.commands import run_subcommand

    listing = [
        {"id": "gemini-2.5-pro", "context_length": 1048576},
        {"id": "text-embedding-004", "methods": ["embedContent"]},
    ]
    with FakeProvider([], models=listing) as fake:
        monkeypatch.setenv("GEMINI_API_KEY", "g-list")
        monkeypatch.setenv("GEMINI_BASE_URL", f"{fake.url}/v1beta")
        assert run_subcommand("models", ["--provider", "google"]) == 0
        (asked,) = fake.of("list")
    assert json.loads(capsys.readouterr().out) == [
        {"handle": "google/gemini-2.5-pro", "provider": "google", "model": "gemini-2.5-pro",
         "context_window": 1048576}
    ]  # fmt: skip
    assert asked["headers"]["x-goog-api-key"] == "g-list"


def test_gemini_thought_signature_survives_the_transcript(workdir: Path, tether_home: Path) -> None:
    """The signature Gemini put on a thinking turn's function call goes back on that call."""
    write = {"name": "Write", "arguments": {"file_path": str(workdir / "x.txt"), "content": "x"}}
    with fake_for([{"thinking": "plan it", "tool_calls": [write]}, {"text": "done"}]) as fake:
        run = tether("google/gemini-2.5-pro", fake, tether_home, workdir, "--yolo")
        first, second = fake.of("gemini")
        assert fake.violations == []
    assert run.code == 0, run.stderr
    assert "".join(e["reasoning"] for e in run.of_type("message", "reasoning_message")) == "plan it"
    model_turn = second["body"]["contents"][-2]
    assert model_turn["role"] == "model"
    (call,) = model_turn["parts"]
    assert call["functionCall"]["name"] == "Write" and call["thoughtSignature"].startswith("sig-")
    assert "plan it" not in json.dumps(second["body"])  # thought text is not replayed
