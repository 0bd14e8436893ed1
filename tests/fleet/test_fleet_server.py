"""`tether server --store postgresql://…` for real (issue 31 items 1, 2 and 4): the flag's errors,
a fleet of real server processes on one database and one TETHER_HOME against the fake provider
(kill -9 of the worker running a turn: another takes its inputs, the started one reported
interrupted and never re-run, the queued ones run once), and /readyz and /metrics following the
database."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
from pathlib import Path
from typing import Any

import httpx
from websockets.asyncio.client import connect

from tests.e2e.support import TETHER
from tests.fleet.support import wait_until
from tests.server.support import Client, ServerProcess, server_env
from tether.testing.fake_provider import FakeProvider


def _rows(url: str) -> list[dict[str, Any]]:
    """Every transcript row's entry in the store (each test has one conversation), in order;
    with `--store` the workers keep none in TETHER_HOME."""
    import psycopg

    with psycopg.connect(url) as conn:
        return [json.loads(bytes(r[0])) for r in conn.execute(
            "SELECT line FROM transcript ORDER BY conversation, seq").fetchall()]


def _user_texts(url: str, home: Path) -> list[str]:
    assert not list(home.glob("conversations/*/messages.jsonl"))
    return [
        " ".join(p["text"] for p in line["message"]["content"] if p["type"] == "text")
        for line in _rows(url)
        if line.get("message", {}).get("role") == "user"
    ]



def _states(url: str) -> list[tuple[str, str]]:
    import psycopg

    with psycopg.connect(url) as conn:
        return [(str(r[0]), str(r[1])) for r in conn.execute(
            "SELECT request_id, state FROM inputs ORDER BY seq").fetchall()]


def _server(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([TETHER, "server", *args], env=env, cwd=cwd, capture_output=True,
                          text=True, timeout=60, check=False)


def test_store_flag_refuses_a_bad_url_without_its_password_and_names_the_extra(
    tmp_path: Path,
) -> None:
    env = server_env("http://127.0.0.1:9", tmp_path / "home", tmp_path)
    bad = _server(["--store", "mysql://me:s3cret@db/x"], env, tmp_path)
    assert bad.returncode == 1 and "is not a PostgreSQL URL" in bad.stderr
    assert "s3cret" not in bad.stderr and "mysql://me:***@db/x" in bad.stderr
    # psycopg not importable: the error names the extra that installs it.
    shadow = tmp_path / "shadow" / "psycopg"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("raise ImportError('no psycopg here')\n")
    missing = _server(["--store", "postgresql://me:s3cret@db/x"],
                      {**env, "PYTHONPATH": str(shadow.parent)}, tmp_path)
    assert missing.returncode == 1, missing.stderr
    assert "pip install 'tether[postgres]'" in missing.stderr and "s3cret" not in missing.stderr
    # An unreachable database: refused at start, its password never shown.
    down = _server(["--store", f"postgresql://me:s3cret@/x?host={tmp_path}/nothing-here"],
                   env, tmp_path)
    assert down.returncode == 1 and "cannot connect to the PostgreSQL store" in down.stderr
    assert "s3cret" not in down.stderr


def test_kill_9_of_the_worker_running_a_turn_moves_its_inputs_to_another_worker(
    tmp_path: Path, pg_url: str,
) -> None:
    project, home = tmp_path / "project", tmp_path / "tether-home"
    project.mkdir()
    script = [
        {"fault": {"hang": True}},  # the first input's turn: running when its worker dies
        {"text": "two done"},
        {"text": "three done"},
    ]
    with FakeProvider(script) as fake:
        env = server_env(fake.url, home, tmp_path)
        workers = [ServerProcess(env, project, "--store", pg_url) for _ in range(3)]
        owner, others = workers[0], workers[1:]
        try:
            async def queue_three() -> None:
                async with connect(owner.url) as ws:
                    c = Client(ws)
                    runtime = (await c.start(project))["runtime"]
                    for n, text in enumerate(("one", "two", "three"), 1):
                        await c.say(runtime, text, request_id=f"in-{n}", idempotency_key=f"k-{n}")
                        accepted = await c.of_type("input_accepted", request_id=f"in-{n}")
                        assert accepted["accepted"], accepted

            asyncio.run(queue_three())
            wait_until(lambda: len(fake.requests) == 1, "the first turn's provider request")
            owner.kill_9()
            wait_until(lambda: [s for _, s in _states(pg_url)] == ["interrupted", "done", "done"],
                        "another worker settling the dead one's inputs")
            assert _user_texts(pg_url, home) == ["one", "two", "three"]  # each once, in order
            assert len(fake.requests) == 3 and fake.violations == []  # nothing re-ran
            metrics = [httpx.get(w.http_base + "/metrics", timeout=10).text for w in others]
            assert sum(_value(m, 'tether_lease_moves_total{event="lease_taken"}')
                       for m in metrics) == 1
            assert sum(_value(m, 'tether_turns_total{stop_reason="end_turn"}')
                       for m in metrics) == 2
            assert sum(_value(m, "tether_provider_latency_seconds_count") for m in metrics) == 2
        finally:
            for w in workers:
                w.stop()


def _value(text: str, name: str) -> float:
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.rsplit(" ", 1)[1])
    return 0.0


def _parse_prometheus(text: str) -> dict[str, float]:
    """Every sample of a Prometheus text exposition; fails on a malformed line."""
    import re

    sample = re.compile(r'^[a-zA-Z_:][a-zA-Z0-9_:]*(\{[a-zA-Z_]+="[^"\\]*"(,[a-zA-Z_]+="[^"]*")*\})?'
                        r" -?[0-9.e+Inf]+$")
    out = {}
    for line in text.splitlines():
        if line.startswith("# HELP ") or line.startswith("# TYPE "):
            continue
        assert sample.match(line), f"not a Prometheus sample: {line!r}"
        name, value = line.rsplit(" ", 1)
        assert name not in out, f"sample {name} twice"
        out[name] = float(value)
    return out


def test_metrics_of_a_local_store_server_parse_without_database_lines(tmp_path: Path) -> None:
    with FakeProvider([]) as fake:
        server = ServerProcess(server_env(fake.url, tmp_path / "home", tmp_path), tmp_path)
        try:
            assert httpx.get(server.http_base + "/readyz", timeout=10).text == "ok\n"
            response = httpx.get(server.http_base + "/metrics", timeout=10)
        finally:
            server.stop()
    assert response.headers["content-type"].startswith("text/plain; version=0.0.4")
    samples = _parse_prometheus(response.text)
    assert samples["tether_queue_depth"] == 0 and samples["tether_provider_latency_seconds_count"] == 0
    assert not any(name.startswith("tether_store_") for name in samples)


def _pg_ctl(url: str, action: str) -> None:
    """Stop or start this test's own cluster (the URL's socket dir holds its data)."""
    from urllib.parse import parse_qs, urlsplit

    folder = parse_qs(urlsplit(url).query)["host"][0]
    (bindir,) = sorted(Path("/usr/lib/postgresql").glob("*/bin"))[-1:]
    opts = (f"-c listen_addresses='' -c unix_socket_directories='{folder}' -p 5432"
            " -c fsync=off -c max_connections=200 -c shared_buffers=16MB")
    cmd = [str(bindir / "pg_ctl"), "-D", f"{folder}/data", "-w", "-t", "60"]
    cmd += ["-m", "immediate", "stop"] if action == "stop" else [
        "-l", f"{folder}/server.log", "-o", opts, "start"]
    if os.getuid() == 0:
        user = os.environ.get("TETHER_PG_USER", "nobody")
        cmd = ["setpriv", f"--reuid={user}", "--regid=nogroup" if user == "nobody" else
               f"--regid={user}", "--clear-groups", "--", *cmd]
    subprocess.run(cmd, check=True, capture_output=True, timeout=120)


def test_readyz_follows_the_database_and_metrics_carry_its_gauges(tmp_path: Path) -> None:
    import pytest

    pytest.importorskip("psycopg", reason="needs the postgres extra")
    root = Path(__file__).resolve().parents[2]
    started = subprocess.run([str(root / "scripts" / "start-postgres")], capture_output=True,
                             text=True, timeout=120, check=True)
    url = started.stdout.strip().splitlines()[-1]
    try:
        with FakeProvider([]) as fake:
            server = ServerProcess(server_env(fake.url, tmp_path / "home", tmp_path), tmp_path,
                                   "--store", url)
            try:
                base = server.http_base
                assert httpx.get(base + "/readyz", timeout=10).status_code == 200
                samples = _parse_prometheus(httpx.get(base + "/metrics", timeout=10).text)
                assert samples["tether_store_up"] == 1 and samples["tether_workers_alive"] == 1
                _pg_ctl(url, "stop")
                down = httpx.get(base + "/readyz", timeout=30)
                assert down.status_code == 503 and "unreachable" in down.text
                assert httpx.get(base + "/healthz", timeout=10).status_code == 200
                assert _parse_prometheus(httpx.get(base + "/metrics", timeout=30).text)[
                    "tether_store_up"] == 0
                _pg_ctl(url, "start")
                assert httpx.get(base + "/readyz", timeout=30).status_code == 200
            finally:
                server.stop()
    finally:
        from urllib.parse import parse_qs, urlsplit

        folder = parse_qs(urlsplit(url).query)["host"][0]
        subprocess.run([str(root / "scripts" / "start-postgres"), "--stop", folder], timeout=60,
                       check=False)


async def _start_and_say(url: str, project: Path, text: str, n: int, **scope: Any) -> dict[str, Any]:
    """runtime_start (a new conversation, or `scope`'s) and one input; its input_accepted."""
    async with connect(url) as ws:
        c = Client(ws)
        runtime = (await c.start(project, **scope))["runtime"]
        await c.say(runtime, text, request_id=f"in-{n}", idempotency_key=f"k-{n}")
        accepted = await c.of_type("input_accepted", request_id=f"in-{n}")
        assert accepted["accepted"], accepted
        return {"runtime": runtime, **accepted}


def test_an_input_sent_to_a_worker_that_does_not_hold_the_conversation_runs_once_on_its_owner(
    tmp_path: Path, pg_url: str,
) -> None:
    project, home = tmp_path / "project", tmp_path / "tether-home"
    project.mkdir()
    with FakeProvider([{"text": "one done"}, {"text": "two done"}]) as fake:
        env = server_env(fake.url, home, tmp_path)
        owner, other = (ServerProcess(env, project, "--store", pg_url) for _ in range(2))
        try:
            first = asyncio.run(_start_and_say(owner.url, project, "one", 1))
            wait_until(lambda: _states(pg_url) == [("in-1", "done")], "the owner's first turn")
            second = asyncio.run(_start_and_say(other.url, project, "two", 2, **first["runtime"]))
            assert second["disposition"] == "queued"  # recorded here, run by the owner
            wait_until(lambda: _states(pg_url) == [("in-1", "done"), ("in-2", "done")],
                        "the owner running the input another worker recorded")
            turns = [_value(httpx.get(w.http_base + "/metrics", timeout=10).text,
                            'tether_turns_total{stop_reason="end_turn"}') for w in (owner, other)]
        finally:
            owner.stop()
            other.stop()
    assert _user_texts(pg_url, home) == ["one", "two"] and len(fake.requests) == 2
    assert turns == [2, 0]


def test_a_stopped_owner_loses_the_conversation_and_its_late_marks_are_refused(
    tmp_path: Path, pg_url: str,
) -> None:
    import fcntl
    import signal

    from tether.backends.local.store import LocalStore

    project, home = tmp_path / "project", tmp_path / "tether-home"
    project.mkdir()
    script = [{"text": "one done", "delay_ms": 30_000}, {"text": "two done"}]
    with FakeProvider(script) as fake:
        env = server_env(fake.url, home, tmp_path)
        owner, other = (ServerProcess(env, project, "--store", pg_url, "--lease-ttl", "1",
                                      "--log-format", "json") for _ in range(2))
        try:
            first = asyncio.run(_start_and_say(owner.url, project, "one", 1))
            wait_until(lambda: len(fake.requests) == 1, "the owner's provider request")
            owner.proc.send_signal(signal.SIGSTOP)
            # Its lease expires; the other worker's sweep takes it: the started input is
            # interrupted (its outcome unknown), never run again.
            wait_until(lambda: _states(pg_url) == [("in-1", "interrupted")], "the lease moving")
            owner.proc.send_signal(signal.SIGCONT)
            scope = first["runtime"]
            lock = LocalStore(home).conversation_dir(
                scope["agent_id"], scope["conversation_id"]) / "turn.lock"

            def turn_over() -> bool:  # the woken owner's turn has let the conversation go
                with open(lock, "a") as f:
                    try:
                        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
                    except BlockingIOError:
                        return False
                    fcntl.flock(f, fcntl.LOCK_UN)
                    return True

            wait_until(turn_over, "the woken owner's turn ending")
            second = asyncio.run(_start_and_say(other.url, project, "two", 2, **scope))
            assert second["disposition"] == "started"  # the other worker holds it now
            wait_until(lambda: _states(pg_url)[-1] == ("in-2", "done"), "the second turn")
        finally:
            logs = {}
            for name, w in (("owner", owner), ("other", other)):
                w.proc.terminate()
                w.proc.wait(20)
                assert w.proc.stderr is not None
                logs[name] = w.proc.stderr.read()
                w.stop()
    events = {name: [json.loads(line) for line in text.splitlines() if line.startswith("{")]
              for name, text in logs.items()}
    # Structured logs: the taker logs the move, the woken owner its refused renewal.
    assert [e["event"] for e in events["other"] if e.get("event") == "lease_taken"] == ["lease_taken"]
    assert any(e.get("event") == "write_refused" and e["level"] == "warning"
               for e in events["owner"])
    # The woken owner's "done" was refused: the input stays interrupted; nothing ran twice.
    assert _states(pg_url) == [("in-1", "interrupted"), ("in-2", "done")]
    assert _user_texts(pg_url, home) == ["one", "two"] and len(fake.requests) == 2
    # The woken owner's keeper found the lease gone and aborted its turn: no answer of its own.
    written = str(_rows(pg_url))
    assert "one done" not in written and "two done" in written
