"""`tether store migrate` end to end against a real PostgreSQL: a home made by real `tether -p`
runs (against the fake provider) copied into the store by the real command and back into a
fresh folder, every file the same by digest, every SQLite store the same by its rows, every
memory repository ref the same, and `tether messages list` answering the same; a non-empty
target refused either way, a bad URL named without its password, and a copy that fails midway
leaving its target as it was."""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import subprocess
from pathlib import Path

from tests.e2e.support import TETHER, Run, run_tether, tether_env
from tests.fleet.support import item
from tether.channels.journal import Journal
from tether.protocol.tool_calls import ToolCall
from tether.runtime.cron.store import CronStore
from tether.runtime.turns.checkpoints import CheckpointStore
from tether.runtime.turns.input_queue import SqliteInputQueue
from tether.testing.fake_provider import FakeProvider

MODEL = "anthropic/claude-test"
CONV = "agent-1/conv-1"


def _tether(args: list[str], home: Path, cwd: Path) -> Run:
    env = {k: v for k, v in os.environ.items() if k != "TETHER_HOME"}
    env["TETHER_HOME"] = str(home)
    proc = subprocess.run([TETHER, *args], capture_output=True, text=True, env=env, cwd=cwd,
                          timeout=120, check=False)
    return Run(proc.returncode, proc.stdout, proc.stderr)


def _make_home(home: Path, workdir: Path) -> list[str]:
    """Two conversations with real turns (one running a tool), the durable inputs, effect
    checkpoints and a cron.db; their conversation ids."""
    script = [
        {"tool_calls": [{"name": "Bash", "arguments": {"command": "echo hi > out.txt",
                                                      "description": "write"}}]},
        {"text": "wrote out.txt"},
        {"text": "second answer"},
        {"text": "another conversation"},
    ]
    ids = []
    with FakeProvider(script) as fake:
        env = tether_env(fake.url, MODEL, {"TETHER_HOME": str(home)})
        for extra in (["--yolo"], ["--continue"], ["--new"]):
            run = run_tether(["-p", "go", "--model", MODEL, "--output-format", "stream-json", *extra],
                             env=env, cwd=workdir)
            assert run.code == 0, run.stderr
            ids.append(run.events[0]["conversation_id"])
    queue = SqliteInputQueue(home / "inputs.db", "owner-a")
    queue.accept_many([item("q-1", key="k-1"), item("q-2", "second")])
    queue.mark(CONV, "q-1", "done")
    queue.close()
    checkpoints = CheckpointStore(home / "checkpoints.db")
    checkpoints.record_before(CONV, ToolCall("call-1", "Bash", {"command": "make"}), "owner-a")
    checkpoints.close()
    cron = CronStore(home)
    cron.db.execute("INSERT INTO leases (name, owner, expires_ms) VALUES ('x', 'y', 1)")
    for n in (1, 2):  # a counter past the last row: a run number is never handed out twice
        cron.db.execute("INSERT INTO runs (task_id, ts_ms, record) VALUES ('t', ?, x'7b7d')", (n,))
    cron.db.execute("DELETE FROM runs WHERE seq = 2")
    cron.close()
    journal = Journal(home / "channels" / "gateway.db")
    journal.db.execute("INSERT INTO runtimes VALUES ('telegram:1', 'agent-x', 'conv-x')")
    journal.db.execute("INSERT INTO outbox VALUES ('call-9', 'telegram', 'a', 'c', 'sent', NULL,"
                       " 1796461377.5480487)")
    journal.db.execute("DROP TABLE paused")  # as a store made before that table has it
    journal.db.close()
    return sorted(set(ids))


def _sqlite_rows(path: Path) -> dict[str, list[str]]:
    """A database's rows, times (REAL epoch seconds) to the microsecond PostgreSQL keeps."""
    conn = sqlite3.connect(path)
    try:
        names = [r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")]
        return {n: sorted(repr(tuple(round(v * 1_000_000) if isinstance(v, float) else v for v in r))
                          for r in conn.execute(f'SELECT * FROM "{n}"')) for n in names}
    finally:
        conn.close()


def _snapshot(home: Path) -> dict[str, str]:
    """Every file under `home` by digest (a SQLite database by its rows, a git repository's
    internals by its refs), every folder by its mode."""
    out: dict[str, str] = {}
    for path in sorted(home.rglob("*")):
        rel = path.relative_to(home).as_posix()
        if "/.git/" in rel or rel.endswith(("-wal", "-shm")):
            continue
        if rel.endswith("/.git"):
            refs = subprocess.run(["git", "for-each-ref"], cwd=path.parent, capture_output=True,
                                  text=True, check=True).stdout
            out[rel] = refs + (path / "HEAD").read_text()
        elif path.is_dir():
            out[rel] = f"dir {path.stat().st_mode:o}"
        elif path.read_bytes()[:16] == b"SQLite format 3\x00":
            out[rel] = json.dumps(_sqlite_rows(path))
        else:
            out[rel] = f"{path.stat().st_mode:o} " + hashlib.sha256(path.read_bytes()).hexdigest()
    return out


def _pg_counts(url: str) -> dict[str, int]:
    import psycopg

    with psycopg.connect(url) as conn:
        return {t: conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0]  # type: ignore[index]
                for t in ("agents", "conversations", "transcript", "home_files", "inputs")}


