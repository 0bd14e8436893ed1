"""Amazon Bedrock: Anthropic models through `POST /model/{id}/invoke-with-response-stream`.

The body is Anthropic's Messages body (with `anthropic_version: bedrock-2023-05-31`, no `model`
or `stream`), the answer an AWS event stream whose `chunk` events carry Anthropic's stream
events base64-encoded, so the Anthropic mapping does the rest. Requests are signed with
botocore's SigV4 signer and the event stream is decoded with botocore's parser: tether does not
hand-roll AWS cryptography or framing. botocore is the optional extra `tether[bedrock]`, imported
only here; `providers/aws_auth.py` finds the credentials the way the AWS tools do.
"""

from __future__ import annotations

import asyncio
import base64
import json
from collections.abc import AsyncGenerator, AsyncIterator, Iterator, Mapping
from contextlib import asynccontextmanager, suppress
from typing import Any
from urllib.parse import quote

from tether.errors import ProviderError, ProviderTimeout, StreamCut
from tether.protocol.chunks import Chunk
from tether.protocol.llm import ProviderRequest
from tether.providers.anthropic import AnthropicEvents
from tether.providers.anthropic import build_body as anthropic_body
from tether.providers.aws_auth import AwsAccess, resolve_aws_access, sign_request
from tether.providers.base import Endpoint
from tether.providers.http import cut, http_error
from tether.providers.retry import DEFAULT_RETRY, RetryPolicy, with_retries
from tether.providers.sse import SSEEvent
from tether.providers.timeouts import resolve_timeout_s, timeout_env_name

BEDROCK_VERSION = "bedrock-2023-05-31"
_TRAILING_S = 0.25  # how long the end of a body may trail its last event
# Exceptions Bedrock sends inside the stream that a later attempt may not meet.
_RETRYABLE_EXCEPTIONS = frozenset(
    {
        "throttlingException",
        "internalServerException",
        "serviceUnavailableException",
        "modelTimeoutException",
        "modelNotReadyException",
    }
)


def bedrock_provider(record: Mapping[str, Any] | None, env: Mapping[str, str]) -> BedrockProvider:
    """A provider from the stored `lc-bedrock` record, else the AWS environment and files."""
    access = resolve_aws_access(record, env)
    timeout = resolve_timeout_s("bedrock", env, (record or {}).get("timeout"))
    return BedrockProvider(Endpoint("bedrock", access.base_url, None, timeout), access)


def build_body(request: ProviderRequest) -> dict[str, Any]:
    body = anthropic_body(request)
    body.pop("model", None)  # in the path; Bedrock refuses it (and `stream`) in the body
    body.pop("stream", None)
    return {"anthropic_version": BEDROCK_VERSION, **body}


class BedrockProvider:
    api = "bedrock-anthropic-messages"

    def __init__(
        self, endpoint: Endpoint, access: AwsAccess, *, retry: RetryPolicy = DEFAULT_RETRY
    ) -> None:
        self.endpoint = endpoint
        self.access = access
        self.retry = retry

    def stream(self, request: ProviderRequest) -> AsyncIterator[Chunk]:
        return with_retries(lambda: self._attempt(request), self.retry)

    def url(self, model: str) -> str:
        # A model id or ARN holds ':' and '/': one path segment, percent-encoded, as boto3 sends it.
        return f"{self.endpoint.base_url.rstrip('/')}/model/{quote(model, safe='')}/invoke-with-response-stream"

    async def _attempt(self, request: ProviderRequest) -> AsyncGenerator[Chunk, None]:
        from tether import __version__
        from tether.providers import transport

        url = self.url(request.model)
        content = json.dumps(build_body(request), separators=(",", ":")).encode()
        headers = {
            "content-type": "application/json",
            "accept": "application/vnd.amazon.eventstream",
        }
        # Signed per attempt: a signature carries its time, and a retry may come a minute later.
        headers = sign_request(self.access, "POST", url, headers, content)
        events = AnthropicEvents("bedrock")
        name = self.endpoint.provider
        post = transport.stream_post(
            url,
            headers,
            content,
            timeout_s=self.endpoint.timeout_s,
            user_agent=f"tether/{__version__}",
        )
        async with _mapped_errors(name, url, self.endpoint.timeout_s), post as response:
            if response.status >= 300:
                raw = await response.read()
                raise http_error(name, response.status, raw, response.headers)
            decoder = EventStreamDecoder(name)
            async for piece in response.iter_bytes():
                for event in decoder.feed(piece):
                    for chunk in events.feed(event):
                        yield chunk
                    if events.done:
                        await _drain(response.iter_bytes())
                        return
        raise cut(name, "message_stop")


