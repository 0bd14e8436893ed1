"""The store's session and schema on a real PostgreSQL: the start script's cluster listens on no
TCP port, migrations run once and refuse a newer database, and a worker stopped inside a fenced
transaction cannot hold a conversation's lease row: the server ends its session, the next holder
takes over, and the stopped worker's next write is refused."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.fleet.conftest import START

ROOT = Path(__file__).resolve().parents[2]


def test_the_cluster_listens_on_a_unix_socket_only(pg_cluster: str) -> None:
    import psycopg

    with psycopg.connect(pg_cluster) as conn:
        assert conn.execute("SHOW listen_addresses").fetchone() == ("",)
        row = conn.execute("SHOW unix_socket_directories").fetchone()
    assert row is not None and row[0] in pg_cluster


def test_start_postgres_names_missing_binaries_and_leaves_nothing(tmp_path: Path) -> None:
    scratch = tmp_path / "tmp"
    scratch.mkdir(mode=0o777)
    scratch.chmod(0o1777)  # the cluster's owner (nobody under root) creates its dir here
    done = subprocess.run(
        [str(START)], env={"PATH": "/usr/bin:/bin", "PG_BINDIR": str(tmp_path / "nowhere"),
                           "TMPDIR": str(scratch)},
        capture_output=True, text=True, timeout=60, check=False,
    )
    assert done.returncode != 0 and done.stdout == ""
    assert f"initdb ({tmp_path}/nowhere/initdb) failed" in done.stderr
    assert list(scratch.iterdir()) == []


def test_migrations_run_once_and_a_newer_database_is_refused(pg_url: str) -> None:
    import psycopg

    from tether.backends.postgres import schema
    from tether.backends.postgres.connection import PgSession, PgStoreUnavailable

    first, second = PgSession(pg_url, "w1"), PgSession(pg_url, "w2")
    first.open()
    second.open()
    with psycopg.connect(pg_url, autocommit=True) as conn:
        versions = conn.execute("SELECT version FROM tether_schema ORDER BY version").fetchall()
        assert [v for (v,) in versions] == list(range(1, len(schema.MIGRATIONS) + 1))
        conn.execute("INSERT INTO tether_schema (version) VALUES (%s)", (len(schema.MIGRATIONS) + 1,))
    first.close()
    second.close()
    with pytest.raises(PgStoreUnavailable, match="newer than this tether's"):
        PgSession(pg_url, "w3").open()


def test_a_worker_stopped_inside_a_fenced_write_does_not_block_the_takeover(pg_url: str) -> None:
    from tether.backends.postgres.connection import LeaseLost, PgSession
    from tether.backends.postgres.leases import ConversationLeases

    code = textwrap.dedent(f"""
        import sys, time
        from tether.backends.postgres.connection import LeaseLost, PgSession, PgStoreUnavailable
        from tether.backends.postgres.leases import ConversationLeases, fence
        session = PgSession({pg_url!r}, "stalled", idle_in_transaction_ms=500)
        leases = ConversationLeases(session, ttl_s=0.5)
        lease = leases.acquire("a/c")
        try:
            with session.transaction("hang") as cur:
                fence(cur, lease)  # the lease row share-locked, then the worker stalls
                print("holding", flush=True)
                time.sleep(3)
        except PgStoreUnavailable as exc:
            print("cut off:", exc, flush=True)
        try:
            leases.renew(lease)
        except LeaseLost as exc:
            print("refused:", exc, flush=True)
    """)
    stalled = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True)
    try:
        assert stalled.stdout is not None and stalled.stdout.readline() == "holding\n"
        time.sleep(0.6)  # past the stalled lease's expiry
        heir = ConversationLeases(PgSession(pg_url, "heir"), ttl_s=30)
        lease = heir.acquire("a/c")  # waits for the server to end the stalled session, no longer
        assert lease is not None and lease.token == 2
        out, err = stalled.communicate(timeout=60)
    finally:
        if stalled.poll() is None:
            stalled.kill()
            stalled.wait()
    assert "cut off: the PostgreSQL store" in out, err
    assert "refused: write to conversation a/c refused: this worker's lease (token 1)" in out, err
    assert "held by heir" in out
    late = ConversationLeases(PgSession(pg_url, "stalled"), ttl_s=1)  # restarted, same name
    with pytest.raises(LeaseLost, match="token 2, held by heir"):
        late.renew(type(lease)("a/c", "stalled", 1))
    late.session.close()
    heir.session.close()


def test_the_store_modules_import_without_psycopg() -> None:
    code = (
        "import sys, pkgutil, importlib, tether.backends.postgres as p\n"
        "for m in pkgutil.iter_modules(p.__path__): importlib.import_module(p.__name__ + '.' + m.name)\n"
        "print('psycopg' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0 and done.stdout == "False\n", done.stderr
