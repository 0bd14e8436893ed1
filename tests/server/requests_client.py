"""Helpers for the request-family tests (tests/server/test_requests_*.py): ask one request over
a websocket and wait for its `<type>_response`, tokens for a signed-bearer server, and the
comparison that shows an answer is no existence oracle."""

from __future__ import annotations

import contextlib
import itertools
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import jwt

from tests.server.support import Client, InProcess
from tether.server import auth

SECRET = b"s" * 32
POLICY = auth.AuthPolicy("signed-bearer-token", secret=SECRET)
_ids = itertools.count(1)


def token(**scope: Any) -> dict[str, str]:
    claims = {"exp": time.time() + 300, **scope}
    return {"Authorization": f"Bearer {jwt.encode(claims, SECRET, algorithm='HS256')}"}


@contextlib.asynccontextmanager
async def admin_client(project: Path) -> AsyncIterator[tuple[InProcess, Client]]:
    """An in-process signed-bearer server on `project` and one unscoped client of it."""
    async with (
        InProcess(project, policy=POLICY) as srv,
        srv.connect(additional_headers=token()) as ws,
    ):
        yield srv, Client(ws)


async def ask(client: Client, kind: str, **fields: Any) -> dict[str, Any]:
    """Send `{type: kind, request_id, **fields}`; its `<kind>_response`."""
    request_id = f"{kind}-{next(_ids)}"
    await client.send({"type": kind, "request_id": request_id, **fields})
    return await client.of_type(f"{kind}_response", request_id=request_id)


def same_answer(a: dict[str, Any], b: dict[str, Any], *ids: tuple[str, str]) -> bool:
    """Whether two responses are equal apart from request_id and the id each one echoes
    (`ids`: pairs of the id asked about in `a` and in `b`)."""
    left, right = dict(a), dict(b)
    left.pop("request_id"), right.pop("request_id")
    text_a, text_b = repr(sorted(left.items())), repr(sorted(right.items()))
    for id_a, id_b in ids:
        text_a, text_b = text_a.replace(id_a, "<id>"), text_b.replace(id_b, "<id>")
    return text_a == text_b
