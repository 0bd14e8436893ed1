"""Helpers for the hosted-backend end-to-end tests (tests/e2e/test_hosted_backend.py): the real
Letta server, one per module, and `tether --backend cloud` runs against it."""

from __future__ import annotations

import json
import os
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from tests.backends.api.letta_server import MODEL, LettaServer, installed
from tests.e2e.support import Run, run_tether


@dataclass
class Hosted:
    url: str  # the Letta server
    model_url: str  # tether's fake provider, the server's model

    def script(self, turns: list[dict[str, Any]]) -> None:
        _call("POST", f"{self.model_url}/_script", turns)

    def model_requests(self) -> list[dict[str, Any]]:
        return list(_call("GET", f"{self.model_url}/_requests"))

    def violations(self) -> list[dict[str, Any]]:
        return list(_call("GET", f"{self.model_url}/_violations"))

    def api(self, method: str, path: str, body: Any = None) -> Any:
        return _call(method, f"{self.url}{path}", body)

    def stream(self, conversation_id: str, text: str, **extra: Any) -> str:
        """Another client's turn: a streamed background run, read to its end (the raw SSE)."""
        body = {"messages": [{"role": "user", "content": text}], "streaming": True,
                "stream_tokens": True, "background": True, **extra}
        req = urllib.request.Request(f"{self.url}/v1/conversations/{conversation_id}/messages",
                                     data=json.dumps(body).encode(), method="POST", headers={
                                         "content-type": "application/json",
                                         "authorization": "Bearer dummy"})
        with urllib.request.urlopen(req, timeout=120) as r:
            return str(r.read().decode())

    def history(self, conversation_id: str) -> list[dict[str, Any]]:
        return list(self.api("GET", f"/v1/conversations/{conversation_id}/messages?order=asc&limit=200"))

    def env(self, **extra: str) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "OPENAI_", "LETTA_"))}
        env.pop("PYTHONUNBUFFERED", None)
        env.update({"LETTA_BASE_URL": self.url, "LETTA_API_KEY": "dummy"}, **extra)
        return env

    def run(self, args: list[str], cwd: Path, *, env: dict[str, str] | None = None,
            timeout: float = 120) -> Run:
        return run_tether(["--backend", "cloud", *args], env=env or self.env(), cwd=cwd,
                          timeout=timeout)


def _call(method: str, url: str, body: Any = None) -> Any:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method, headers={
        "content-type": "application/json", "authorization": "Bearer dummy"})
    with urllib.request.urlopen(req, timeout=60) as r:
        raw = r.read()
    return json.loads(raw) if raw.strip() else None


def hosted_server() -> Iterator[Hosted]:
    """The module's server: `LETTA_TEST_SERVER="<letta url> <model url>"` reuses one already
    running (a developer's loop); otherwise a fresh one is brought up and torn down."""
    external = os.environ.get("LETTA_TEST_SERVER")
    if external:
        url, model_url = external.split()
        yield Hosted(url, model_url)
        return
    why = installed()
    if why is not None:
        pytest.fail(why)  # part of what the hosted backend is shown by: never skipped
    server = LettaServer()
    try:
        server.start()
        yield Hosted(server.url, server.model.url)
    finally:
        server.stop()


__all__ = ["MODEL", "Hosted", "hosted_server"]
