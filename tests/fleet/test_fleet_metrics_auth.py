"""/metrics asks for the server's credential (issue 31 item 4): a request without it, or with a
wrong one, is refused 401 and a token scoped to some agents is refused 403, while /healthz and
/readyz stay open for load balancers; a tokenless loopback server answers it as before."""

from __future__ import annotations

import asyncio
import hashlib
import time
from pathlib import Path

import jwt
import pytest

from tests.server.support import InProcess, raw_http
from tether.server import auth, ops

TOKEN = "metrics-test-token"
SECRET = b"m" * 32


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("TETHER_HOME", str(tmp_path / "home"))
    folder = tmp_path / "project"
    folder.mkdir()
    return folder


def _bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def _jwt(**claims: object) -> str:
    return jwt.encode({"exp": time.time() + 300, **claims}, SECRET, algorithm="HS256")


def test_metrics_need_the_servers_token_and_probes_stay_open(project: Path) -> None:
    policy = auth.AuthPolicy(
        "capability-token", token_sha256=hashlib.sha256(TOKEN.encode()).digest()
    )

    async def scenario() -> None:
        async with InProcess(project, policy=policy) as srv:
            status, body = await raw_http(srv.port, "GET /metrics HTTP/1.1")
            assert (status, body.strip()) == (401, auth.MISSING_TOKEN)
            status, body = await raw_http(srv.port, "GET /metrics HTTP/1.1", _bearer("wrong"))
            assert (status, body.strip()) == (401, auth.INVALID_TOKEN)
            assert "tether_turns_total" not in body
            for probe in ("/healthz", "/readyz"):
                assert await raw_http(srv.port, f"GET {probe} HTTP/1.1") == (200, "ok\n")
            status, body = await raw_http(srv.port, "GET /metrics HTTP/1.1", _bearer(TOKEN))
            assert status == 200 and "# TYPE tether_turns_total counter" in body

    asyncio.run(scenario())


def test_a_scoped_token_may_not_read_the_whole_servers_metrics(project: Path) -> None:
    policy = auth.AuthPolicy("signed-bearer-token", secret=SECRET)

    async def scenario() -> None:
        async with InProcess(project, policy=policy) as srv:
            scoped = _bearer(_jwt(agents=["agent-1"]))
            status, body = await raw_http(srv.port, "GET /metrics HTTP/1.1", scoped)
            assert (status, body.strip()) == (403, ops.METRICS_SCOPED)
            expired = _bearer(_jwt(exp=time.time() - 3600))
            assert (await raw_http(srv.port, "GET /metrics HTTP/1.1", expired))[0] == 401
            status, body = await raw_http(srv.port, "GET /metrics HTTP/1.1", _bearer(_jwt()))
            assert status == 200 and "tether_queue_depth 0" in body
            assert (await raw_http(srv.port, "GET /readyz HTTP/1.1", scoped))[0] == 200

    asyncio.run(scenario())


def test_a_tokenless_loopback_server_answers_metrics(project: Path) -> None:
    async def scenario() -> None:
        async with InProcess(project) as srv:
            status, body = await raw_http(srv.port, "GET /metrics HTTP/1.1")
            assert status == 200 and "tether_runtimes 0" in body

    asyncio.run(scenario())


def test_schedule_takeovers_count_as_lease_moves() -> None:
    import logging

    record = logging.LogRecord("tether.fleet", logging.INFO, __file__, 1, "moved", None, None)
    before = ops.METRICS.moves.get("fire_taken_over", 0)
    record.fleet = {"event": "fire_taken_over"}
    ops._FleetCounter().emit(record)
    text = ops.METRICS.text(0, 0)
    assert f'tether_lease_moves_total{{event="fire_taken_over"}} {before + 1}' in text
    assert 'tether_lease_moves_total{event="scheduler_lease_taken"}' in text
