"""Connection reuse seen from the fake provider: every step of a turn (and every turn of a
long-lived process) on one connection per origin, over TLS too, and no request sent twice when
the server closes an idle connection. Counted at the server, never inferred from timing."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tests.e2e.support import run_tether, tether_env
from tests.providers.support import DIALECTS, make_provider, request, text_of, user
from tether.protocol.chunks import Chunk
from tether.providers.base import Provider
from tether.testing.fake_provider import FakeProvider


def steps(provider: Provider, n: int, pause_s: float = 0.0) -> list[list[Chunk]]:
    """`n` model calls in one event loop, as the turn loop of one process makes them."""

    async def main() -> list[list[Chunk]]:
        out = []
        for i in range(n):
            out.append([c async for c in provider.stream(request(user(f"step {i}")))])
            await asyncio.sleep(pause_s)
        return out

    return asyncio.run(main())


@pytest.mark.parametrize("dialect", DIALECTS)
def test_every_step_reuses_one_connection(dialect: str) -> None:
    with FakeProvider([{"text": f"answer {i}"} for i in range(5)], keep_alive=True) as fake:
        answers = steps(make_provider(dialect, fake), 5)
    assert [text_of(a) for a in answers] == [f"answer {i}" for i in range(5)]
    assert fake.connections == 1
    assert [r["connection"] for r in fake.requests] == [0] * 5
    assert fake.violations == []


@pytest.mark.parametrize("dialect", DIALECTS)
def test_one_tls_handshake_serves_every_step(dialect: str, monkeypatch: pytest.MonkeyPatch) -> None:
    with FakeProvider([{"text": "ok"}] * 4, keep_alive=True, tls=True) as fake:
        assert fake.url.startswith("https://") and fake.ca_file is not None
        monkeypatch.setenv("SSL_CERT_FILE", str(fake.ca_file))
        answers = steps(make_provider(dialect, fake), 4)
        assert fake.stats() == {
            "connections": 1,
            "handshakes": 1,
            "resumed_handshakes": 0,
            "requests": 4,
        }
    assert all(text_of(a) == "ok" for a in answers)


def test_a_new_tls_connection_resumes_the_session(monkeypatch: pytest.MonkeyPatch) -> None:
    """The server closes the idle connection; the next one resumes the TLS session."""
    with FakeProvider([{"text": "ok"}] * 3, keep_alive=True, tls=True, idle_timeout_s=0.1) as fake:
        monkeypatch.setenv("SSL_CERT_FILE", str(fake.ca_file))
        steps(make_provider("anthropic", fake), 3, pause_s=0.4)
        assert (fake.connections, fake.handshakes, fake.resumed_handshakes) == (3, 3, 2)


@pytest.mark.parametrize("dialect", DIALECTS)
def test_no_request_is_sent_twice_when_the_server_closes_an_idle_connection(dialect: str) -> None:
    script = [{"text": f"answer {i}"} for i in range(3)]
    with FakeProvider(script, keep_alive=True, idle_timeout_s=0.1) as fake:
        answers = steps(make_provider(dialect, fake), 3, pause_s=0.4)
    assert [text_of(a) for a in answers] == ["answer 0", "answer 1", "answer 2"]
    assert len(fake.requests) == 3  # one per step: the closed connection got nothing
    assert [r["connection"] for r in fake.requests] == [0, 1, 2]
    assert fake.remaining == 0


@pytest.mark.parametrize("dialect", DIALECTS)
def test_an_error_answer_keeps_the_connection_for_the_retry(dialect: str) -> None:
    script = [{"fault": {"status": 529, "retry_after_ms": 10}}, {"text": "second try"}]
    with FakeProvider(script, keep_alive=True) as fake:
        answers = steps(make_provider(dialect, fake), 1)
    assert text_of(answers[0]) == "second try"
    assert fake.connections == 1 and len(fake.requests) == 2


def test_a_cut_stream_is_not_reused() -> None:
    script = [{"text": "lost in the middle", "fault": {"cut_after_events": 3}}, {"text": "again"}]
    with FakeProvider(script, keep_alive=True) as fake:
        answers = steps(make_provider("anthropic", fake), 1)
    assert text_of(answers[0]) == "again"
    assert fake.connections == 2


def test_a_headless_tool_turn_uses_one_connection(workdir: Path) -> None:
    """The real console script: a 6-step tool turn over TLS is one connection, one handshake."""
    model = "anthropic/claude-test"
    (workdir / "notes.txt").write_text("inside\n")
    read = {"name": "Read", "arguments": {"file_path": "notes.txt"}}
    script = [{"tool_calls": [read]}] * 5 + [{"text": "read it five times"}]
    with FakeProvider(script, keep_alive=True, tls=True) as fake:
        env = tether_env(fake.url, model, {"SSL_CERT_FILE": str(fake.ca_file)})
        run = run_tether(
            ["-p", "read", "--model", model, "--output-format", "stream-json"], env=env, cwd=workdir
        )
        stats = fake.stats()
    assert run.code == 0, run.stderr
    assert stats == {"connections": 1, "handshakes": 1, "resumed_handshakes": 0, "requests": 6}
    assert run.of_type("result")[0]["result"] == "read it five times"


def test_keep_alive_off_is_one_connection_per_step(workdir: Path) -> None:
    model = "openai/gpt-test"
    script = [{"tool_calls": [{"name": "LS", "arguments": {"path": "."}}]}] * 2 + [{"text": "ok"}]
    with FakeProvider(script, keep_alive=True) as fake:
        env = tether_env(fake.url, model, {"TETHER_HTTP_KEEPALIVE": "0"})
        run = run_tether(["-p", "ls", "--model", model, "--toolset", "default"], env=env, cwd=workdir)
    assert run.code == 0, run.stderr
    assert fake.connections == 3
    assert all(r["headers"].get("connection") == "close" for r in fake.requests)


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    d = tmp_path / "project"
    d.mkdir()
    return d


def test_turns_of_a_long_lived_process_share_the_connection(workdir: Path) -> None:
    """Bidirectional stream-json (the SDK's transport): three turns, one connection, one
    handshake; the process closes it when it exits."""
    from tests.e2e.test_bidirectional import Client

    with FakeProvider([{"text": f"turn {i}"} for i in range(3)], keep_alive=True, tls=True) as fake:
        client = Client(fake.url, workdir, env_extra={"SSL_CERT_FILE": str(fake.ca_file)})
        try:
            for i in range(3):
                client.user(f"hello {i}")
                assert client.result()["result"] == f"turn {i}"
        except BaseException:
            client.proc.kill()  # no stray process or open pipes when the test fails
            client.close()
            raise
        assert client.close() == 0
        stats = fake.stats()
    assert stats == {"connections": 1, "handshakes": 1, "resumed_handshakes": 0, "requests": 3}


def test_a_reused_connection_dropped_after_the_request_is_an_error_not_a_resend() -> None:
    """Through the adapter and its retries: the server read step 2's request and closed
    without answering, so it may have run it; tether reports the error and sends nothing
    again (the retry policy would resend a fresh-connection failure)."""
    from tests.providers.test_pool import Conn, RawServer
    from tether.errors import StreamCut
    from tether.testing.fake_dialects import EVENT_BUILDERS, Plan

    events = EVENT_BUILDERS["anthropic"](Plan.from_turn({"text": "one"}, {}), {}, lambda: 1)
    stream = b"".join(b"%x\r\n%s\r\n" % (len(e), e) for e in events) + b"0\r\n\r\n"
    head = (
        b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
    )

    def answer_then_vanish(conn: Conn) -> None:
        conn.read_request()
        conn.answer(head, stream)
        conn.read_request()
        conn.close()

    server = RawServer(answer_then_vanish)
    provider = make_provider("anthropic", server)  # type: ignore[arg-type]

    async def main() -> BaseException | None:
        assert text_of([c async for c in provider.stream(request(user("one")))]) == "one"
        try:
            [c async for c in provider.stream(request(user("two")))]
        except StreamCut as exc:
            return exc
        return None

    try:
        error = asyncio.run(main())
    finally:
        server.close()
    assert isinstance(error, StreamCut) and not error.retryable
    assert "not sent again" in str(error)
    assert len(server.requests) == 2 and len(server.connections) == 1


def test_the_fake_provider_command_serves_tls_with_keep_alive(tmp_path: Path) -> None:
    """`python -m tether.testing.fake_provider --tls --keep-alive`, as other processes drive it."""
    import json
    import ssl
    import subprocess
    import sys
    import urllib.request

    from tether.providers.transport import stream_post

    proc = subprocess.Popen(
        [sys.executable, "-m", "tether.testing.fake_provider", "--tls", "--keep-alive"]
        + ["--cert-dir", str(tmp_path / "tls")],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert proc.stdout is not None
        url = proc.stdout.readline().strip()
        assert url.startswith("https://127.0.0.1:")
        env = {"SSL_CERT_FILE": str(tmp_path / "tls" / "cert.pem")}

        async def twice() -> list[int]:
            statuses = []
            for _ in range(2):  # a body with no messages is refused (400), on one connection
                async with stream_post(url + "/v1/messages", {}, b"{}", timeout_s=5, env=env) as r:
                    await r.read()
                    statuses.append(r.status)
            return statuses

        assert asyncio.run(twice()) == [400, 400]
        context = ssl.create_default_context(cafile=env["SSL_CERT_FILE"])
        with urllib.request.urlopen(url + "/_stats", context=context, timeout=5) as answer:
            stats = json.load(answer)
        assert stats == {"connections": 2, "handshakes": 2, "resumed_handshakes": 0, "requests": 2}
    finally:
        proc.terminate()
        proc.wait(10)
        if proc.stdout is not None:
            proc.stdout.close()
    bad = subprocess.run(
        [sys.executable, "-m", "tether.testing.fake_provider", "--rtt-ms", "-1"],
        capture_output=True,
        text=True,
    )
    assert bad.returncode == 2 and "--rtt-ms must be >= 0" in bad.stderr
