"""Bedrock: SigV4 by botocore (AWS's published vectors), event-stream framing, credentials the AWS
way, and the provider against a loopback fake that checks every signature with botocore."""

from __future__ import annotations

import datetime
import json
from dataclasses import replace
from pathlib import Path

import pytest
from botocore.credentials import Credentials

from tests.providers.support import (
    FAST_RETRY,
    collect,
    collect_until_error,
    request,
    text_of,
    tool_calls,
    user,
)
from tether.errors import ProviderError, ProviderHTTPError, StreamCut, UsageError
from tether.protocol.chunks import StopReason, UsageStatistics
from tether.protocol.llm import ProviderRequest
from tether.providers.aws_auth import AwsAccess, resolve_aws_access, sign_request
from tether.providers.base import Endpoint
from tether.providers.bedrock import BedrockProvider, EventStreamDecoder
from tether.providers.catalog import default_handle, parse_handle, resolve_provider
from tether.providers.credentials import find_credential, load_credentials, save_credential
from tether.testing.fake_bedrock import chunk_frame, exception_frame, frame
from tether.testing.fake_provider import FakeProvider

AKID, SECRET = "AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"
MODEL = "us.anthropic.claude-sonnet-4-5-20250929-v1:0"
NO_IMDS = {"AWS_EC2_METADATA_DISABLED": "true"}


# --- signing: AWS's SigV4 test suite vectors, through tether's signing call ------------------


