"""The HTTP client for a Letta API server: JSON calls, and streamed runs as SSE events.

JSON calls (agents, conversations, runs, cancel) go through the standard library's
`http.client` in a worker thread: they are few per run and never on the local path. Streamed
runs use tether's own transport (`providers/transport.py`), so a stream is read as it arrives
and an answer that is not `text/event-stream` is refused before any event is trusted.
Every failure is a `ProviderError` whose message names the server's URL.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncGenerator, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode, urlsplit

from tether.errors import ProviderError, ProviderHTTPError, StreamCut

LETTA_CLOUD_URL = "https://api.letta.com"
_TRANSIENT = frozenset({408, 425, 429, 500, 502, 503, 504, 520, 521, 522, 523, 524})


class LettaConflict(ProviderError):
    """HTTP 409: another run is active on the conversation (`run_id` names it, when known)."""

    def __init__(self, message: str, *, detail: str = "", run_id: str | None = None) -> None:
        super().__init__(message, detail=detail, retryable=False, error_type="conflict")
        self.run_id = run_id


class LettaNotFound(ProviderError):
    """HTTP 404: no such agent, conversation or run on the server."""


@dataclass(frozen=True, slots=True)
class LettaEvent:
    """One decoded SSE frame: `data` is the JSON object, `error` True for `event: error`."""

    data: dict[str, Any]
    error: bool = False


class LettaClient:
    """One server (`base_url`, e.g. http://127.0.0.1:8283) and its bearer key."""

    def __init__(
        self, base_url: str, api_key: str | None, *, timeout_s: float | None = 600.0,
        env: Mapping[str, str] | None = None, retry_base_s: float = 0.5,
    ) -> None:
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise ProviderError(
                f"LETTA_BASE_URL {base_url!r} is not a server URL; it must look like "
                "https://host[:port] (e.g. http://127.0.0.1:8283)"
            )
        self.base_url = base_url.rstrip("/")
        self.api_key = api_key
        self.timeout_s = timeout_s
        self.env = env
        self.api_ms = 0  # time spent waiting on the server, for `duration_api_ms`
        self.retry_base_s = retry_base_s  # a GET's backoff: base, 2x, 4x

    # --- JSON ------------------------------------------------------------------------------

    def _headers(self) -> dict[str, str]:
        from tether import __version__

        headers = {"user-agent": f"tether/{__version__}", "x-letta-source": "tether"}
        if self.api_key:
            headers["authorization"] = f"Bearer {self.api_key}"
        return headers

    def url(self, path: str, query: Mapping[str, Any] | None = None) -> str:
        q = {k: v for k, v in (query or {}).items() if v is not None}
        return f"{self.base_url}{path}" + (f"?{urlencode(q)}" if q else "")

    async def request(
        self, method: str, path: str, body: Any = None, *, query: Mapping[str, Any] | None = None,
        timeout_s: float | None = 60.0,
    ) -> Any:
        """One JSON call; the decoded answer, or a ProviderError naming the server. A GET (it
        changes nothing) is tried again on a transient failure, up to 3 times."""
        attempts = 4 if method == "GET" else 1
        for attempt in range(1, attempts + 1):
            try:
                return await asyncio.to_thread(self._request_sync, method, path, body, query,
                                               timeout_s)
            except ProviderError as exc:
                if not exc.retryable or attempt == attempts:
                    raise
                await asyncio.sleep(min(self.retry_base_s * 2 ** (attempt - 1), 4.0))
        raise AssertionError("unreachable")

    def _request_sync(
        self, method: str, path: str, body: Any, query: Mapping[str, Any] | None,
        timeout_s: float | None,
    ) -> Any:
        import http.client

        url = self.url(path, query)
        parts = urlsplit(url)
        cls = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
        conn = cls(parts.hostname or "", parts.port, timeout=timeout_s)
        payload = None if body is None else json.dumps(body).encode()
        headers = {**self._headers(), "accept": "application/json"}
        if payload is not None:
            headers["content-type"] = "application/json"
        target = parts.path + (f"?{parts.query}" if parts.query else "")
        try:
            conn.request(method, target, body=payload, headers=headers)
            response = conn.getresponse()
            raw = response.read()
            status, resp_headers = response.status, dict(response.getheaders())
        except TimeoutError:
            raise ProviderError(
                f"the Letta server at {self.base_url} did not answer {method} {path} within "
                f"{timeout_s:g} s", retryable=True,
            ) from None
        except OSError as exc:
            raise ProviderError(
                f"cannot reach the Letta server at {self.base_url} ({exc}); check LETTA_BASE_URL "
                "and that the server is running", retryable=True,
            ) from None
        finally:
            conn.close()
        if status >= 300:
            raise self.http_error(status, raw, {k.lower(): v for k, v in resp_headers.items()},
                                  f"{method} {path}")
        if not raw.strip():
            return None
        try:
            return json.loads(raw)
        except ValueError:
            raise ProviderError(
                f"the Letta server at {self.base_url} answered {method} {path} with something "
                f"that is not JSON: {raw[:200]!r}"
            ) from None

    def http_error(
        self, status: int, raw: bytes, headers: Mapping[str, str], what: str
    ) -> ProviderError:
        """A non-2xx answer as tether's error: 409 busy, 404 not found, else HTTP with retry."""
        from tether.providers.http import parse_retry_after

        text, data = _explain(raw)
        where = f"the Letta server at {self.base_url}"
        detail = raw[:2000].decode("utf-8", errors="replace")
        if status == 409:
            run_id = data.get("run_id") if isinstance(data.get("run_id"), str) else None
            return LettaConflict(f"{where} refused {what}: {text}", detail=detail, run_id=run_id)
        if status == 404:
            return LettaNotFound(f"{where}: {what} not found ({text})", detail=detail)
        if status in (401, 403):
            return ProviderHTTPError(
                status, f"{where} refused the credentials (HTTP {status}: {text}); set "
                "LETTA_API_KEY or run `tether connect letta --api-key KEY`", detail=detail,
            )
        err = ProviderHTTPError(
            status, f"{where} answered {what} with HTTP {status}: {text}", detail=detail,
            retry_after_s=parse_retry_after(headers),
        )
        err.retryable = status in _TRANSIENT
        return err

    # --- streams ---------------------------------------------------------------------------

    async def stream(self, path: str, body: dict[str, Any]) -> AsyncGenerator[LettaEvent, None]:
        """POST `body` and yield the SSE frames; `[DONE]` ends the stream (not yielded).

        A stream that closes without `[DONE]` raises `StreamCut` (retryable): the caller
        re-attaches with `/stream` rather than sending the input again."""
        import time

        from tether.providers import transport
        from tether.providers.sse import SSEParser

        url = self.url(path)
        headers = {**self._headers(), "content-type": "application/json",
                   "accept": "text/event-stream"}
        started = time.monotonic()
        try:
            async with transport.stream_post(
                url, headers, json.dumps(body).encode(), timeout_s=self.timeout_s, env=self.env,
                user_agent=headers["user-agent"],
            ) as response:
                if response.status >= 300:
                    raw = await response.read()
                    raise self.http_error(response.status, raw, response.headers, f"POST {path}")
                ctype = response.headers.get("content-type", "")
                if ctype.split(";")[0].strip().lower() != "text/event-stream":
                    raw = await response.read()
                    raise ProviderError(
                        f"the Letta server at {self.base_url} answered POST {path} with "
                        f"content-type {ctype or '(none)'!r}, not a text/event-stream: "
                        f"{_explain(raw)[0]}",
                        detail=raw[:2000].decode("utf-8", errors="replace"),
                    )
                parser = SSEParser()
                done = False
                async for piece in response.iter_bytes():
                    for event in parser.feed(piece):
                        if event.data.strip() == "[DONE]":
                            done = True
                            continue
                        # After an `event: error` frame the server may close without [DONE].
                        done = done or event.event == "error"
                        yield LettaEvent(self._event_json(event.data), event.event == "error")
                for event in parser.finish():
                    if event.data.strip() == "[DONE]":
                        done = True
                if not done:
                    raise StreamCut(
                        f"the Letta server at {self.base_url} closed the stream of POST {path} "
                        "before its end ([DONE])", retryable=True,
                    )
        except transport.TimedOut as exc:
            raise ProviderError(
                f"the Letta server at {self.base_url} did not answer POST {path} in time ({exc})",
                retryable=True,
            ) from None
        except transport.ConnectFailed as exc:
            raise ProviderError(
                f"cannot reach the Letta server at {self.base_url} ({exc}); check LETTA_BASE_URL "
                "and that the server is running", retryable=exc.retryable,
            ) from None
        except transport.Broken as exc:
            raise StreamCut(
                f"the stream from the Letta server at {self.base_url} broke off: {exc}",
                retryable=True,
            ) from None
        except transport.BadTarget as exc:
            raise ProviderError(f"cannot send to the Letta server at {url}: {exc}") from None
        finally:
            self.api_ms += int((time.monotonic() - started) * 1000)

    def _event_json(self, data: str) -> dict[str, Any]:
        try:
            obj = json.loads(data)
        except ValueError:
            raise ProviderError(
                f"the Letta server at {self.base_url} sent a malformed stream event: {data[:200]!r}"
            ) from None
        if not isinstance(obj, dict):
            raise ProviderError(
                f"the Letta server at {self.base_url} sent a stream event that is not an object: "
                f"{data[:200]!r}"
            )
        return obj


def _explain(raw: bytes) -> tuple[str, dict[str, Any]]:
    """The server's own explanation (`detail`, `message`, `error`) and the decoded object."""
    text = raw.decode("utf-8", errors="replace").strip()
    try:
        data = json.loads(text)
    except ValueError:
        return (text[:500] or "(empty body)"), {}
    if not isinstance(data, dict):
        return text[:500], {}
    for key in ("detail", "message", "error"):
        value = data.get(key)
        if isinstance(value, str):
            return value, data
        if isinstance(value, dict) and isinstance(value.get("message"), str):
            return value["message"], data
    return text[:500], data
