"""Schedules inside the App Server: the scheduler's `Submitter` that puts a fired prompt into the
target conversation's runtime queue (starting the runtime when no client has; the fire's key as
the input's idempotency key), tells the scheduler when that prompt's turn ended, and answers
whether a transcript already holds a prompt (a takeover's check); and the v2 `cron_trigger`.
With `--store postgresql://…` the whole schedule store is the database's (`runtime/cron/fleet.py`:
tasks, run logs, triggers, fires, the scheduler lease, each scheduler's presence), and the
schedule requests use that same store (`request_store`), so workers with separate homes share it.

A schedule is one more principal submitting input: its prompt waits in the same bounded queue
as a client's and runs as an ordinary turn; a full queue is refused, never grown.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import sys
import uuid
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from tether.errors import TetherError
from tether.protocol.messages import TextPart, UserMessage
from tether.runtime.cron.delivery import FireFinished
from tether.runtime.cron.scheduler import Scheduler, SubmitResult, clock_from_env, hold_from_env
from tether.runtime.cron.store import CronStore
from tether.server.auth import FULL_GRANT
from tether.server.protocol_v2 import CreateMessage, NewMessage, RuntimeStart
from tether.server.runtime_start import start_runtime
from tether.server.v2_frames import (
    TurnFinished,
    crons_updated,
)

if TYPE_CHECKING:
    from tether.server.app_server import AppServer
    from tether.server.runtime import ConversationRuntime

SCHEDULE_TAG = "origin:schedule"


class RuntimeSubmitter:
    """The scheduler's `Submitter`: a fire's prompt into its conversation's runtime queue, with
    the fire's key as the input's idempotency key and request id (so its `turn_finished` says
    which fire ended)."""

    def __init__(self, server: AppServer) -> None:
        self.server = server

    def _start(self, agent_id: str, conversation: str) -> tuple[ConversationRuntime, Any]:
        server = self.server
        new = conversation == "new"
        frame = RuntimeStart(
            request_id=f"cron-{uuid.uuid4().hex[:8]}",
            agent_id=agent_id,
            create_agent=None,
            conversation_id=None if new else conversation,
            create_conversation={} if new else None,
            cwd=None,
            mode=None,
        )
        return start_runtime(server.ctx, server.runtimes, server.instance, FULL_GRANT, frame)

    async def open_conversation(self, agent_id: str, conversation: str) -> str:
        if conversation != "new":
            return conversation
        _, resolved = self._start(agent_id, "new")
        scope = resolved.scope
        # the conversation record is the database's in a fleet: written off the event loop
        await asyncio.to_thread(_tag_scheduled, self.server, scope.agent_id, scope.conversation_id)
        return str(scope.conversation_id)

    async def submit(
        self, agent_id: str, conversation_id: str, text: str, key: str, on_finished: FireFinished
    ) -> SubmitResult:
        try:
            rt, resolved = self._start(agent_id, conversation_id)
        except (TetherError, OSError) as exc:
            return SubmitResult("unavailable", error=str(exc))
        scope = resolved.scope
        message = NewMessage(key, (TextPart(text),), text)
        watch = _FireWatch(rt, key, on_finished)
        rt.subscribe(watch)  # before the submit: the turn may start and end at once
        try:
            # the async path: the conversation's lease and the input's commit off the event loop
            answer = await rt.enqueue(CreateMessage(key, key, scope, (message,)), source="cron")
        except BaseException:
            rt.unsubscribe(watch)
            raise
        if not answer.accepted or answer.duplicate:
            rt.unsubscribe(watch)  # no turn of ours is coming (or it came before)
        if not answer.accepted:
            return SubmitResult("queue_full", scope.conversation_id, error=answer.error)
        return SubmitResult(
            "queued", scope.conversation_id, answer.queue_item_id, duplicate=answer.duplicate
        )

    def landed(self, agent_id: str, conversation_id: str, text: str) -> bool:
        transcript = self.server.ctx.store.transcript(agent_id, conversation_id)
        for message in transcript.load():
            if (
                isinstance(message, UserMessage)
                and "".join(part.text for part in message.content if isinstance(part, TextPart))
                == text
            ):
                return True
        return False


class _FireWatch:
    """Hears the runtime's turns until the one that ran a fire's prompt ends."""

    def __init__(self, rt: ConversationRuntime, key: str, on_finished: FireFinished) -> None:
        self.id = f"cron-watch-{key}"
        self.rt, self.key, self.on_finished = rt, key, on_finished

    def send_frame(self, frame: dict[str, Any]) -> None:
        pass  # the frames are for clients; the typed end of the turn is below

    def on_event(self, event: Any) -> None:
        pass

    def on_turn_finished(self, finished: TurnFinished) -> None:
        if finished.request_id != self.key:
            return
        self.rt.unsubscribe(self)
        self.on_finished(self.key, finished.error is None and finished.stop_reason == "end_turn")

    def on_approval_request(self, request_id: str, tool_name: str, reason: str) -> None:
        pass


def _tag_scheduled(server: AppServer, agent_id: str, conversation_id: str) -> None:
    store = server.ctx.store
    record = store.get_conversation(conversation_id, agent_id)
    tags = [*record.extra.get("tags", []), SCHEDULE_TAG]
    store.save_conversation(dataclasses.replace(record, extra={**record.extra, "tags": tags}))


class CronService:
    """The server's scheduler: started with the server, stopped (lease released) with it."""

    def __init__(self, server: AppServer) -> None:
        self.server = server
        self.store, owner = _schedule_store(server)
        self.scheduler = Scheduler(
            self.store,
            RuntimeSubmitter(server),
            clock_from_env(server.ctx.env),
            owner=owner,
            poll_s=float(server.ctx.env.get("TETHER_CRON_POLL_S") or 1.0),
            on_change=self._announce,
            hold=hold_from_env(server.ctx.env),
        )
        self._stop = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.ensure_future(self.scheduler.run(self._stop))

    async def stop(self) -> None:
        self._stop.set()
        if self._task is not None:
            try:
                await asyncio.wait_for(self._task, 20)
            except Exception as exc:  # a timeout or a failed pass: never hold up shutdown
                sys.stderr.write(f"tether: scheduler did not stop cleanly: {exc!r}\n")
        self.store.close()

    def _announce(self) -> None:
        frame = crons_updated()
        for conn in list(self.server.connections):
            conn.send_frame(frame)


def _schedule_store(server: AppServer) -> tuple[CronStore, str | None]:
    """The local store's cron.db, or with `--store` the fleet's (`runtime/cron/fleet.py`: every
    schedule table in the database, the scheduler named after this worker's session, whose
    liveness the database sees)."""
    home = server.ctx.store.home
    if server.ctx.fleet is None:
        return CronStore(home), None
    from tether.backends.postgres.cron_tasks import CronTasks
    from tether.backends.postgres.fires import CronFires
    from tether.runtime.cron.fleet import FleetCronStore

    session = server.ctx.fleet.leases.session  # the worker's PgSession (runtime/session/pg_store.py)
    return FleetCronStore(home, CronFires(session), CronTasks(session)), str(session.worker)


@contextlib.contextmanager
def request_store(server: AppServer) -> Iterator[CronStore]:
    """The schedule store a request (run off the event loop) reads and writes: with `--store`
    the scheduler's own (its calls are transactions on the worker's session, safe from any
    thread), else the home's cron.db on a connection of the request's own (SQLite connections
    stay in their thread), closed after."""
    cron = server.cron
    if server.ctx.fleet is not None and cron is not None:
        yield cron.store
        return
    store, _ = _schedule_store(server)
    try:
        yield store
    finally:
        store.close()
