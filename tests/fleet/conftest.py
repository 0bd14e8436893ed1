"""A real PostgreSQL for the fleet tests (issue 31): one cluster per pytest(-xdist) worker,
started by `scripts/start-postgres` (initdb + pg_ctl on a unix socket in a temp dir), and a
fresh database per test. Missing server binaries fail the tests; a missing psycopg skips them,
naming the `postgres` extra that installs it."""

from __future__ import annotations

import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import pytest

ROOT = Path(__file__).resolve().parents[2]
START = ROOT / "scripts" / "start-postgres"


def _socket_dir(url: str) -> str:
    return parse_qs(urlsplit(url).query)["host"][0]


def with_database(url: str, name: str) -> str:
    parts = urlsplit(url)  # geturl() would drop the `//` of an empty host (a socket URL)
    return f"{parts.scheme}://{parts.netloc}/{name}?{parts.query}"


@pytest.fixture(scope="session")
def pg_cluster() -> Iterator[str]:
    """The conninfo URL of this worker's own throwaway cluster (database `postgres`)."""
    pytest.importorskip(
        "psycopg", reason="the PostgreSQL store needs the postgres extra: pip install -e '.[postgres]'"
    )
    started = subprocess.run([str(START)], capture_output=True, text=True, timeout=120, check=False)
    if started.returncode != 0:
        pytest.fail(f"scripts/start-postgres failed ({started.returncode}): {started.stderr.strip()}")
    url = started.stdout.strip().splitlines()[-1]
    try:
        yield url
    finally:
        subprocess.run([str(START), "--stop", _socket_dir(url)], timeout=60, check=False)


@pytest.fixture
def pg_url(pg_cluster: str) -> Iterator[str]:
    """A fresh, empty database in the worker's cluster for one test; dropped after it."""
    import psycopg

    name = "t_" + uuid.uuid4().hex[:12]
    with psycopg.connect(pg_cluster, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}" TEMPLATE template0')
    try:
        yield with_database(pg_cluster, name)
    finally:
        with psycopg.connect(pg_cluster, autocommit=True) as admin:
            admin.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
