"""The skeleton every SSE adapter shares: retries around one attempt, one POST, events mapped.

A dialect supplies its path, auth headers, request body and an event mapper (`feed(event) ->
chunks`, `done`); `end_of_stream()` decides what an EOF before the terminal event means (by
default a cut stream, never a silent success).
"""

from __future__ import annotations

from collections.abc import AsyncGenerator, AsyncIterator
from contextlib import aclosing
from typing import Any, Protocol

from tether.protocol.chunks import Chunk
from tether.protocol.llm import ProviderRequest
from tether.providers.base import Endpoint
from tether.providers.http import cut, post_sse
from tether.providers.retry import DEFAULT_RETRY, RetryPolicy, with_retries
from tether.providers.sse import SSEEvent


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
            # `post_sse` stops at `done` itself, so the transport may keep the connection.
            post = post_sse(
                self.endpoint, url, self.headers(), self.body(request), done=lambda: events.done
            )
            async with aclosing(post) as sse:
                async for event in sse:
                    for chunk in events.feed(event):
                        yield chunk
            if events.done:
                return
        except (
            Exception
        ) as exc:  # handed to `finish`, which re-raises unless the dialect knows better
            error = exc
        for chunk in await self.finish(events, error):
            yield chunk
