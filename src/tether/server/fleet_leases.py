"""Which worker of a fleet runs a conversation (`tether server --store`): the one holding its
lease (`backends/postgres/leases.py`). A worker takes a conversation's lease at its first input
(or when its holder died or stopped renewing) and keeps it, renewed by the worker's one
`LeaseKeeper` thread (every held lease in one statement), while the conversation has a runtime
here: once it has had none for `UNUSED_LEASE_S` (released when idle, `idle_release.py`), the
lease is given up, with what this worker remembered of it, so a worker's memory and renewal
round follow its active conversations, not every one it ever ran. An input accepted by any
other worker is only recorded, and its commit's NOTIFY wakes the holder (the listener thread
here), which takes it from the queue and runs it once; with no holder, whichever worker accepts
the next input takes the lease, or the sweep does. A lost
lease (this worker was stopped past its ttl and another took over) aborts the conversation's
runtime here: its queue marks are refused (`NotOwner`), its checkpoint writes fenced.

The sweep (at start, then every second) takes the leases of conversations with unfinished inputs
and no live holder; taking one settles the dead holder's inputs (started → interrupted, queued →
this worker's), which `durable_inputs.resume_stored` then resumes as a restart would, the
interrupted ones reported to every worker's clients as a `turn_finished` with the error.
What a turn broadcasts reaches other workers' clients through `fleet_events.py`. Store calls run
on the listener and keeper threads or in worker threads, never on the event loop, except taking
a lease in `holds` (its synchronous callers) and giving the leases up in `stop` (`stop_async`
does that in a worker thread)."""

from __future__ import annotations

import asyncio
import contextlib
import sys
import threading
import time
from typing import TYPE_CHECKING, Any

from tether.errors import TetherError

if TYPE_CHECKING:
    from tether.server.app_server import AppServer
    from tether.server.runtime import ConversationRuntime

SWEEP_EVERY_S = 1.0
LISTEN_WAIT_S = 0.2  # also how soon a new follower is primed (fleet_events.FleetEvents.tick)
# Item ids remembered per conversation: far more than any inbox holds, and an older one's state
# left `queued` long ago (marks commit in order), so a wake-up never finds it again.
SEEN_MAX = 4096
# A held lease whose conversation has had no runtime here this long is given up: longer than a
# runtime takes to build after its lease was taken for it (the first input, a takeover).
UNUSED_LEASE_S = 5.0