def test_a_real_home_goes_to_postgres_and_back_the_same(
    pg_url: str, tmp_path: Path, tether_home: Path
) -> None:
    home, workdir = tmp_path / "th", tmp_path / "project"
    workdir.mkdir()
    ids = _make_home(home, workdir)
    assert len(ids) == 2
    # A NUL in a message (tool output may carry one), which PostgreSQL's jsonb cannot hold.
    for path in home.glob("conversations/*/messages.jsonl"):
        path.write_bytes(path.read_bytes().replace(b"wrote out.txt", b"wrote\\u0000out.txt"))
    for path in home.glob("agents/*.json"):  # and in a record
        path.write_bytes(path.read_bytes().replace(b'"description": "', b'"description": "a\\u0000', 1))
    before = _snapshot(home)
    assert any(k.endswith("/memory/.git") for k in before)  # a memory repository is carried

    into = _tether(["store", "migrate", "--to", pg_url], home, workdir)
    assert into.code == 0, into.stderr
    report = json.loads(into.stdout)
    assert report["counts"]["agents"] == 1 and report["counts"]["conversations"] == 2
    assert report["counts"]["transcripts"] == 2 and report["counts"]["inputs"] == 2
    assert report["counts"]["effect_checkpoints"] == 2 and report["counts"]["memory_repos"] == 1
    assert (report["counts"]["cron_leases"], report["counts"]["cron_runs"]) == (1, 1)
    assert (report["counts"]["channel_runtimes"], report["counts"]["channel_outbox"]) == (1, 1)

    back = tmp_path / "restored"
    out = _tether(["store", "migrate", "--from", pg_url, "--to", str(back)], home, workdir)
    assert out.code == 0, out.stderr
    assert json.loads(out.stdout)["digest"] == report["digest"]
    assert _snapshot(back) == before
    shown_nul = False
    for conv in ids:  # byte for byte, the transcripts and their replacement logs
        for path in home.glob("conversations/*/messages.jsonl*"):
            assert (back / path.relative_to(home)).read_bytes() == path.read_bytes()
        listed = [_tether(["messages", "list", "--conversation", conv], h, workdir) for h in (home, back)]
        assert listed[0].code == 0, listed[0].stderr
        shown_nul = shown_nul or "wrote\\u0000out.txt" in listed[0].stdout
        assert listed[1].stdout == listed[0].stdout and json.loads(listed[0].stdout)
    assert shown_nul

    status = _tether(["store", "status", "--store", pg_url], home, workdir)
    assert status.code == 0, status.stderr
    shown = json.loads(status.stdout)
    assert shown["schema_version"] >= 3 and shown["counts"]["agents"] == 1
    assert shown["migrated_home_digest"] == report["digest"]

    # Either target, once filled, is refused and left as it was.
    again = _tether(["store", "migrate", "--to", pg_url], home, workdir)
    assert again.code == 1 and "already holds" in again.stderr and "empty store only" in again.stderr
    assert _pg_counts(pg_url)["agents"] == 1
    onto = _tether(["store", "migrate", "--from", pg_url, "--to", str(back)], home, workdir)
    assert onto.code == 1 and f"{back} is not empty" in onto.stderr
    assert _snapshot(back) == before


def test_a_copy_failing_midway_leaves_the_store_empty(
    pg_url: str, tmp_path: Path, tether_home: Path
) -> None:
    home, workdir = tmp_path / "th", tmp_path / "project"
    workdir.mkdir()
    _make_home(home, workdir)
    # The last conversation (in copy order) damaged in the middle: by then the agent, the
    # other conversation and its transcript rows are written, and must be rolled back.
    last = sorted(home.glob("conversations/*/messages.jsonl"))[-1]
    lines = last.read_bytes().split(b"\n")
    lines.insert(2, b"{not json")
    last.write_bytes(b"\n".join(lines))
    run = _tether(["store", "migrate", "--to", pg_url], home, workdir)
    assert run.code == 1
    assert f"line 3 of {last} is not JSON" in run.stderr
    assert _pg_counts(pg_url) == dict.fromkeys(
        ("agents", "conversations", "transcript", "home_files", "inputs"), 0
    )


def test_a_store_that_does_not_verify_writes_no_home(
    pg_url: str, tmp_path: Path, tether_home: Path
) -> None:
    import psycopg

    home, workdir = tmp_path / "th", tmp_path / "project"
    workdir.mkdir()
    _make_home(home, workdir)
    assert _tether(["store", "migrate", "--to", pg_url], home, workdir).code == 0
    with psycopg.connect(pg_url) as conn:  # one stored entry changed behind tether's back
        conn.execute("UPDATE transcript SET line = %s WHERE seq = 1",
                     (b'{"type":"message","tampered":true}\n',))
    back = tmp_path / "restored"
    run = _tether(["store", "migrate", "--from", pg_url, "--to", str(back)], home, workdir)
    assert run.code == 1
    assert "did not verify" in run.stderr and "messages.jsonl" in run.stderr
    assert not back.exists()
    assert [p.name for p in tmp_path.iterdir() if "migrating" in p.name] == []


