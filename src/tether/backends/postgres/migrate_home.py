"""A whole TETHER_HOME copied to the PostgreSQL store and back (`tether store migrate`, issue 31
item 3), verified: agent and conversation records (`agents`, `conversations`: the JSON document,
its exact bytes and the columns looked up by), transcripts (the fenced `transcript` rows of
`leases.py`, each entry's exact line kept, plus `transcript_files`: the header line, a torn tail
and the `.replaced` log), memory repositories (`memory_repos`: a git bundle of every ref, cloned
back and every ref's sha compared), the SQLite stores (`inputs.db`, `checkpoints.db`, the
schedules' `cron.db` and the channel journal `channels/gateway.db` row for row by `migrate.py`,
their schemas and AUTOINCREMENT counters in `sqlite_schemas`; any other SQLite database as a
consistent snapshot) and every other file and folder (`home_files`), each with its mode. What a
home holds, and its digests, is `migrate_local.py`'s.

Verified both ways against `home_digests`: each file's sha256 (a SQLite database by its rows, a
memory repository by its refs), recorded in the store. Going in, the copy is read back from the
store inside the same transaction, written to a scratch folder and compared before it commits;
coming out, the home is built in a temporary folder beside the target, compared, and only then
renamed into place. A non-empty target is refused: a migration never merges.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import sqlite3
import stat
import subprocess
import tempfile
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from tether.backends.postgres import migrate as rows
from tether.backends.postgres.connection import PgSession
from tether.backends.postgres.migrate import MigrationRefused
from tether.backends.postgres.migrate_local import (
    ROW_DBS,
    conversation_of,
    git,
    home_digests,
    manifest_digest,
    read_record,
    refs_of,
    sequences,
    snapshot,
    split_transcript,
    sqlite_digest,
    walk,
)
from tether.backends.postgres.transcripts import render
from tether.backends.store_api import conversation_ref

STORE_TABLES = (
    "agents", "conversations", "transcript", "transcript_files", "memory_repos",
    "sqlite_schemas", "home_files", "home_digests", "inputs", "effect_checkpoints",
    *(t.name for t in rows.STATE_TABLES),
)


@dataclass(frozen=True, slots=True)
class Report:
    counts: dict[str, int]  # what was copied, by kind
    files: int  # entries in the verified digest manifest
    digest: str  # sha256 of the manifest (path and digest of every entry), equal on both sides

    def to_dict(self) -> dict[str, Any]:
        return {"counts": self.counts, "verified_entries": self.files, "digest": self.digest}


def _copy_in(cur: Any, home: Path, counts: dict[str, int]) -> None:
    """Every entry of `home` into the store. A file whose bytes a structured table holds (a
    record, a transcript, its log, a row-copied database) still gets its `home_files` row, with
    its mode and no content."""
    from psycopg.types.json import Jsonb

    def count(kind: str, n: int = 1) -> None:
        counts[kind] = counts.get(kind, 0) + n

    for rel, path, kind in walk(home):
        parts = rel.split("/")
        mode = stat.S_IMODE(path.stat().st_mode)
        content: bytes | None = None
        if kind in ("dir", "repo"):
            mode |= stat.S_IFDIR
            if kind == "repo":
                _repo_in(cur, path, rel)
                count("memory_repos")
        elif kind == "sqlite" and rel in ROW_DBS:
            _schema_in(cur, path, rel)
            count("sqlite_row_stores")
        elif len(parts) == 2 and parts[0] == "agents" and rel.endswith(".json"):
            raw, doc = read_record(path, "agent")
            cur.execute(
                "INSERT INTO agents (id, name, model, updated_at, path, document, raw)"
                " VALUES (%s, %s, %s, %s, %s, %s, %s)",
                (doc["id"], str(doc.get("name", "")), doc.get("model"),
                 str(doc.get("updated_at", "")), rel, Jsonb(doc), raw),
            )
            count("agents")
        elif len(parts) == 3 and parts[0] == "conversations" and parts[2] == "conversation.json":
            raw, doc = read_record(path, "conversation")
            cur.execute(
                "INSERT INTO conversations (key, id, agent_id, archived, updated_at, path,"
                " document, raw) VALUES (%s, %s, %s, %s, %s, %s, %s, %s)",
                (conversation_of(rel), doc["id"], str(doc.get("agent_id", "")),
                 bool(doc.get("archived")), str(doc.get("updated_at", "")), rel, Jsonb(doc), raw),
            )
            count("conversations")
        elif len(parts) == 3 and parts[0] == "conversations" and parts[2] == "messages.jsonl":
            conversation = transcript_key(path, rel)
            header, entries, torn = split_transcript(path)
            side = path.with_name(path.name + ".replaced")
            cur.execute(
                "INSERT INTO transcript_files (conversation, path, header, torn, replaced)"
                " VALUES (%s, %s, %s, %s, %s)",
                (conversation, rel, header, torn, side.read_bytes() if side.is_file() else None),
            )
            cur.executemany(
                "INSERT INTO transcript (conversation, seq, entry, token, line)"
                " VALUES (%s, %s, %s, 0, %s)",
                [(conversation, n, Jsonb(e), line) for n, (e, line) in enumerate(entries, 1)],
            )
            count("transcripts")
            count("transcript_entries", len(entries))
        elif (len(parts) == 3 and parts[0] == "conversations"
              and parts[2] == "messages.jsonl.replaced"
              and path.with_name("messages.jsonl").is_file()):
            pass  # held by its transcript's row
        else:
            content = snapshot(path) if kind == "sqlite" else path.read_bytes()
            count("files")
        cur.execute("INSERT INTO home_files (path, mode, content) VALUES (%s, %s, %s)",
                    (rel, mode, content))


def transcript_key(path: Path, rel: str) -> str:
    """The key a transcript's rows go under: the runtime's (`store_api.conversation_ref`,
    `<agent>/<conversation>`, as the leases and the queue key it), so a server on the store
    serves the migrated history. A `conversation:<id>` folder names its agent in its record."""
    local = conversation_of(rel)
    if local.startswith("default:"):
        return conversation_ref(local.removeprefix("default:"), "default")
    record = path.with_name("conversation.json")
    try:
        _raw, doc = read_record(record, "conversation")
    except FileNotFoundError:
        raise MigrationRefused(
            f"{rel} has no conversation.json beside it, so its agent is unknown; restore the"
            " record or move the folder aside before migrating"
        ) from None
    return conversation_ref(str(doc.get("agent_id", "")), local.removeprefix("conversation:"))


def _schema_in(cur: Any, path: Path, rel: str) -> None:
    conn = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    try:
        ddl = [r[0] for r in conn.execute(
            "SELECT sql FROM sqlite_master WHERE sql IS NOT NULL AND name NOT LIKE 'sqlite_%'"
            " ORDER BY rowid"
        )]
        (version,) = conn.execute("PRAGMA user_version").fetchone()
        counters = sequences(conn)
    finally:
        conn.close()
    cur.execute("INSERT INTO sqlite_schemas (path, user_version, ddl, sequences)"
                " VALUES (%s, %s, %s, %s)", (rel, version, ddl, orjson.dumps(counters).decode()))


def _repo_in(cur: Any, repo: Path, rel: str) -> None:
    refs = refs_of(repo)
    bundle = b""
    if len(refs) > 1:
        with tempfile.TemporaryDirectory(prefix="tether-migrate-") as scratch:
            out = Path(scratch) / "repo.bundle"
            git("bundle", "create", "-q", str(out), "--all", cwd=repo)
            bundle = out.read_bytes()
    config = (repo / ".git" / "config").read_bytes()
    cur.execute("INSERT INTO memory_repos (path, bundle, refs, config) VALUES (%s, %s, %s, %s)",
                (rel, bundle, orjson.dumps(refs).decode(), config))


def _materialize(cur: Any, target: Path) -> dict[str, int]:
    """The home the store holds, written under the (new, empty) folder `target`."""
    counts: dict[str, int] = {}
    entries = cur.execute("SELECT path, mode, content FROM home_files ORDER BY path").fetchall()
    for rel, mode, content in entries:
        path = target / rel
        if mode & stat.S_IFDIR:
            path.mkdir(parents=True, exist_ok=True)
        elif content is not None:
            path.parent.mkdir(parents=True, exist_ok=True)  # a document a server made
            path.write_bytes(bytes(content))
            counts["files"] = counts.get("files", 0) + 1
    for table in ("agents", "conversations"):
        for rel, raw in cur.execute(f"SELECT path, raw FROM {table}").fetchall():
            (target / rel).parent.mkdir(parents=True, exist_ok=True)  # one a server made
            (target / rel).write_bytes(bytes(raw))
            counts[table] = counts.get(table, 0) + 1
    files = cur.execute(
        "SELECT conversation, path, header, torn, replaced FROM transcript_files"
    ).fetchall()
    for conversation, rel, header, torn, replaced in files:
        whole, _migrated, rows = render(cur, conversation, bytes(header), bytes(torn))
        path = target / rel
        path.parent.mkdir(parents=True, exist_ok=True)  # a conversation a server made
        path.write_bytes(whole)
        _manifest_for(path, bytes(header))
        if replaced is not None:
            path.with_name(path.name + ".replaced").write_bytes(bytes(replaced))
        counts["transcripts"] = counts.get("transcripts", 0) + 1
        counts["transcript_entries"] = counts.get("transcript_entries", 0) + rows
    for rel, bundle, refs, config in cur.execute(
        "SELECT path, bundle, refs, config FROM memory_repos ORDER BY path"
    ).fetchall():
        _repo_out(target / rel, bytes(bundle), refs, bytes(config))
        counts["memory_repos"] = counts.get("memory_repos", 0) + 1
    for rel, version, ddl, counters in cur.execute(
        "SELECT path, user_version, ddl, sequences FROM sqlite_schemas ORDER BY path"
    ).fetchall():
        (target / rel).parent.mkdir(parents=True, exist_ok=True)
        _sqlite_out(cur, target / rel, ROW_DBS[rel], int(version), list(ddl), counters)
        counts["sqlite_row_stores"] = counts.get("sqlite_row_stores", 0) + 1
    for rel, mode, _content in sorted(entries, key=lambda e: -e[0].count("/")):
        os.chmod(target / rel, stat.S_IMODE(mode))  # deepest first: a read-only folder last
    return counts


def _sqlite_out(
    cur: Any, path: Path, tables: tuple[rows.Table, ...], version: int, ddl: list[str],
    counters: dict[str, int],
) -> None:
    conn = sqlite3.connect(path, isolation_level=None)
    try:
        conn.execute("BEGIN IMMEDIATE")
        for statement in ddl:
            conn.execute(statement)
        conn.execute(f"PRAGMA user_version = {version}")
        for table in tables:
            copied = [rows._to_sqlite(table, r) for r in rows._pg_rows(cur, table)]
            if not copied:  # perhaps a table this home's store predates
                continue
            marks = ", ".join(["?"] * len(table.columns))
            conn.executemany(
                f"INSERT INTO {table.sqlite} ({', '.join(table.columns)}) VALUES ({marks})", copied
            )
        for name, seq in counters.items():  # never below a number the copied rows used
            (have,) = conn.execute(
                "SELECT COALESCE(max(seq), 0) FROM sqlite_sequence WHERE name = ?", (name,)
            ).fetchone()
            conn.execute("DELETE FROM sqlite_sequence WHERE name = ?", (name,))
            conn.execute("INSERT INTO sqlite_sequence (name, seq) VALUES (?, ?)",
                         (name, max(int(have), int(seq))))
        conn.execute("COMMIT")
    finally:
        conn.close()


def _repo_out(repo: Path, bundle: bytes, refs: dict[str, str], config: bytes) -> None:
    """A memory repository cloned back from its bundle: every ref as it was, HEAD as it was,
    its config, the index matching HEAD, and the work tree's files from `home_files`, or from
    HEAD for those it does not hold."""
    git_dir = repo / ".git"
    if bundle:
        with tempfile.TemporaryDirectory(prefix="tether-migrate-") as scratch:
            src = Path(scratch) / "repo.bundle"
            src.write_bytes(bundle)
            git("clone", "-q", "--mirror", str(src), str(git_dir))
    else:
        git("init", "-q", "--bare", str(git_dir))
    (git_dir / "config").write_bytes(config)
    (git_dir / "HEAD").write_text(refs["HEAD"] + "\n")
    (git_dir / "FETCH_HEAD").unlink(missing_ok=True)
    if len(refs) > 1:  # the index as HEAD has it (no reset: it would leave ORIG_HEAD behind)
        git("read-tree", "HEAD", cwd=repo)
        # A file `home_files` did not hold (a repo a server made, a file its workers added)
        # comes from HEAD; one it held stays as it was copied in (uncommitted edits included).
        subprocess.run(["git", "checkout-index", "-a", "-q"], cwd=repo, capture_output=True,
                       check=False)
        subprocess.run(["git", "update-index", "-q", "--refresh"], cwd=repo, capture_output=True,
                       check=False)
    got = refs_of(repo)
    if got != refs:
        wrong = sorted(k for k in refs.keys() | got.keys() if refs.get(k) != got.get(k))
        raise MigrationRefused(f"the memory repository {repo} did not come back: refs {wrong} differ")


def _refuse_filled(cur: Any) -> None:
    for table in STORE_TABLES:
        row = cur.execute(f"SELECT count(*) FROM {table}").fetchone()
        if row and row[0]:
            raise MigrationRefused(
                f"the store's {table} already holds {row[0]} rows: a migration copies into an"
                " empty store only (use a fresh database)"
            )


def _compare(want: dict[str, str], got: dict[str, str], where: str) -> None:
    if want == got:
        return
    wrong = sorted(k for k in want.keys() | got.keys() if want.get(k) != got.get(k))
    shown = ", ".join(wrong[:5]) + (f" and {len(wrong) - 5} more" if len(wrong) > 5 else "")
    raise MigrationRefused(
        f"the copy {where} did not verify: {len(wrong)} entries differ ({shown}); nothing was"
        " committed"
    )


def home_to_store(home: Path, session: PgSession) -> Report:
    """Copy all of `home` into the (empty) store at `session`, in one transaction committed
    only after the copy, read back, reproduces `home` entry for entry."""
    home = Path(home)
    if not home.is_dir():
        raise MigrationRefused(f"{home} is not a folder: nothing to migrate")
    session.open()  # an unreachable store is named before the home is read
    want = home_digests(home)
    counts: dict[str, int] = {}
    with session.transaction("copy a TETHER_HOME into the store") as cur:
        _refuse_filled(cur)
        _copy_in(cur, home, counts)
        for copied in rows.copy_tables_in(cur, home, (*rows.TABLES, *rows.STATE_TABLES)):
            counts[copied.table] = copied.rows
        cur.executemany("INSERT INTO home_digests (path, digest) VALUES (%s, %s)",
                        sorted(want.items()))
        with tempfile.TemporaryDirectory(prefix="tether-migrate-") as scratch:
            back = Path(scratch) / "home"
            back.mkdir()
            _materialize(cur, back)
            _compare(want, home_digests(back), "into the store")
            os.chmod(back, 0o700)
            for top, dirs, _files in os.walk(back):  # writable again, so it can be removed
                for name in dirs:
                    os.chmod(Path(top) / name, 0o700)
    return Report(counts, len(want), manifest_digest(want))


def _manifest_for(transcript: Path, header: bytes) -> None:
    """The `manifest.json` a transcript a server made in the store needs in a home (one
    migrated in brought its own): the local store's schema, dated by the session header."""
    from tether.backends.local.store import MESSAGE_FORMAT, SCHEMA_VERSION

    path = transcript.with_name("manifest.json")
    if path.exists():
        return
    try:
        created = orjson.loads(header).get("timestamp")
    except (orjson.JSONDecodeError, AttributeError):
        created = None
    path.write_bytes(orjson.dumps({
        "schema_version": SCHEMA_VERSION, "message_format": MESSAGE_FORMAT,
        "provider_stack": "tether", "created_at": created,
    }, option=orjson.OPT_INDENT_2) + b"\n")


