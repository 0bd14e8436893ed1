"""Retry policy: delays from headers or exponential, capped; connection failures retried."""

from __future__ import annotations

import socket
import time

from tether.errors import ProviderError, ProviderHTTPError, StreamCut
from tether.protocol.chunks import RetryNotice
from tether.providers.base import Endpoint
from tether.providers.http import http_error, parse_retry_after
from tether.providers.openai_chat import OpenAIChatProvider
from tether.providers.retry import RetryPolicy, retry_delay_s
from tether.testing.fake_provider import FakeProvider

from .support import collect, collect_until_error, make_provider, request, text_of


def test_delay_prefers_retry_after_then_exponential_and_caps_at_60s() -> None:
    assert retry_delay_s(ProviderHTTPError(429, "x", retry_after_s=2.5), 1) == 2.5
    assert [retry_delay_s(StreamCut("cut"), n) for n in (1, 2, 3)] == [1.0, 2.0, 4.0]
    assert retry_delay_s(ProviderHTTPError(503, "x"), 3) == 4.0
    assert retry_delay_s(ProviderHTTPError(429, "x", retry_after_s=3600), 1) == 60.0
    assert retry_delay_s(StreamCut("cut"), 10) == 60.0


def test_retry_after_ms_wins_over_retry_after_and_dates_work() -> None:
    assert parse_retry_after({"retry-after-ms": "1500", "retry-after": "9"}) == 1.5
    assert parse_retry_after({"retry-after": "3"}) == 3.0
    future = time.strftime("%a, %d %b %Y %H:%M:%S GMT", time.gmtime(time.time() + 30))
    assert 25 <= (parse_retry_after({"retry-after": future}) or 0) <= 31
    assert parse_retry_after({"retry-after": "soon"}) is None
    assert parse_retry_after({}) is None


def test_http_error_reads_each_dialects_message() -> None:
    anthropic = http_error(
        "anthropic", 400, b'{"type":"error","error":{"type":"x","message":"bad thing"}}', {}
    )
    assert str(anthropic) == "anthropic API returned HTTP 400: bad thing"
    assert "plain text" in str(http_error("ollama", 502, b"plain text", {}))
    assert "script exhausted" in str(
        http_error("x", 500, b'{"error": "fake provider script exhausted"}', {})
    )
    assert http_error("x", 408, b"", {}).retryable and not http_error("x", 404, b"", {}).retryable


def test_retry_after_ms_header_sets_the_notice_delay() -> None:
    script = [{"fault": {"status": 503, "retry_after_ms": 20}}, {"text": "ok"}]
    with FakeProvider(script) as fake:
        chunks = collect(make_provider("anthropic", fake, retry=RetryPolicy()), request())
    assert isinstance(chunks[0], RetryNotice) and chunks[0].delay_ms == 20
    assert text_of(chunks) == "ok"


def test_connection_refused_is_retried_then_reported() -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # nothing listens here once the socket closes
    provider = OpenAIChatProvider(
        Endpoint("llama.cpp", f"http://127.0.0.1:{port}/v1", "not-needed", 5.0),
        retry=RetryPolicy(max_retries=2, base_delay_s=0.01),
    )
    seen, exc = collect_until_error(provider, request())
    assert isinstance(exc, ProviderError) and exc.retryable
    assert "cannot connect to llama.cpp" in str(exc)
    assert [c.attempt for c in seen if isinstance(c, RetryNotice)] == [1, 2]


def test_exhausted_script_is_a_500_error_after_retries() -> None:
    with FakeProvider([]) as fake:
        _, exc = collect_until_error(make_provider("openai", fake), request())
        assert len(fake.requests) == 4
    assert isinstance(exc, ProviderHTTPError) and "script exhausted" in str(exc)
