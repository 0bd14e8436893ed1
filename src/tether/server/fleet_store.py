"""`tether server --store postgresql://…`: the PostgreSQL store behind the same interfaces the
server uses on the local store (`InputQueue`, the checkpoint store), and the fleet's takeover
sweep: a running worker takes the unfinished inputs of workers whose database session ended
(kill -9) and resumes them through `durable_inputs`, the same code a restart runs.

Agents, conversation records and transcripts stay in the shared `$TETHER_HOME` files for now, so
the workers of one fleet share one TETHER_HOME (one machine); only the input queue, idempotency
keys and effect checkpoints live in the database."""

from __future__ import annotations

import asyncio
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tether.errors import TetherError, UsageError

if TYPE_CHECKING:
    from tether.server.app_server import AppServer

SWEEP_EVERY_S = 1.0


@dataclass
class PgStore:
    """One worker's PostgreSQL pieces, all on one session named after the worker."""

    url: str
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
    from tether.runtime import checkpoints as cps
    from tether.runtime import input_queue as iq

    session = PgSession(url, worker)
    session.open()
    codec: RowCodec[iq.StoredInput] = RowCodec(iq.encode_body, iq.decode_row, iq.FINISHED_BODY)
    shape: CheckpointShape[cps.Checkpoint] = CheckpointShape(
        cps.Checkpoint, cps.UNKNOWN_OUTCOME, cps.AlreadyCheckpointed, cps.CheckpointConflict
    )
    return PgStore(url, PgInputQueue(session, codec), PgCheckpointStore(session, shape))


async def sweep(server: AppServer, every: float = SWEEP_EVERY_S) -> None:
    """Until cancelled: take the inputs of dead workers and resume them here."""
    from tether.server.durable_inputs import resume_stored

    queue = server.ctx.inputs
    while True:
        await asyncio.sleep(every)
        try:
            claimed = await asyncio.to_thread(queue.claim_dead)  # type: ignore[union-attr]
        except TetherError as exc:
            sys.stderr.write(f"tether: fleet sweep: {exc}\n")
            continue
        if claimed:
            resume_stored(server, claimed)