def _served_now(cur: Any, want: dict[str, str], scratch: Path) -> None:
    """What a `tether server --store` on the store wrote since the home came in (or ever, for a
    store it started empty) replaces the digests recorded then: records as their rows hold them
    now, a transcript grown by live (fenced) appends as its rows render it — its migrated rows
    still held to the recorded digest, so a changed copy is refused — and the folders new ones
    sit in, the documents a server keeps (secrets, reflection state) as their rows hold them
    now, and a memory repository's files checked out from its HEAD. A file keeps its recorded
    mode."""
    def digest(rel: str, data: bytes) -> str:
        mode = want.get(rel, f"{stat.S_IMODE((scratch / rel).stat().st_mode):o}:").split(":", 1)[0]
        return f"{mode}:sha256:" + hashlib.sha256(data).hexdigest()

    def put(rel: str, data: bytes) -> None:
        want[rel] = digest(rel, data)
        parent = rel.rpartition("/")[0]
        while parent and parent not in want:
            want[parent] = f"dir:{stat.S_IMODE((scratch / parent).stat().st_mode):o}"
            parent = parent.rpartition("/")[0]

    for table in ("agents", "conversations"):
        for rel, raw in cur.execute(f"SELECT path, raw FROM {table}").fetchall():
            put(rel, bytes(raw))
    for (repo,) in cur.execute("SELECT path FROM memory_repos").fetchall():
        root = scratch / repo  # files checked out from HEAD (`_repo_out`), their refs verified
        for path in sorted(root.rglob("*")):
            rel = path.relative_to(scratch).as_posix()
            if path.is_file() and ".git" not in path.relative_to(root).parts and rel not in want:
                put(rel, path.read_bytes())
    for rel, content in cur.execute(  # kept live (`PgConversationStore.update_document`)
        "SELECT path, content FROM home_files WHERE path = ANY(%s) OR path LIKE %s",
        (list(LIVE_DOCUMENTS), "agents/%/reflection.json"),
    ).fetchall():
        if content is not None:
            put(rel, bytes(content))
    for conversation, rel, header, torn in cur.execute(
        "SELECT conversation, path, header, torn FROM transcript_files"
    ).fetchall():
        whole, migrated, _rows = render(cur, conversation, bytes(header), bytes(torn))
        if rel not in want or want[rel] == digest(rel, migrated):
            put(rel, whole)
        manifest = rel.rpartition("/")[0] + "/manifest.json"
        if manifest not in want:  # made by `_manifest_for`
            put(manifest, (scratch / manifest).read_bytes())


