"""The skeleton every SSE adapter shares: retries around one attempt, one POST, events mapped.

A dialect supplies its path, auth headers, request body and an event mapper (`feed(event) ->
chunks`, `done`); `end_of_stream()` decides what an EOF before the terminal event means (by
default a cut stream, never a silent success).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import aclosing, suppress
from typing import Any, Protocol

from tether.errors import ProviderError
from tether.protocol.chunks import Chunk
from tether.protocol.llm import ProviderRequest
from tether.providers.base import Endpoint
from tether.providers.http import cut, post_sse
from tether.providers.retry import DEFAULT_RETRY, RetryPolicy, with_retries
from tether.providers.sse import SSEEvent

# How long the end of a body may trail its terminal event before the connection is dropped
# rather than kept for the next step (normally the chunked terminator arrives with the event).
_TRAILING_S = 0.25


async def _finish_body(sse: AsyncIterator[SSEEvent]) -> None:
    """Read past the terminal event to the end of the body, so the connection can be reused;
    a server that keeps talking costs its connection, never the turn's answer."""
    with suppress(TimeoutError, ProviderError):
        async with asyncio.timeout(_TRAILING_S):
            async for _ in sse:
                pass


class EventMapper(Protocol):
    done: bool

    def feed(self, event: SSEEvent) -> list[Chunk]: ...


class SSEAdapter:
    api: str = ""
    path: str = ""  # appended to the base URL
    terminal: str = ""  # the event whose absence means the stream was cut

    def __init__(self, endpoint: Endpoint, *, retry: RetryPolicy = DEFAULT_RETRY) -> None:
        self.endpoint = endpoint
        self.retry = retry

    def stream(self, request: ProviderRequest) -> AsyncIterator[Chunk]:
        return with_retries(lambda: self._attempt(request), self.retry)

    def headers(self) -> dict[str, str]:
        """Bearer auth, as both OpenAI dialects (and most compatible servers) take it."""
        return {"authorization": f"Bearer {self.endpoint.api_key}"} if self.endpoint.api_key else {}

    def body(self, request: ProviderRequest) -> dict[str, Any]:
        raise NotImplementedError

    def events(self) -> EventMapper:
        raise NotImplementedError

    async def finish(self, events: EventMapper, error: BaseException | None) -> list[Chunk]:
        """The transport ended before `done`: by default that is a cut stream."""
        if error is not None:
            raise error
        raise cut(self.endpoint.provider, self.terminal)

    async def _attempt(self, request: ProviderRequest) -> AsyncGenerator[Chunk, None]:
        url = f"{self.endpoint.base_url.rstrip('/')}{self.path}"
        events = self.events()
        error: BaseException | None = None
        try:
            async with aclosing(
                post_sse(self.endpoint, url, self.headers(), self.body(request))
            ) as sse:
                async for event in sse:
                    for chunk in events.feed(event):
                        yield chunk
                    if events.done:
                        await _finish_body(sse)
                        return
        except (
            Exception
        ) as exc:  # handed to `finish`, which re-raises unless the dialect knows better
            error = exc
        for chunk in await self.finish(events, error):
            yield chunk
