"""The PostgreSQL store's schema: numbered migrations applied in order, each once, recorded in
`tether_schema`, under an advisory lock so N workers starting together migrate once."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from tether.backends.postgres.connection import PgStoreUnavailable

if TYPE_CHECKING:
    import psycopg

_MIGRATE_LOCK = 0x7E7E_0031  # pg_advisory_xact_lock key: one migrator at a time

# Never edit an applied migration: append a new one.
MIGRATIONS: tuple[str, ...] = (
    # 1: workers, inputs, conversation leases, transcripts, schedule fires
    """
    CREATE TABLE workers (
        worker TEXT PRIMARY KEY,
        backend_pid INTEGER NOT NULL,
        backend_start TIMESTAMPTZ NOT NULL,
        seen_at TIMESTAMPTZ NOT NULL
    );
    CREATE TABLE inputs (
        seq BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
        conversation TEXT NOT NULL,
        item_id TEXT NOT NULL,
        idempotency_key TEXT,
        request_id TEXT,
        source TEXT NOT NULL,
        disposition TEXT NOT NULL,
        state TEXT NOT NULL CHECK (state IN
            ('queued', 'started', 'done', 'cancelled', 'interrupted', 'not_run')),
        body BYTEA NOT NULL,
        owner TEXT NOT NULL,
        user_message_id TEXT,
        reason TEXT,
        enqueued_at TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp(),
        updated_at TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp(),
        UNIQUE (conversation, item_id)
    );
    CREATE UNIQUE INDEX inputs_key ON inputs (conversation, idempotency_key)
        WHERE idempotency_key IS NOT NULL;
    CREATE INDEX inputs_pending ON inputs (conversation, seq) WHERE state IN ('queued', 'started');
    CREATE INDEX inputs_pending_owner ON inputs (owner) WHERE state IN ('queued', 'started');
    CREATE TABLE conversation_leases (
        conversation TEXT PRIMARY KEY,
        holder TEXT NOT NULL,
        token BIGINT NOT NULL CHECK (token > 0),
        expires_at TIMESTAMPTZ NOT NULL
    );
    CREATE TABLE transcript (
        conversation TEXT NOT NULL,
        seq BIGINT NOT NULL CHECK (seq > 0),
        entry JSONB NOT NULL,
        token BIGINT NOT NULL,
        written_at TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp(),
        PRIMARY KEY (conversation, seq)
    );
    CREATE TABLE schedule_fires (
        schedule_id TEXT NOT NULL,
        due_at TIMESTAMPTZ NOT NULL,
        fired_by TEXT NOT NULL,
        fired_at TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp(),
        PRIMARY KEY (schedule_id, due_at)
    );
    """,
    # 2: effect checkpoints (checkpoints.py), as runtime/turns/checkpoints.py keeps them in SQLite
    """
    CREATE TABLE effect_checkpoints (
        conversation TEXT NOT NULL,
        tool_call_id TEXT NOT NULL,
        tool_name TEXT NOT NULL,
        arguments BYTEA NOT NULL,
        phase TEXT NOT NULL CHECK (phase IN ('before', 'after', 'unknown')),
        result BYTEA,
        owner TEXT NOT NULL,
        revision INTEGER NOT NULL,
        created_at TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp(),
        updated_at TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp(),
        PRIMARY KEY (conversation, tool_call_id)
    );
    """,
    # 3: a whole TETHER_HOME (migrate_home.py): agent and conversation records (the JSON
    # document, its exact bytes and the columns looked up by), transcripts in the fenced rows
    # table (each entry's exact line kept; a row appended live has none and renders from
    # `entry`), the file's header, torn tail and `.replaced` log, memory repositories as git
    # bundles, the SQLite stores' schemas, every other file of the home, and the digests the
    # copy was verified against
    """
    CREATE TABLE agents (
        id TEXT PRIMARY KEY,
        name TEXT NOT NULL,
        model TEXT,
        updated_at TEXT NOT NULL,
        path TEXT NOT NULL UNIQUE,
        document JSONB NOT NULL,
        raw BYTEA NOT NULL
    );
    CREATE TABLE conversations (
        key TEXT PRIMARY KEY,
        id TEXT NOT NULL,
        agent_id TEXT NOT NULL,
        archived BOOLEAN NOT NULL,
        updated_at TEXT NOT NULL,
        path TEXT NOT NULL UNIQUE,
        document JSONB NOT NULL,
        raw BYTEA NOT NULL
    );
    CREATE INDEX conversations_agent ON conversations (agent_id, updated_at);
    ALTER TABLE transcript ADD COLUMN line BYTEA;
    CREATE TABLE transcript_files (
        conversation TEXT PRIMARY KEY,
        path TEXT NOT NULL UNIQUE,
        header BYTEA NOT NULL,
        torn BYTEA NOT NULL,
        replaced BYTEA
    );
    CREATE TABLE memory_repos (
        path TEXT PRIMARY KEY,
        bundle BYTEA NOT NULL,
        refs JSONB NOT NULL,
        config BYTEA NOT NULL
    );
    CREATE TABLE sqlite_schemas (
        path TEXT PRIMARY KEY,
        user_version INTEGER NOT NULL,
        ddl TEXT[] NOT NULL
    );
    CREATE TABLE home_files (
        path TEXT PRIMARY KEY,
        mode INTEGER NOT NULL,
        content BYTEA
    );
    CREATE TABLE home_digests (
        path TEXT PRIMARY KEY,
        digest TEXT NOT NULL
    );
    """,
    # 4: the schedules (cron.db) and the channel gateway's journal (channels/gateway.db) as
    # rows, and the AUTOINCREMENT counters of a home's SQLite stores (a number never reused)
    """
    ALTER TABLE sqlite_schemas ADD COLUMN sequences JSONB NOT NULL DEFAULT '{}';
    CREATE TABLE cron_tasks (
        id TEXT PRIMARY KEY, agent_id TEXT NOT NULL, status TEXT NOT NULL,
        created_ms BIGINT NOT NULL, last_slot_ms BIGINT NOT NULL, terminal_ms BIGINT,
        data BYTEA NOT NULL
    );
    CREATE INDEX cron_tasks_agent ON cron_tasks (agent_id, status);
    CREATE TABLE cron_runs (
        seq BIGINT PRIMARY KEY, task_id TEXT NOT NULL, ts_ms BIGINT NOT NULL,
        record BYTEA NOT NULL
    );
    CREATE INDEX cron_runs_task ON cron_runs (task_id, seq);
    CREATE TABLE cron_triggers (
        seq BIGINT PRIMARY KEY, task_id TEXT NOT NULL, requested_ms BIGINT NOT NULL,
        done_ms BIGINT, result BYTEA
    );
    CREATE TABLE cron_fires (
        key TEXT PRIMARY KEY, task_id TEXT NOT NULL, slot_ms BIGINT NOT NULL,
        state TEXT NOT NULL, owner TEXT NOT NULL, conversation_id TEXT NOT NULL,
        text BYTEA NOT NULL, reason TEXT NOT NULL, missed INTEGER NOT NULL,
        updated_ms BIGINT NOT NULL
    );
    CREATE INDEX cron_fires_open ON cron_fires (state);
    CREATE TABLE cron_leases (
        name TEXT PRIMARY KEY, owner TEXT NOT NULL, expires_ms BIGINT NOT NULL
    );
    CREATE TABLE channel_inbox (
        seq BIGINT PRIMARY KEY, channel TEXT NOT NULL, account TEXT NOT NULL,
        message_id TEXT NOT NULL, body BYTEA NOT NULL, state TEXT NOT NULL,
        received_at TIMESTAMPTZ NOT NULL, UNIQUE (channel, account, message_id)
    );
    CREATE TABLE channel_outbox (
        tool_call_id TEXT PRIMARY KEY, channel TEXT NOT NULL, account TEXT NOT NULL,
        chat_id TEXT NOT NULL, state TEXT NOT NULL, result BYTEA,
        updated_at TIMESTAMPTZ NOT NULL
    );
    CREATE TABLE channel_paused (chat TEXT PRIMARY KEY);
    CREATE TABLE channel_runtimes (
        route TEXT PRIMARY KEY, agent_id TEXT NOT NULL, conversation_id TEXT NOT NULL
    );
    """,
    # 5: the channel journal used live by gateways on the store (channel_journal.py): which
    # gateway handles an inbound message (none for rows copied from a home)
    """
    ALTER TABLE channel_inbox ADD COLUMN owner TEXT;
    CREATE INDEX channel_inbox_open ON channel_inbox (state, seq);
    """,
)


def current_version(conn: psycopg.Connection[Any]) -> int:
    row = conn.execute(
        "SELECT to_regclass('tether_schema') IS NOT NULL"
    ).fetchone()
    if not row or not row[0]:
        return 0
    version = conn.execute("SELECT max(version) FROM tether_schema").fetchone()
    return int(version[0] or 0) if version else 0


def migrate(conn: psycopg.Connection[Any]) -> int:
    """Bring the database at `conn` to the newest schema; returns its version. A database
    newer than this tether is refused (its rows may mean things this code does not know)."""
    with conn.transaction():
        conn.execute("SELECT pg_advisory_xact_lock(%s)", (_MIGRATE_LOCK,))
        conn.execute(
            "CREATE TABLE IF NOT EXISTS tether_schema (version INTEGER PRIMARY KEY,"
            " applied_at TIMESTAMPTZ NOT NULL DEFAULT clock_timestamp())"
        )
        have = current_version(conn)
        if have > len(MIGRATIONS):
            raise PgStoreUnavailable(
                f"the PostgreSQL store has schema version {have}, newer than this tether's"
                f" {len(MIGRATIONS)}: upgrade tether before serving from it"
            )
        for version in range(have + 1, len(MIGRATIONS) + 1):
            conn.execute(MIGRATIONS[version - 1])
            conn.execute("INSERT INTO tether_schema (version) VALUES (%s)", (version,))
    return len(MIGRATIONS)
