"""The PostgreSQL store of `--store postgresql://…` (`tether server`, and `tether -p`: a fleet's
subagents), opened behind the same interfaces a run uses on the local store (`InputQueue`, the
checkpoint store): the URL checked before anything starts, then one worker's session, queue and
checkpoints. Which worker runs a conversation is `server/fleet_leases.py` (a server) or
`backends/postgres/solo_lease.py` (one headless run).

Agents, conversation records and transcripts are in the database too (`runtime_start.open_store`
puts `backends/postgres/agents.py` on this worker's session), so workers need not share a
TETHER_HOME for them; what stays in each worker's own home is per machine (settings,
credentials, caches)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tether.errors import UsageError

# Connections of a worker's session for the queue, leases, checkpoints and transcripts, so their
# round trips (from the loop's worker threads, the keepers and the listener) do not queue on one.
POOL_SIZE = 4


@dataclass
class PgStore:
    """One worker's PostgreSQL pieces, all on one session named after the worker (its presence
    connection plus a pool of `POOL_SIZE`)."""

    url: str
    session: Any  # PgSession
    inputs: Any  # PgInputQueue[StoredInput]
    checkpoints: Any  # PgCheckpointStore[Checkpoint]


def check_store_url(url: str) -> str:
    """`--store`'s value checked before anything starts: a PostgreSQL URL (never echoing its
    password) and psycopg installed."""
    from tether.backends.postgres.connection import PgStoreUnavailable, _psycopg, check_url

    try:
        check_url(url)
        _psycopg()
    except PgStoreUnavailable as exc:
        raise UsageError(str(exc)) from None
    return url


def open_pg_store(url: str, worker: str) -> PgStore:
    """Connect (migrating the schema, registering the worker) now: a server whose database is
    unreachable fails at start, naming it without its password."""
    from tether.backends.postgres.checkpoints import CheckpointShape, PgCheckpointStore
    from tether.backends.postgres.connection import PgSession
    from tether.backends.postgres.input_queue import PgInputQueue, RowCodec
    from tether.runtime.turns import checkpoints as cps
    from tether.runtime.turns import input_queue as iq

    session = PgSession(url, worker, pool_size=POOL_SIZE)
    session.open()
    codec: RowCodec[iq.StoredInput] = RowCodec(iq.encode_body, iq.decode_row, iq.FINISHED_BODY)
    shape: CheckpointShape[cps.Checkpoint] = CheckpointShape(
        cps.Checkpoint, cps.UNKNOWN_OUTCOME, cps.AlreadyCheckpointed, cps.CheckpointConflict
    )
    return PgStore(url, session, PgInputQueue(session, codec), PgCheckpointStore(session, shape))