def test_bad_urls_are_named_without_their_password(tmp_path: Path, tether_home: Path) -> None:
    home = tmp_path / "th"
    home.mkdir()
    run = _tether(["store", "migrate", "--to", "mysql://me:hunter2@db/x"], home, tmp_path)
    assert run.code == 2
    assert "--to 'mysql://me:***@db/x' is not a PostgreSQL URL" in run.stderr
    assert "hunter2" not in run.stderr + run.stdout
    run = _tether(["store", "status", "--store", "postgresql://me:hunter2@127.0.0.1:1/x"], home, tmp_path)
    assert run.code == 1
    assert "cannot connect to the PostgreSQL store postgresql://me:***@127.0.0.1:1/x" in run.stderr
    assert "hunter2" not in run.stderr + run.stdout
    run = _tether(["store", "migrate", "--to", str(tmp_path / "x")], home, tmp_path)
    assert run.code == 2 and "one side must be a postgresql:// URL" in run.stderr


def test_without_psycopg_the_command_names_the_extra(tmp_path: Path, tether_home: Path) -> None:
    shadow = tmp_path / "shadow" / "psycopg"
    shadow.mkdir(parents=True)
    (shadow / "__init__.py").write_text("raise ImportError('No module named psycopg')\n")
    home = tmp_path / "th"
    home.mkdir()
    env = {**os.environ, "TETHER_HOME": str(home), "PYTHONPATH": str(shadow.parent)}
    proc = subprocess.run([TETHER, "store", "migrate", "--to", "postgresql://me:hunter2@h/x"],
                          capture_output=True, text=True, env=env, timeout=60, check=False)
    assert proc.returncode == 1
    assert "needs psycopg 3: install the postgres extra: pip install 'tether[postgres]'" in proc.stderr
    assert "hunter2" not in proc.stderr + proc.stdout


def test_inputs_the_store_took_after_the_copy_come_back(
    pg_url: str, tmp_path: Path, tether_home: Path
) -> None:
    from tests.fleet.support import CODEC
    from tether.backends.postgres.connection import PgSession
    from tether.backends.postgres.input_queue import PgInputQueue

    home, workdir = tmp_path / "th", tmp_path / "project"
    workdir.mkdir()
    _make_home(home, workdir)
    assert _tether(["store", "migrate", "--to", pg_url], home, workdir).code == 0
    session = PgSession(pg_url, "a-server")  # as `tether server --store` takes an input
    PgInputQueue(session, CODEC).accept(item("q-9", key="k-9"))
    session.close()
    back = tmp_path / "restored"
    run = _tether(["store", "migrate", "--from", pg_url, "--to", str(back)], home, workdir)
    assert run.code == 0, run.stderr
    restored = SqliteInputQueue(back / "inputs.db", "reader")
    assert restored.by_key(CONV, "k-9") is not None and restored.by_key(CONV, "k-1") is not None
    restored.close()
    conn = sqlite3.connect(back / "inputs.db")
    assert conn.execute("SELECT max(seq) FROM inputs").fetchone() == (3,)
    conn.close()


def test_a_conversation_and_agent_deleted_on_the_store_are_not_copied_back(
    pg_url: str, tmp_path: Path, tether_home: Path
) -> None:
    from tether.backends.postgres.agents import PgConversationStore
    from tether.backends.postgres.connection import PgSession
    from tether.backends.store_api import conversation_ref

    home, workdir = tmp_path / "th", tmp_path / "project"
    workdir.mkdir()
    ids = _make_home(home, workdir)
    assert _tether(["store", "migrate", "--to", pg_url], home, workdir).code == 0
    session = PgSession(pg_url, "a-server")
    store = PgConversationStore(session, tmp_path / "server-home", lambda _key: None)
    (agent,) = store.list_agents()
    gone = [c for c in ids if c != "default"][-1]
    store.delete_conversation(agent.id, gone)
    back = tmp_path / "restored"
    run = _tether(["store", "migrate", "--from", pg_url, "--to", str(back)], home, workdir)
    assert run.code == 0, run.stderr
    assert not (back / store.conversation_dir(agent.id, gone).relative_to(store.home)).exists()
    kept = [c for c in ids if c != gone]
    for conv in kept:
        assert (back / store.conversation_dir(agent.id, conv).relative_to(store.home)
                / "messages.jsonl").is_file()

    store.delete_agent(agent.id)
    with session.transaction("test: what the store holds of the agent") as cur:
        left = cur.execute("SELECT count(*) FROM transcript WHERE conversation LIKE %s",
                           (conversation_ref(agent.id, "%"),)).fetchone()
    assert left == (0,)
    session.close()
    again = tmp_path / "restored-2"
    run = _tether(["store", "migrate", "--from", pg_url, "--to", str(again)], home, workdir)
    assert run.code == 0, run.stderr
    assert not list(again.glob("agents/*.json")) and not list(again.glob("conversations/*"))
