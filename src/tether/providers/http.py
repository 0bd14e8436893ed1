"""What every adapter shares: one streaming POST (errors mapped onto tether's tree) and chunk assembly.

The HTTP itself is `transport.stream_post`, imported on first use like the adapters.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import AsyncGenerator, Callable, Mapping
from typing import Any

import orjson

from tether.errors import ProviderError, ProviderHTTPError, ProviderTimeout, StreamCut
from tether.protocol.chunks import (
    AssistantText,
    Chunk,
    Reasoning,
    StopReason,
    ToolCallRequest,
    UsageStatistics,
)
from tether.protocol.tool_calls import ToolCall
from tether.providers.base import Endpoint
from tether.providers.sse import SSEEvent, SSEParser
from tether.providers.timeouts import timeout_env_name

_QUOTA_MARKERS = ("insufficient_quota", "quota", "billing", "usage_limit_reached", "credit balance")


async def post_sse(
    endpoint: Endpoint,
    url: str,
    headers: Mapping[str, str],
    body: dict[str, Any],
    *,
    done: Callable[[], bool] | None = None,
) -> AsyncGenerator[SSEEvent, None]:
    """POST `body` as JSON and yield the SSE events of the answer; raise tether errors on failure.

    `done()` turning True after an event (the dialect's terminal event) ends the iteration
    there: the transport then reads what is left of the body (normally just its end) and keeps
    the connection for the next request, where a caller that stopped iterating would close it.
    """
    from tether import __version__
    from tether.providers import transport

    name = endpoint.provider
    try:
        async with transport.stream_post(
            url,
            {"content-type": "application/json", "accept": "text/event-stream", **headers},
            orjson.dumps(body),
            timeout_s=endpoint.timeout_s,
            user_agent=f"tether/{__version__}",
        ) as response:
            if response.status >= 300:
                raw = await response.read()
                raise http_error(name, response.status, raw, response.headers)
            if response.headers.get("content-type", "").startswith("application/json"):
                # Some gateways answer 200 with a JSON error instead of a stream.
                raw = await response.read()
                raise ProviderError(
                    f"{name} answered JSON instead of an event stream: {_error_text(raw)}",
                    detail=raw[:2000].decode("utf-8", errors="replace"),
                )
            parser = SSEParser()
            async for piece in response.iter_bytes():
                for event in parser.feed(piece):
                    yield event
                    if done is not None and done():
                        return
            for event in parser.finish():
                yield event
    except transport.TimedOut as exc:
        limit = f"{endpoint.timeout_s:g} s" if endpoint.timeout_s is not None else "the time limit"
        raise ProviderTimeout(
            f"{name} did not answer within {limit} ({exc} on {url}); "
            f"raise the limit with {timeout_env_name(name)} (milliseconds, or 'off')"
        ) from None
    except transport.ConnectFailed as exc:
        raise ProviderError(
            f"cannot connect to {name} at {url} ({exc}); "
            "check the base URL and that the server is running",
            retryable=exc.retryable,
        ) from None
    except transport.Broken as exc:
        raise StreamCut(
            f"{name} answer broke off: {exc} ({url})", retryable=exc.retryable
        ) from None
    except transport.BadTarget as exc:
        raise ProviderError(
            f"{name} request to {url} cannot be sent: {exc}; "
            "the base URL must look like https://host[:port][/path]"
        ) from None


def http_error(
    provider: str, status: int, raw: bytes, headers: Mapping[str, str]
) -> ProviderHTTPError:
    """A non-2xx answer as an error whose message is the provider's own explanation."""
    text = _error_text(raw)
    err = ProviderHTTPError(
        status,
        f"{provider} API returned HTTP {status}: {text}",
        detail=raw[:2000].decode("utf-8", errors="replace"),
        retry_after_s=parse_retry_after(headers),
    )
    if status == 429 and any(m in text.lower() or m in err.detail for m in _QUOTA_MARKERS):
        err.retryable = False  # an exhausted quota does not come back in a few seconds
    return err


def parse_retry_after(headers: Mapping[str, str]) -> float | None:
    """Seconds to wait: `retry-after-ms`, else `Retry-After` (seconds or an HTTP date)."""
    ms = headers.get("retry-after-ms")
    if ms is not None:
        try:
            return max(0.0, float(ms) / 1000)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    import email.utils  # only for the rare HTTP-date form

    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())


def _error_text(raw: bytes) -> str:
    text = raw.decode("utf-8", errors="replace").strip()
    try:
        data = json.loads(text)
    except ValueError:
        return text[:500] or "(empty body)"
    if isinstance(data, dict):
        error = data.get("error", data)
        if isinstance(error, str):
            return error
        if isinstance(error, dict) and isinstance(error.get("message"), str):
            return error["message"]
        if isinstance(data.get("message"), str):
            return data["message"]
        if isinstance(data.get("detail"), str):
            return data["detail"]
    return text[:500]


def event_json(provider: str, event: SSEEvent) -> dict[str, Any]:
    """The JSON object an SSE event carries; a malformed one is the provider's error, not ours."""
    try:
        data = orjson.loads(event.data)
    except orjson.JSONDecodeError:
        raise ProviderError(
            f"{provider} sent a malformed stream event ({event.event}): {event.data[:200]!r}"
        ) from None
    if not isinstance(data, dict):
        raise ProviderError(
            f"{provider} sent a stream event that is not an object: {event.data[:200]!r}"
        )
    return data


def as_int(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


class TurnAssembler:
    """Turns dialect-neutral pieces into chunks: one otid per contiguous text or reasoning run,
    complete tool calls, then exactly one usage and one stop reason."""

    def __init__(self) -> None:
        self._run_kind: str | None = None
        self._run_otid = ""
        self.tool_calls = 0

    def _otid(self, kind: str) -> str:
        if self._run_kind != kind:
            self._run_kind, self._run_otid = kind, f"{kind}-{uuid.uuid4()}"
        return self._run_otid

    def break_run(self) -> None:
        self._run_kind = None

    def text(self, content: str) -> list[Chunk]:
        return [AssistantText(self._otid("message"), content)] if content else []

    def reasoning(self, content: str, signature: str | None = None) -> list[Chunk]:
        if not content and not signature:
            return []
        return [Reasoning(self._otid("reasoning"), content, signature=signature)]

    def tool_call(self, call_id: str, name: str, arguments: str) -> list[Chunk]:
        self.break_run()
        self.tool_calls += 1
        text = arguments if arguments.strip() else "{}"
        return [ToolCallRequest(ToolCall.parse(call_id, name, text))]

    def finish(self, usage: UsageStatistics, *, hit_max_tokens: bool) -> list[Chunk]:
        if self.tool_calls:
            stop = StopReason("requires_approval")
        elif hit_max_tokens:
            stop = StopReason("max_tokens_exceeded")
        else:
            stop = StopReason("end_turn")
        return [usage, stop]


def new_call_id() -> str:
    """For servers (some local ones) that stream a tool call without an id."""
    return f"call_{uuid.uuid4().hex[:24]}"


def cut(provider: str, waited_for: str) -> StreamCut:
    return StreamCut(
        f"{provider} stream ended before {waited_for} (the connection closed mid-response); "
        "the reply is incomplete and was not used"
    )
