"""The PostgreSQL store for a fleet of App Servers (issue 31): one database shared by N
processes. `connection.py` the conninfo, sessions (a presence connection and a small pool) and errors; `schema.py` versioned migrations;
`presence.py` which workers are alive (their database session, not a clock); `input_queue.py`
`PgInputQueue`, the runtime's `InputQueue` on PostgreSQL; `leases.py` conversation leases with
fencing tokens and the fenced writes (inputs taken, marked, transcript rows appended);
`keeper.py` a lease renewed while a turn runs; `checkpoints.py` effect checkpoints with the
runtime `CheckpointStore`'s methods; `fires.py` a schedule's due time fired once across the
fleet; `notify.py` LISTEN/NOTIFY, an enqueued input waking its conversation's owner (and turn events,
commands); `events.py` turn frames and commands between workers (`fleet_events`, `fleet_commands`);
`health.py` what /healthz, /readyz and /metrics say about the database; `agents.py`
`PgConversationStore`, agents and conversations as rows (`backends/store_api.py`'s interface);
`transcripts.py` `PgTranscript`, a transcript as ordered rows, appends fenced by the lease
(`transcript_resume.py`: a first read resumes from the last compaction);
`channel_journal.py` the channel gateway's journal shared by gateways (`--store`);
`cron_tasks.py` schedules, their run logs and triggers as rows; `memory_sync.py` an agent's
memory repository shared by the workers (pulled before a turn, pushed after it);
`logs.py` structured fleet events (`tether.fleet`) and a JSON-lines formatter; `migrate.py` a home's
`inputs.db` and `checkpoints.db` copied to the store and back, verified; `migrate_home.py` the
rest of a home (records, transcripts, memory repositories, files). psycopg (the `postgres`
extra) is imported only inside this package, so nothing here is on the start path of a local run.

Wired into `tether server --store postgresql://…` by `runtime/session/pg_store.py` (one `PgSession`
per worker; `PgInputQueue` and `PgCheckpointStore` as the server's `InputQueue` and checkpoint
store, with `runtime/turns/input_queue.py`'s public row codec) and `server/fleet_leases.py` (a
conversation runs where its `ConversationLeases` lease is, kept by a `LeaseKeeper` whose loss
closes the runtime; an `InputListener` wakes the holder for inputs other workers recorded; the
sweep is `leases.orphaned()` + `acquire`); /healthz, /readyz and /metrics answer from
`health.py` (`server/ops.py`); the scheduler's fires, lease and presence are `fires.py`
`CronFires` (`runtime/cron/fleet.py`; task definitions stay in the shared home's cron.db). Agents,
conversations and transcripts are `agents.py`'s, chosen by `server/runtime_start.open_store`.
"""