class FleetLeases:
    """This worker's conversation leases and what follows from them; used on the event loop,
    except the listener and keeper threads, which only schedule work onto it."""

    def __init__(self, session: Any, queue: Any, url: str, ttl_s: float) -> None:
        from tether.backends.postgres.leases import ConversationLeases

        self.leases = ConversationLeases(session, ttl_s)
        self.queue = queue
        self.url = url
        self.held: dict[str, Any] = {}  # conversation -> Lease
        from tether.backends.postgres.keeper import LeaseKeeper

        self.keeper = LeaseKeeper(self.leases)  # started with the first lease kept
        # Item ids put into a runtime here, per conversation, oldest first (SEEN_MAX kept).
        self.seen: dict[str, dict[str, None]] = {}
        self._unused: dict[str, float] = {}  # held, no runtime here since (monotonic)
        # Given up, the release maybe not yet committed: taking one again takes a new token.
        self._releasing: set[str] = set()
        self.server: AppServer | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._stop = threading.Event()
        self._listener: threading.Thread | None = None
        from tether.server.fleet_events import FleetEvents

        self.events = FleetEvents(self, url, session.worker)

    # --- the lease of one conversation ----------------------------------------------------------

    def holds(self, conversation: str) -> bool:
        """True when this worker holds (or could take now) the conversation's lease."""
        if conversation in self.held:
            return True
        try:
            lease = self.leases.acquire(conversation, conversation in self._releasing)
        except TetherError as exc:
            sys.stderr.write(f"tether: {conversation}: cannot take its lease: {exc}\n")
            return False
        if lease is None:
            return False
        self._keep(lease)
        if self.server is not None:  # what others recorded before (or a dead holder left)
            asyncio.get_running_loop().call_soon(self._adopt, conversation, lease)
        return True

    async def holds_async(self, conversation: str) -> bool:
        """`holds`, with the lease taken in a worker thread, off the event loop."""
        if conversation in self.held:
            return True
        anew = conversation in self._releasing

        def take() -> tuple[Any, list[Any] | None]:
            lease = self.leases.acquire(conversation, anew)
            return lease, (None if lease is None else self._left(conversation))

        try:
            lease, left = await asyncio.to_thread(take)
        except TetherError as exc:
            sys.stderr.write(f"tether: {conversation}: cannot take its lease: {exc}\n")
            return False
        if lease is None:
            return False
        if conversation in self.held:  # taken meanwhile by another input's await
            return True
        self._keep(lease)
        if self.server is not None and left is not None:
            asyncio.get_running_loop().call_soon(self._adopt, conversation, lease, left)
        return True

    def _keep(self, lease: Any) -> None:
        self.held[lease.conversation] = lease
        loop = self._loop

        def lost(why: str) -> None:
            if loop is not None and not loop.is_closed():
                loop.call_soon_threadsafe(self._lost, lease.conversation, lease.token, why)

        self.keeper.keep(lease, lost)
        if not self.keeper.started and not self._stop.is_set():
            self.keeper.start()

    def _lost(self, conversation: str, token: int, why: str) -> None:
        """Another worker runs the conversation now: stop running it here (on the loop, with no
        store work: the keeper has stopped renewing it already)."""
        lease = self.held.get(conversation)
        if lease is None or lease.token != token:
            return
        self._forget(conversation)
        sys.stderr.write(f"tether: {conversation}: lease lost, its runtime here stops: {why}\n")
        rt = self._runtime(conversation)
        if rt is not None and self.server is not None:
            self.server.runtimes.pop(rt.scope, None)
            self.server._hold(asyncio.ensure_future(rt.close(timeout=1.0)))

    def _forget(self, conversation: str) -> None:
        del self.held[conversation]
        self.seen.pop(conversation, None)
        self._unused.pop(conversation, None)

    def _unused_leases(self, now: float) -> list[Any]:
        """On the loop: the held leases whose conversation has had no runtime here for
        `UNUSED_LEASE_S`, forgotten here (to be released off the loop)."""
        from tether.server.durable_inputs import conversation_key

        if self.server is None:
            return []
        running = {conversation_key(rt.scope) for rt in self.server.runtimes.values()}
        for conversation in [c for c in self._unused if c not in self.held or c in running]:
            del self._unused[conversation]
        unused = []
        for conversation, lease in self.held.items():
            if conversation not in running and \
                    now - self._unused.setdefault(conversation, now) >= UNUSED_LEASE_S:
                unused.append(lease)
        for lease in unused:
            self._forget(lease.conversation)
            self._releasing.add(lease.conversation)
        return unused

    def _release(self, leases: list[Any]) -> None:
        """Off the loop: stop renewing the leases (each only while it is still the kept one:
        taken anew meanwhile, it is another token) and give them up."""
        for lease in leases:
            self.keeper.drop(lease.conversation, lease.token)
        try:
            self.leases.release_all(leases)
        except TetherError as exc:  # they expire in a ttl; the keeper renews them no more
            sys.stderr.write(f"tether: cannot give up {len(leases)} idle lease(s): {exc}\n")

    def note(self, conversation: str, item_id: str) -> None:
        self._saw(conversation, [item_id])

    def _saw(self, conversation: str, item_ids: list[str]) -> None:
        seen = self.seen.setdefault(conversation, {})
        for item_id in item_ids:
            seen[item_id] = None
        while len(seen) > SEEN_MAX:
            del seen[next(iter(seen))]

    # --- inputs recorded elsewhere ----------------------------------------------------------------

    def _runtime(self, conversation: str) -> ConversationRuntime | None:
        from tether.server.durable_inputs import conversation_key

        if self.server is None:
            return None
        for rt in self.server.runtimes.values():
            if conversation_key(rt.scope) == conversation:
                return rt
        return None

    def pull(self, conversation: str) -> None:
        """Run what other workers recorded for a conversation this worker holds (reading them
        here: tests and callers off the loop)."""
        lease = self.held.get(conversation)
        if lease is None or self.server is None:
            return
        try:
            stored = self.leases.queued(lease, self.queue.codec)
        except TetherError as exc:
            sys.stderr.write(f"tether: {conversation}: cannot take its inputs: {exc}\n")
            return
        self._run_pulled(conversation, lease, stored)

    def _pulled(self, conversation: str) -> tuple[Any, list[Any]] | None:
        """On the listener's thread: the inputs waiting for a conversation this worker holds."""
        lease = self.held.get(conversation)
        if lease is None:
            return None
        try:
            return lease, self.leases.queued(lease, self.queue.codec)
        except TetherError as exc:
            sys.stderr.write(f"tether: {conversation}: cannot take its inputs: {exc}\n")
            return None

    def _run_pulled(self, conversation: str, lease: Any, stored: list[Any]) -> None:
        """On the loop: put what `_pulled` read into the conversation's inbox (once each)."""
        from tether.server.durable_inputs import item_of, resume_stored, watch_unattended

        if self.server is None or self.held.get(conversation) is not lease:
            return
        seen = self.seen.get(conversation, {})
        new = [s for s in stored if s.item_id not in seen]
        if not new:
            return
        rt = self._runtime(conversation)
        if rt is None:  # released here (idle): rebuilt as a restart would
            resume_stored(self.server, new)
        else:
            for s in new:
                rt.inbox.put(item_of(s))
                watch_unattended(rt, s)
        self._saw(conversation, [s.item_id for s in new])

    def _adopt(self, conversation: str, lease: Any, left: list[Any] | None = None) -> None:
        """Resume what the conversation's previous holder left (queued, or started: reported
        to every worker's clients); `left` as read off the loop, or read here."""
        from tether.server.durable_inputs import resume_stored

        if self.server is None:
            return
        if left is None:
            left = self._left(conversation)
            if left is None:
                return
        seen = self.seen.get(conversation, {})
        left = [s for s in left if s.item_id not in seen
                and (s.state == "queued" or s.item_id in lease.interrupted)]
        if left:
            resume_stored(self.server, left)
            self._saw(conversation, [s.item_id for s in left])
            self._report_interrupted(conversation, lease)

    def _left(self, conversation: str) -> list[Any] | None:
        try:
            return list(self.queue.of_conversation(conversation, ("queued", "interrupted")))
        except TetherError as exc:
            sys.stderr.write(f"tether: {conversation}: cannot read its inputs: {exc}\n")
            return None

    def _report_interrupted(self, conversation: str, lease: Any) -> None:
        """The turns a dead holder began end here, for every client: interrupted, not re-run."""
        from tether.server.v2_frames import TurnFinished

        rt = self._runtime(conversation)
        if rt is None:
            return
        for gone in rt.interrupted:
            if gone.queue_item_id in lease.interrupted:
                rt.broadcast(rt.stream.turn_finished(TurnFinished(
                    f"turn-interrupted-{gone.queue_item_id}", "error", (), gone.request_id,
                    gone.reason,
                )))

    def sweep_once(self) -> None:
        self._took(self._take_orphaned())

    def _take_orphaned(self) -> list[tuple[Any, list[Any] | None]]:
        """The store's side of a sweep (on any thread): leases taken, with what each left."""
        try:
            orphaned = self.leases.orphaned()
        except TetherError as exc:
            sys.stderr.write(f"tether: fleet sweep: {exc}\n")
            return []
        taken = []
        for conversation in orphaned:
            if conversation in self.held:
                continue
            try:
                lease = self.leases.acquire(conversation)
            except TetherError as exc:
                sys.stderr.write(f"tether: fleet sweep: {exc}\n")
                continue
            if lease is not None:
                taken.append((lease, self._left(conversation)))
        return taken

    def _took(self, taken: list[tuple[Any, list[Any] | None]]) -> None:
        """The loop's side of a sweep: keep each lease taken, resume what it brought."""
        for lease, left in taken:
            if lease.conversation in self.held:
                continue
            self._keep(lease)
            if left is not None:
                self._adopt(lease.conversation, lease, left)

    # --- the worker's life ------------------------------------------------------------------------

    def start(self, server: AppServer) -> None:
        """Sweep once now (before the server listens), then listen and sweep in the background."""
        self.server = server
        self._loop = asyncio.get_running_loop()
        self.sweep_once()
        self.events.start()
        self._listener = threading.Thread(target=self._listen, name="fleet-listener", daemon=True)
        self._listener.start()
        server._hold(asyncio.ensure_future(self._sweeping()))

    async def _sweeping(self) -> None:
        while True:
            await asyncio.sleep(SWEEP_EVERY_S)
            self._took(await asyncio.to_thread(self._take_orphaned))
            unused = self._unused_leases(time.monotonic())
            if unused:
                try:
                    await asyncio.to_thread(self._release, unused)
                finally:
                    self._releasing.difference_update(lease.conversation for lease in unused)

    def _listen(self) -> None:
        from tether.backends.postgres.events import COMMANDS_CHANNEL, EVENTS_CHANNEL
        from tether.backends.postgres.input_queue import INPUTS_CHANNEL
        from tether.backends.postgres.notify import FleetListener

        listener = FleetListener(self.url, (INPUTS_CHANNEL, EVENTS_CHANNEL, COMMANDS_CHANNEL))
        loop = self._loop
        assert loop is not None
        while not self._stop.is_set():
            try:
                heard = listener.heard(LISTEN_WAIT_S)
                conn = listener.conn
                for channel, payload in dict.fromkeys(heard):  # each once, in order
                    if channel == INPUTS_CHANNEL:
                        pulled = self._pulled(payload)
                        if pulled is not None:
                            with contextlib.suppress(RuntimeError):  # the loop closed: stopping
                                loop.call_soon_threadsafe(self._run_pulled, payload, *pulled)
                    elif channel == EVENTS_CHANNEL:
                        conversation, _, worker = payload.partition("\t")
                        self.events.heard_events(conn, loop, conversation, worker)
                    elif channel == COMMANDS_CHANNEL:
                        self.events.heard_commands(conn, loop, payload)
                self.events.tick(conn, loop)
            except Exception as exc:  # the database is away: the sweep and catch-up follow
                if not isinstance(exc, TetherError):
                    import psycopg

                    if not isinstance(exc, psycopg.Error):
                        raise
                listener.close()
                self._stop.wait(0.5)
        listener.close()

    def stop(self) -> None:
        """Stop listening and renewing; give the leases up, so another worker takes them now
        (one round trip, on the calling thread: `stop_async` on the event loop)."""
        self._stop_listening()
        self._give_up(self._forget_held())
        self._join_listener()

    async def stop_async(self) -> None:
        """`stop`, its store work (the keeper's last round, the release) in a worker thread."""
        self._stop_listening()
        await asyncio.to_thread(self._give_up, self._forget_held())
        await asyncio.to_thread(self._join_listener)

    def _stop_listening(self) -> None:
        self._stop.set()
        self.events.stop()

    def _forget_held(self) -> list[Any]:
        held = list(self.held.values())
        self.held.clear()
        return held

    def _give_up(self, held: list[Any]) -> None:
        """The keeper stopped first (no renewal after the release), then every lease released."""
        self.keeper.stop()
        with contextlib.suppress(TetherError):
            self.leases.release_all(held)

    def _join_listener(self) -> None:
        if self._listener is not None:
            self._listener.join(2)