@pytest.mark.parametrize(
    ("method", "url", "signature"),
    [
        (
            "GET",
            "https://example.amazonaws.com/",
            "5fa00fa31553b73ebf1942676e86291e8372ff2a2260956d9b8aae1d763fbf31",
        ),
        (
            "GET",
            "https://example.amazonaws.com/?Param2=value2&Param1=value1",
            "b97d918cfa904a5beff61c982a1b6f458b799221646efd99d3219ec94cdf2500",
        ),
        (
            "POST",
            "https://example.amazonaws.com/",
            "5da7c1a2acd57cee7505fc6676e4e544621c30862966e37dddb68e92efbe5d6b",
        ),
    ],
    ids=["get-vanilla", "get-vanilla-query-order-key-case", "post-vanilla"],
)
def test_aws_sigv4_test_suite_vectors(
    method: str, url: str, signature: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import botocore.auth

    # The suite's fixed clock, pinned the way botocore's own suite pins it.
    monkeypatch.setattr(
        botocore.auth, "get_current_datetime", lambda: datetime.datetime(2015, 8, 30, 12, 36, 0)
    )
    access = AwsAccess(Credentials(AKID, SECRET), "us-east-1", "unused", service="service")
    headers = sign_request(access, method, url, {}, b"")
    assert headers["x-amz-date"] == "20150830T123600Z"
    assert headers["authorization"] == (
        "AWS4-HMAC-SHA256 Credential=AKIDEXAMPLE/20150830/us-east-1/service/aws4_request, "
        f"SignedHeaders=host;x-amz-date, Signature={signature}"
    )


# --- framing --------------------------------------------------------------------------------


def test_event_stream_frames_decode_in_any_split() -> None:
    events = [
        {"type": "message_start", "message": {"usage": {"input_tokens": 3}}},
        {"type": "message_stop"},
    ]
    data = b"".join(chunk_frame(e) for e in events) + frame(
        {":message-type": "event", ":event-type": "other"}, b"{}"
    )
    for size in (1, 7, len(data)):
        decoder = EventStreamDecoder()
        got = [e for i in range(0, len(data), size) for e in decoder.feed(data[i : i + size])]
        assert [(e.event, json.loads(e.data)) for e in got] == [(e["type"], e) for e in events]


def test_damaged_frame_and_exception_frames_are_errors() -> None:
    good = bytearray(chunk_frame({"type": "message_stop"}))
    good[-1] ^= 0xFF  # the message CRC no longer matches
    with pytest.raises(ProviderError, match="damaged event-stream frame"):
        list(EventStreamDecoder().feed(bytes(good)))
    with pytest.raises(ProviderError, match="throttlingException.*slow down") as info:
        list(EventStreamDecoder().feed(exception_frame("throttlingException", "slow down")))
    assert info.value.retryable
    with pytest.raises(ProviderError, match="validationException") as info:
        list(EventStreamDecoder().feed(exception_frame("validationException", "bad")))
    assert not info.value.retryable


# --- the provider against the signature-checking fake ------------------------------------------


def bedrock(fake: FakeProvider, secret: str = SECRET, token: str | None = None) -> BedrockProvider:
    access = AwsAccess(Credentials(AKID, secret, token), "us-east-1", fake.url)
    return BedrockProvider(Endpoint("bedrock", fake.url, None, 10.0), access, retry=FAST_RETRY)


def test_text_thinking_tool_calls_usage_over_signed_requests() -> None:
    turns = [
        {"thinking": "hmm", "text": "Hi", "usage": {"input": 12, "output": 3, "cached": 40}},
        {
            "tool_calls": [
                {"name": "Bash", "arguments": {"command": "ls"}},
                {"name": "Bash", "arguments": {"command": "pwd"}},
            ]
        },
    ]
    with FakeProvider(turns, aws_secrets={AKID: SECRET}) as fake:
        first = collect(bedrock(fake, token="session-token-1"), _req())
        second = collect(bedrock(fake), _req())
        sent = fake.of("bedrock")
    assert fake.violations == []
    assert [r["signature"] for r in sent] == ["valid", "valid"]
    assert sent[0]["headers"]["x-amz-security-token"] == "session-token-1"
    assert (
        sent[0]["path"]
        == "/model/us.anthropic.claude-sonnet-4-5-20250929-v1%3A0/invoke-with-response-stream"
    )
    assert sent[0]["model"] == MODEL
    body = sent[0]["body"]
    assert (
        body["anthropic_version"] == "bedrock-2023-05-31"
        and "model" not in body
        and "stream" not in body
    )
    # The Messages body as anthropic.build_body makes it, cache breakpoint included.
    block = {"type": "text", "text": "hi", "cache_control": {"type": "ephemeral"}}
    assert body["messages"] == [{"role": "user", "content": [block]}]
    assert text_of(first) == "Hi"
    usage = next(c for c in first if isinstance(c, UsageStatistics))
    assert (usage.usage.input_tokens, usage.usage.output_tokens, usage.usage.cache_read_tokens) == (12, 3, 40)
    assert first[-1] == StopReason("end_turn")
    assert [json.loads(c.arguments) for c in tool_calls(second)] == [
        {"command": "ls"},
        {"command": "pwd"},
    ]
    assert second[-1] == StopReason("requires_approval")


def _req() -> ProviderRequest:
    return replace(request(user("hi")), model=MODEL)


def test_a_wrong_secret_is_refused_and_not_retried() -> None:
    with FakeProvider([{"text": "never"}], aws_secrets={AKID: SECRET}) as fake:
        _, error = collect_until_error(bedrock(fake, secret="wrong"), _req())
        assert len(fake.of("bedrock")) == 1
        assert fake.violations[0]["problems"] == ["signature: signature mismatch"]
    assert isinstance(error, ProviderHTTPError) and error.status == 403 and not error.retryable
    assert "signature" in str(error)


def test_throttling_in_the_stream_is_retried_then_answers() -> None:
    turns = [{"exception": "throttlingException"}, {"text": "after throttle"}]
    with FakeProvider(turns, aws_secrets={AKID: SECRET}) as fake:
        chunks = collect(bedrock(fake), _req())
        assert [r["signature"] for r in fake.of("bedrock")] == ["valid", "valid"]  # signed again
    assert text_of(chunks) == "after throttle"


@pytest.mark.parametrize(
    ("graceful", "says"), [(False, "broke off"), (True, "before message_stop")]
)
def test_cut_stream_is_not_a_success(graceful: bool, says: str) -> None:
    cut = {
        "text": "abcdefgh",
        "chunk_size": 2,
        "fault": {"cut_after_events": 3, "graceful": graceful},
    }
    with FakeProvider([cut] * 4, aws_secrets={AKID: SECRET}) as fake:
        seen, error = collect_until_error(bedrock(fake), _req())
    assert isinstance(error, StreamCut) and says in str(error)
    assert text_of(seen) == "ab"  # output went out, so no retry glued a second answer on


# --- credentials, region and endpoint --------------------------------------------------------


def test_record_keys_then_env_keys_then_profile(tmp_path: Path) -> None:
    record = {
        "access_key": "AKREC",
        "auth": {"type": "api", "key": "rec-secret"},
        "region": "eu-west-1",
    }
    access = resolve_aws_access(
        record, {"AWS_ACCESS_KEY_ID": "AKENV", "AWS_SECRET_ACCESS_KEY": "x"}
    )
    assert (access.credentials.access_key, access.region) == ("AKREC", "eu-west-1")
    assert access.base_url == "https://bedrock-runtime.eu-west-1.amazonaws.com"
    env = {"AWS_ACCESS_KEY_ID": "AKENV", "AWS_SECRET_ACCESS_KEY": "s", "AWS_SESSION_TOKEN": "t",
           "AWS_REGION": "us-west-2", "AWS_ENDPOINT_URL_BEDROCK_RUNTIME": "http://127.0.0.1:9/"}  # fmt: skip
    access = resolve_aws_access(None, env)
    assert (access.credentials.access_key, access.credentials.token) == ("AKENV", "t")
    assert (access.region, access.base_url) == ("us-west-2", "http://127.0.0.1:9")
    creds, config = tmp_path / "credentials", tmp_path / "config"
    creds.write_text("[work]\naws_access_key_id = AKPROF\naws_secret_access_key = prof-secret\n")
    config.write_text("[profile work]\nregion = ap-south-1\n")
    files = {"AWS_SHARED_CREDENTIALS_FILE": str(creds), "AWS_CONFIG_FILE": str(config), **NO_IMDS}
    access = resolve_aws_access({"profile": "work"}, files)
    assert (access.credentials.access_key, access.region) == ("AKPROF", "ap-south-1")
    access = resolve_aws_access(None, {**files, "AWS_PROFILE": "work"})
    assert access.credentials.get_frozen_credentials().secret_key == "prof-secret"


def test_missing_pieces_are_clear_errors(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    empty = tmp_path / "empty"
    empty.write_text("")
    files = {"AWS_SHARED_CREDENTIALS_FILE": str(empty), "AWS_CONFIG_FILE": str(empty), **NO_IMDS}
    with pytest.raises(UsageError, match="profile 'nope' is not in"):
        resolve_aws_access({"profile": "nope"}, files)
    with pytest.raises(UsageError, match="needs an AWS region.*--region"):
        resolve_aws_access(None, {"AWS_ACCESS_KEY_ID": "a", "AWS_SECRET_ACCESS_KEY": "b"})
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_PROFILE", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    for name, value in files.items():
        monkeypatch.setenv(name, value)  # botocore's own chain reads os.environ
    with pytest.raises(UsageError, match="no AWS credentials for bedrock.*tether connect bedrock"):
        resolve_aws_access(None, files)


def test_connect_bedrock_records_and_handles(tmp_path: Path) -> None:
    assert parse_handle(f"amazon-bedrock/{MODEL}") == ("bedrock", MODEL)
    with pytest.raises(UsageError, match="--secret-key"):
        save_credential(
            tmp_path, "bedrock", api_key=None, base_url=None, timeout=None, access_key="AK"
        )
    with pytest.raises(UsageError, match="--access-key and --secret-key, or --profile"):
        save_credential(tmp_path, "bedrock", api_key=None, base_url=None, timeout=None)
    with pytest.raises(UsageError, match="for `tether connect bedrock`"):
        save_credential(tmp_path, "openai", api_key="k", base_url=None, timeout=None, region="x")
    rec = save_credential(tmp_path, "bedrock", api_key="SEC", base_url=None, timeout=None,
                          access_key="AK", region="us-east-2")  # fmt: skip
    assert rec["name"] == "lc-bedrock" and rec["provider_type"] == "bedrock"
    assert (rec["access_key"], rec["auth"]["key"], rec["region"]) == ("AK", "SEC", "us-east-2")
    assert default_handle(tmp_path, {}) is not None and default_handle(tmp_path, {}).startswith(
        "bedrock/"
    )
    provider = resolve_provider(f"bedrock/{MODEL}", tmp_path, {})
    assert isinstance(provider, BedrockProvider)
    assert provider.endpoint.base_url == "https://bedrock-runtime.us-east-2.amazonaws.com"
    rec = save_credential(
        tmp_path, "amazon-bedrock", api_key=None, base_url=None, timeout=None, profile="work"
    )
    assert "access_key" not in rec and rec["profile"] == "work" and rec["region"] == "us-east-2"
    assert find_credential(load_credentials(tmp_path), "bedrock") == rec
