"""Retrying a provider call: transient failures only, and only before the model has said anything.

Once a text, reasoning or tool-call chunk has gone out, a retry would show the user (and the
transcript) a second, different answer glued to the first, so from then on errors propagate.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator, AsyncIterator, Callable
from contextlib import aclosing
from dataclasses import dataclass

from tether.errors import ProviderError, ProviderHTTPError
from tether.protocol.chunks import AssistantText, Chunk, Reasoning, RetryNotice, ToolCallRequest

_MODEL_OUTPUT = (AssistantText, Reasoning, ToolCallRequest)


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    max_retries: int = 3
    base_delay_s: float = 1.0  # exponential: base * 2^(n-1) when the server names no delay
    max_delay_s: float = 60.0


DEFAULT_RETRY = RetryPolicy()


def retry_delay_s(
    error: ProviderError, retry_number: int, policy: RetryPolicy = DEFAULT_RETRY
) -> float:
    """The server's `retry-after-ms` / `Retry-After` if it gave one, else exponential; capped."""
    after = error.retry_after_s if isinstance(error, ProviderHTTPError) else None
    delay = after if after is not None else policy.base_delay_s * 2 ** (retry_number - 1)
    return min(max(delay, 0.0), policy.max_delay_s)


async def with_retries(
    attempt: Callable[[], AsyncGenerator[Chunk, None]], policy: RetryPolicy = DEFAULT_RETRY
) -> AsyncIterator[Chunk]:
    """Run `attempt()` and pass its chunks on; before each retry yield one `RetryNotice`."""
    retries = 0
    while True:
        said_something = False
        try:
            async with aclosing(attempt()) as chunks:
                async for chunk in chunks:
                    said_something = said_something or isinstance(chunk, _MODEL_OUTPUT)
                    yield chunk
            return
        except ProviderError as exc:
            if said_something or not exc.retryable or retries >= policy.max_retries:
                raise
            retries += 1
            delay = retry_delay_s(exc, retries, policy)
            message = exc.message
        yield RetryNotice(
            attempt=retries,
            max_attempts=policy.max_retries,
            delay_ms=round(delay * 1000),
            message=message,
        )
        await asyncio.sleep(delay)