class EventStreamDecoder:
    """AWS event-stream messages (botocore's parser) to the Anthropic SSE events they carry."""

    def __init__(self, provider: str = "bedrock") -> None:
        from botocore.eventstream import EventStreamBuffer

        self.provider = provider
        self._buffer = EventStreamBuffer()

    def feed(self, data: bytes) -> Iterator[SSEEvent]:
        from botocore.eventstream import ParserError

        self._buffer.add_data(data)
        try:
            messages = list(self._buffer)
        except ParserError as exc:
            raise ProviderError(
                f"{self.provider} sent a damaged event-stream frame ({type(exc).__name__}: {exc})",
                retryable=True,
            ) from None
        for message in messages:
            event = self._event(message.headers, message.payload)
            if event is not None:
                yield event

    def _event(self, headers: dict[str, Any], payload: bytes) -> SSEEvent | None:
        kind = headers.get(":message-type")
        if kind == "exception":
            raise self._exception(str(headers.get(":exception-type", "exception")), payload)
        if kind == "error":
            code = str(headers.get(":error-code", "error"))
            raise ProviderError(
                f"{self.provider} stream error ({code}): {headers.get(':error-message', '')}",
                retryable=code in _RETRYABLE_EXCEPTIONS,
            )
        if headers.get(":event-type") != "chunk":
            return None  # e.g. an initial-response frame: nothing the model said
        try:
            wrapped = json.loads(payload)
            inner = base64.b64decode(wrapped["bytes"]).decode()
            data = json.loads(inner)
        except (ValueError, KeyError, TypeError):
            raise ProviderError(
                f"{self.provider} sent a chunk that is not base64 JSON: {payload[:200]!r}"
            ) from None
        kind = data.get("type", "message") if isinstance(data, dict) else "message"
        return SSEEvent(str(kind), inner)

    def _exception(self, kind: str, payload: bytes) -> ProviderError:
        try:
            message = str(json.loads(payload).get("message", ""))
        except (ValueError, AttributeError):
            message = payload[:500].decode("utf-8", errors="replace")
        return ProviderError(
            f"{self.provider} stream error ({kind}): {message or 'no message'}",
            detail=payload[:2000].decode("utf-8", errors="replace"),
            retryable=kind in _RETRYABLE_EXCEPTIONS,
        )


async def _drain(body: AsyncIterator[bytes]) -> None:
    """Read the few bytes after `message_stop` (the body's end), so a transport that keeps
    connections can reuse this one; a server that keeps talking only costs the connection."""
    from tether.providers import transport

    with suppress(TimeoutError, transport.TransportError):
        async with asyncio.timeout(_TRAILING_S):
            async for _ in body:
                pass


@asynccontextmanager
async def _mapped_errors(name: str, url: str, timeout_s: float | None) -> AsyncIterator[None]:
    """The transport's failures as tether's provider errors, as `http.post_sse` maps them."""
    from tether.providers import transport

    try:
        yield
    except transport.TimedOut as exc:
        limit = f"{timeout_s:g} s" if timeout_s is not None else "the time limit"
        raise ProviderTimeout(
            f"{name} did not answer within {limit} ({exc} on {url}); "
            f"raise the limit with {timeout_env_name(name)} (milliseconds, or 'off')"
        ) from None
    except transport.ConnectFailed as exc:
        raise ProviderError(
            f"cannot connect to {name} at {url} ({exc}); check the region or "
            "AWS_ENDPOINT_URL_BEDROCK_RUNTIME and your network",
            retryable=exc.retryable,
        ) from None
    except transport.Broken as exc:
        raise StreamCut(f"{name} answer broke off: {exc} ({url})") from None
    except transport.BadTarget as exc:
        raise ProviderError(f"{name} request to {url} cannot be sent: {exc}") from None
