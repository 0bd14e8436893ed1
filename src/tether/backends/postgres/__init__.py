"""The PostgreSQL store for a fleet of App Servers (issue 31): one database shared by N
processes. `connection.py` the conninfo, sessions and errors; `schema.py` versioned migrations;
`presence.py` which workers are alive (their database session, not a clock); `input_queue.py`
`PgInputQueue`, the runtime's `InputQueue` on PostgreSQL; `leases.py` conversation leases with
fencing tokens and the fenced writes (inputs taken, marked, transcript rows appended);
`keeper.py` a lease renewed while a turn runs; `checkpoints.py` effect checkpoints with the
runtime `CheckpointStore`'s methods; `fires.py` a schedule's due time fired once across the
fleet; `notify.py` LISTEN/NOTIFY, an enqueued input waking its conversation's owner;
`health.py` what /healthz, /readyz and /metrics say about the database; `logs.py` structured
fleet events (`tether.fleet`) and a JSON-lines formatter; `migrate.py` a home's
`inputs.db` and `checkpoints.db` copied to the store and back, verified; `migrate_home.py` the
rest of a home (records, transcripts, memory repositories, files). psycopg (the `postgres`
extra) is imported only inside this package, so nothing here is on the start path of a local run.

Not wired yet. How `tether server --store postgresql://…` plugs in (server/ and runtime/ code):
`make_context` builds one `PgSession(url, owner)` and passes `PgInputQueue(session, codec)` as
`ServerContext.inputs` and `PgCheckpointStore(session, shape)` as its checkpoints, the codec and
shape made from `runtime/input_queue.py`'s body/row functions and `runtime/checkpoints.py`'s
`Checkpoint`, `UNKNOWN_OUTCOME` and errors; a conversation runtime is built only after
`ConversationLeases.acquire` and runs under a `LeaseKeeper` whose loss aborts the turn; its
inputs come from `leases.queued` when an `InputListener` hears its conversation (a worker that
accepts an input for a conversation it does not hold only records it); the start-up sweep is
`leases.orphaned()` + `acquire` instead of `claim_orphans`; the cron bridge fires through
`ScheduleFires.fire_once`; /healthz, /readyz and /metrics answer from `health.py`.
"""
