"""One conversation's turn as every worker of a fleet sees it (`tether server --store`): the lease
holder publishes each frame it broadcasts (`backends/postgres/events.py`, written by one
publisher thread in batches, off the event loop); a worker whose clients follow a conversation
it does not run relays the holder's frames to them, unchanged (the holder's `event_seq`), in
order and once, across a move of the lease (the new holder's frames go on after the last one
published); an approval answered or an abort asked on a non-holder goes to the holder as a
command. The listener thread of `fleet_leases.py` calls the `heard_*` methods.

A client resuming after the last event_seq it saw (`runtime_start{after_event_seq}`, e.g. after
its worker died) gets a `Replay`: from the moment it is asked, frames relayed to that client are
held; the listener thread reads the rows after its seq (once the publisher wrote what this worker
broadcast before), and the client gets `runtime_replay`, those rows, then the held frames it has
not been sent, in order: none missing, none twice. On the lease holder, its own later frames
reach the client directly, so the replay stops at the last seq built when asked; they may then
arrive before the replayed ones (a hook in the runtime's subscribe would order them)."""

from __future__ import annotations

import asyncio
import contextlib
import queue
import sys
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tether.errors import TetherError

if TYPE_CHECKING:
    from tether.server.fleet_leases import FleetLeases
    from tether.server.protocol_v2 import ApprovalResponse
    from tether.server.runtime import ConversationRuntime

PUBLISH_BATCH = 256  # frames per transaction at most
CATCH_UP_EVERY_S = 2.0  # followers read what they may have missed (a lost notification)
PRUNE_EVERY_S = 60.0


@dataclass(eq=False)
class Follower:
    """Clients of this worker following a conversation another worker may run: `last` is the
    highest event_seq read (None until primed, on the listener thread), `since` when following
    began (frames older than that are not relayed), `approvals` the open questions relayed."""

    rt: ConversationRuntime
    since: float = field(default_factory=time.time)
    last: int | None = None
    approvals: set[str] = field(default_factory=set)
    replays: list[Replay] = field(default_factory=list)


@dataclass(eq=False)
class Replay:
    """One resuming client's catch-up: asked before it subscribes (so `before`, the runtime's
    subscribers then, tells it apart until `sub_id` is bound on the next loop turn); read from
    the rows once the publisher has handled `barrier` frames."""

    after: int
    barrier: int
    before: frozenset[str]
    sub_id: str | None = None
    held: list[dict[str, Any]] = field(default_factory=list)
    reading: bool = False

    def claims(self, sub_id: str) -> bool:
        return self.sub_id == sub_id if self.sub_id is not None else sub_id not in self.before


class EventPublisher:
    """Writes published frames in order, batched, on its own thread and connection."""

    def __init__(self, url: str, worker: str) -> None:
        self.url = url
        self.worker = worker
        self._queue: queue.SimpleQueue[tuple[str, int, int, dict[str, Any]] | None] = (
            queue.SimpleQueue()
        )
        self._conn: Any = None
        self.put_count = 0  # frames put, on the event loop
        self.done_count = 0  # frames written or dropped, on the publisher's thread
        self._thread = threading.Thread(target=self._run, name="fleet-events", daemon=True)
        self._thread.start()

    def put(self, conversation: str, token: int, seq: int, frame: dict[str, Any]) -> None:
        self.put_count += 1
        self._queue.put((conversation, token, seq, frame))

    def _run(self) -> None:
        while True:
            first = self._queue.get()
            if first is None:
                break
            batch = [first]
            stop = False
            while len(batch) < PUBLISH_BATCH:
                try:
                    more = self._queue.get_nowait()
                except queue.Empty:
                    break
                if more is None:
                    stop = True
                    break
                batch.append(more)
            self._write(batch)
            self.done_count += len(batch)
            if stop:
                break
        if self._conn is not None:
            self._conn.close()

    def _write(self, batch: list[tuple[str, int, int, dict[str, Any]]]) -> None:
        from tether.backends.postgres import events
        from tether.backends.postgres.connection import connect, store_errors

        for attempt in (1, 2):  # once more on a new connection: the database may have restarted
            try:
                if self._conn is None or self._conn.closed:
                    self._conn = connect(self.url)
                with store_errors(self.url, "publish turn events"):
                    events.publish(self._conn, self.worker, batch)
                return
            except TetherError as exc:
                if self._conn is not None:
                    self._conn.close()
                    self._conn = None
                if attempt == 2:
                    sys.stderr.write(f"tether: {len(batch)} turn event(s) not published to other"
                                     f" workers: {exc}\n")

    def stop(self) -> None:
        self._queue.put(None)
        self._thread.join(5)