LIVE_DOCUMENTS = ("secrets.json",)  # and agents/<id>/reflection.json


def _has_entries(folder: Path) -> bool:
    with os.scandir(folder) as found:
        return next(found, None) is not None


def store_to_home(session: PgSession, target: Path) -> Report:
    """Write the store's home to `target` (absent or an empty folder): built beside it,
    verified against the digests recorded when it was copied in (the row-copied SQLite stores
    against the store's rows now), then renamed into place."""
    target = Path(target)
    if target.exists() and (not target.is_dir() or _has_entries(target)):
        raise MigrationRefused(
            f"{target} is not empty: a migration writes a new home only (name a new folder)"
        )
    if not target.parent.is_dir():
        raise MigrationRefused(f"{target.parent} does not exist: create it first")
    session.open()
    scratch = target.parent / f".{target.name}.migrating-{uuid.uuid4().hex[:8]}"
    scratch.mkdir()
    try:
        with session.transaction("copy the store into a TETHER_HOME") as cur:
            cur.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ")
            want = dict(cur.execute("SELECT path, digest FROM home_digests").fetchall())
            served = cur.execute("SELECT count(*) FROM agents").fetchone()
            if not want and not (served and served[0]):
                raise MigrationRefused(
                    "the store holds no home: nothing was migrated into it and no server"
                    " created an agent there"
                )
            counts = _materialize(cur, scratch)
            _served_now(cur, want, scratch)
            # The row-copied stores as the store holds them now: a server on the store may
            # have taken inputs and checkpoints since the home was copied in.
            for (rel,) in cur.execute("SELECT path FROM sqlite_schemas").fetchall():
                mode = want.get(rel, "644:").split(":", 1)[0]
                want[rel] = f"{mode}:" + sqlite_digest(
                    scratch / rel, rel, lambda table: rows._pg_rows(cur, table)
                )
        _compare(want, home_digests(scratch), f"into {target}")
        if target.exists():
            target.rmdir()
        scratch.rename(target)
    except BaseException:
        shutil.rmtree(scratch, ignore_errors=True)
        raise
    return Report(counts, len(want), manifest_digest(want))


def store_status(session: PgSession) -> dict[str, Any]:
    """The store's schema version and how many rows each of its tables holds."""
    from tether.backends.postgres import schema

    with session.transaction("read the store's status") as cur:
        version = schema.current_version(session.conn)
        counts = {t: int(next(iter(cur.execute(f"SELECT count(*) FROM {t}").fetchall()))[0])
                  for t in STORE_TABLES}
        digest = None
        if counts["home_digests"]:
            digest = manifest_digest(dict(cur.execute("SELECT path, digest FROM home_digests").fetchall()))
    return {"schema_version": version, "counts": counts, "migrated_home_digest": digest}