class FleetEvents:
    """This worker's publishing, following and commands; the loop side is called on the event
    loop, the `heard_*` side on the fleet listener's thread (with its connection)."""

    def __init__(self, fleet: FleetLeases, url: str, worker: str) -> None:
        self.fleet = fleet
        self.url = url
        self.worker = worker
        self.publisher: EventPublisher | None = None
        self.followers: dict[str, Follower] = {}
        self._caught_up = time.monotonic()
        self._pruned = time.monotonic()

    # --- on the event loop ---------------------------------------------------------------------

    def start(self) -> None:
        self.publisher = EventPublisher(self.url, self.worker)

    def stop(self) -> None:
        if self.publisher is not None:
            self.publisher.stop()

    def publish(self, conversation: str, frame: dict[str, Any]) -> None:
        """A frame this worker broadcast, for the other workers' clients, if it runs the
        conversation (a non-holder's own frames, e.g. its queue state, stay with its clients)."""
        lease = self.fleet.held.get(conversation)
        seq = frame.get("event_seq")
        if lease is None or self.publisher is None or not isinstance(seq, int):
            return
        self.publisher.put(conversation, lease.token, seq, frame)

    def follow(self, conversation: str, rt: ConversationRuntime) -> None:
        current = self.followers.get(conversation)
        if current is None or current.rt is not rt:
            self.followers[conversation] = Follower(rt)

    def unfollow(self, conversation: str, rt: ConversationRuntime) -> None:
        current = self.followers.get(conversation)
        if current is not None and current.rt is rt:
            del self.followers[conversation]

    def resume(self, conversation: str, rt: ConversationRuntime, after: int,
               sub_id: str | None = None) -> None:
        """Before the client resuming after `after` subscribes to `rt` (on this loop turn), or
        for `sub_id`, a client of `rt` already (`sync{after_event_seq}`)."""
        self.follow(conversation, rt)
        follower = self.followers[conversation]
        barrier = self.publisher.put_count if self.publisher is not None else 0
        replay = Replay(after, barrier, frozenset(rt.subscribers), sub_id)
        follower.replays.append(replay)
        if sub_id is None:
            asyncio.get_running_loop().call_soon(self._bind, conversation, follower, replay)

    def _bind(self, conversation: str, follower: Follower, replay: Replay) -> None:
        bound = {r.sub_id for r in follower.replays}
        new = [s for s in follower.rt.subscribers if s not in replay.before and s not in bound]
        if new:
            replay.sub_id = new[0]
            return
        with contextlib.suppress(ValueError):  # its runtime_start failed after all
            follower.replays.remove(replay)
        if not follower.rt.subscribers:
            self.unfollow(conversation, follower.rt)

    def _relay(self, conversation: str, follower: Follower, frames: list[dict[str, Any]]) -> None:
        if self.followers.get(conversation) is not follower:
            return
        for frame in frames:
            _note_approval(follower.approvals, frame)
            for sub in list(follower.rt.subscribers.values()):
                if not self.hold_back(conversation, sub.id, frame):
                    sub.send_frame(frame)

    def hold_back(self, conversation: str, sub_id: str, frame: dict[str, Any]) -> bool:
        """Whether `frame` waits for the replay of client `sub_id` (it is then sent after the
        replay, unless replayed). The relay and the holder's own broadcast both ask it, so a
        client's live frames always come after its replay."""
        follower = self.followers.get(conversation)
        if follower is None:
            return False
        replay = next((r for r in follower.replays if r.claims(sub_id)), None)
        if replay is None:
            return False
        replay.held.append(frame)
        return True

    def _replayed(self, follower: Follower, replay: Replay,
                  rows: list[tuple[int, str, dict[str, Any]]], pruned_through: int) -> None:
        """The rows after the client's seq read: `runtime_replay`, them, then what was held."""
        from tether.server.v2_frames import runtime_replay

        with contextlib.suppress(ValueError):
            follower.replays.remove(replay)
        sub = follower.rt.subscribers.get(replay.sub_id or "")
        if sub is None:
            return  # gone meanwhile
        frames = [frame for _seq, _, frame in rows]
        answered: set[str] = set()
        for frame in frames:  # questions still open at the end of the replay can be answered here
            _note_approval(answered, frame)
        follower.approvals |= answered
        missing = pruned_through if pruned_through > replay.after else None
        sub.send_frame(runtime_replay(follower.rt.scope, replay.after, frames, missing))
        through = replay.after
        for frame in [*frames, *replay.held]:
            seq = frame.get("event_seq")
            if isinstance(seq, int) and seq > through:
                sub.send_frame(frame)
                through = seq

    def forward_approval(self, conversation: str, response: ApprovalResponse) -> str | None:
        """An answer to a question another worker's turn asked; an error when none is open."""
        follower = self.followers.get(conversation)
        if follower is None or response.approval_request_id not in follower.approvals:
            return f"no pending approval request {response.approval_request_id!r} in this runtime"
        follower.approvals.discard(response.approval_request_id)
        self._command(conversation, {
            "kind": "approval", "approval_request_id": response.approval_request_id,
            "allow": response.allow, "message": response.message,
            "updated_input": response.updated_input,
        })
        return None

    def forward_abort(self, conversation: str, run_id: str | None) -> bool:
        """Ask the holder to abort its running turn (or `run_id`); True when sent."""
        if conversation in self.fleet.held or conversation not in self.followers:
            return False
        self._command(conversation, {"kind": "abort", "run_id": run_id})
        return True

    def _command(self, conversation: str, command: dict[str, Any]) -> None:
        from tether.backends.postgres import events

        session = self.fleet.leases.session

        def send() -> None:
            try:
                with session.transaction("send a command to a conversation's holder") as cur:
                    events.send_command(cur, conversation, self.worker, command)
            except TetherError as exc:
                sys.stderr.write(f"tether: {conversation}: {command['kind']} not sent: {exc}\n")

        server = self.fleet.server
        task = asyncio.ensure_future(asyncio.to_thread(send))
        if server is not None:
            server._hold(task)

    def _apply(self, conversation: str, commands: list[dict[str, Any]]) -> None:
        from tether.server.protocol_v2 import ApprovalResponse

        rt = self.fleet._runtime(conversation)
        for command in commands:
            if rt is None:
                problem: str | None = "its runtime is not running here"
            elif command.get("kind") == "approval":
                problem = rt.answer_approval(ApprovalResponse(
                    None, rt.scope, str(command["approval_request_id"]), bool(command["allow"]),
                    str(command.get("message") or ""), command.get("updated_input"),
                ))
            elif command.get("kind") == "abort":
                rt.abort(command.get("run_id"))
                problem = None
            else:
                problem = f"unknown command {command.get('kind')!r}"
            if problem is not None:
                sys.stderr.write(f"tether: {conversation}: a forwarded {command.get('kind')}"
                                 f" was not applied: {problem}\n")

    # --- on the listener's thread ----------------------------------------------------------------

    def heard_events(self, conn: Any, loop: asyncio.AbstractEventLoop, conversation: str,
                     worker: str) -> None:
        follower = self.followers.get(conversation)
        if follower is None or worker == self.worker:
            return
        self._read(conn, loop, conversation, follower)

    def heard_commands(self, conn: Any, loop: asyncio.AbstractEventLoop, conversation: str) -> None:
        from tether.backends.postgres import events

        if conversation not in self.fleet.held:
            return  # its holder takes them; a moved lease's new holder finds them stale
        commands = events.take_commands(conn, conversation)
        if commands:
            with contextlib.suppress(RuntimeError):  # the loop closed: stopping
                loop.call_soon_threadsafe(self._apply, conversation, commands)

    def tick(self, conn: Any, loop: asyncio.AbstractEventLoop) -> None:
        """Between waits: prime new followers; now and then read what every follower may have
        missed, and prune old rows."""
        from tether.backends.postgres import events

        now = time.monotonic()
        catch_up = now - self._caught_up >= CATCH_UP_EVERY_S
        if catch_up:
            self._caught_up = now
        for conversation, follower in list(self.followers.items()):
            if follower.last is None:
                row = conn.execute(
                    "SELECT coalesce(max(seq), 0) FROM fleet_events WHERE conversation = %s"
                    " AND written_at < to_timestamp(%s)", (conversation, follower.since),
                ).fetchone()
                follower.last = int(row[0]) if row else 0
                self._read(conn, loop, conversation, follower)
            elif catch_up and conversation not in self.fleet.held:
                self._read(conn, loop, conversation, follower)
        for conversation, follower in list(self.followers.items()):
            for replay in list(follower.replays):
                if replay.sub_id is not None and not replay.reading and self._published(replay):
                    rows, pruned = events.read_replay(conn, conversation, replay.after)
                    replay.reading = True  # not before: a failed read is tried again
                    with contextlib.suppress(RuntimeError):
                        loop.call_soon_threadsafe(self._replayed, follower, replay, rows, pruned)
        if now - self._pruned >= PRUNE_EVERY_S:
            self._pruned = now
            events.prune(conn)

    def _published(self, replay: Replay) -> bool:
        """Whether this worker's frames broadcast before the replay was asked are in the rows."""
        return self.publisher is None or self.publisher.done_count >= replay.barrier

    def _read(self, conn: Any, loop: asyncio.AbstractEventLoop, conversation: str,
              follower: Follower) -> None:
        from tether.backends.postgres import events

        if follower.last is None:
            return  # primed by `tick` first
        rows = events.read_after(conn, conversation, follower.last)
        if not rows:
            return
        follower.last = rows[-1][0]
        frames = [frame for _, worker, frame in rows if worker != self.worker]
        if frames:
            with contextlib.suppress(RuntimeError):
                loop.call_soon_threadsafe(self._relay, conversation, follower, frames)


def _note_approval(open_ids: set[str], frame: dict[str, Any]) -> None:
    """Keep `open_ids` the questions asked and not yet settled by a turn's end."""
    kind = frame.get("type")
    if kind == "control_request" and isinstance(frame.get("request_id"), str):
        open_ids.add(frame["request_id"])
    elif kind == "turn_finished":
        open_ids.clear()
