"""A fleet worker process for the tests: the store's real code (leases, fenced writes, the
queue, NOTIFY, fires) driving one conversation, with a "turn" that only appends transcript rows.
Every step is a JSON line in `<logs>/<name>.jsonl`, which the tests read.

    python -m tests.fleet.worker URL NAME LOGS [--ttl S] [--idle-wait S] [--standby-poll S]
        [--schedule ID:FIRST_EPOCH:EVERY_S:COUNT]

An input's text "sleep:N" makes its turn last N seconds (renewing the lease as it goes);
anything else is a short turn.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from tests.fleet.support import CODEC, CONVERSATION, item
from tether.backends.postgres.connection import LeaseLost, PgSession, PgStoreUnavailable
from tether.backends.postgres.fires import ScheduleFires
from tether.backends.postgres.input_queue import PgInputQueue
from tether.backends.postgres.leases import ConversationLeases, Lease
from tether.backends.postgres.notify import InputListener


class Worker:
    def __init__(self, args: argparse.Namespace) -> None:
        self.name = args.name
        self.log_file = open(Path(args.logs) / f"{args.name}.jsonl", "a", buffering=1)  # noqa: SIM115
        self.session = PgSession(args.url, args.name)
        self.queue = PgInputQueue(self.session, CODEC)
        self.leases = ConversationLeases(self.session, ttl_s=args.ttl)
        self.fires = ScheduleFires(self.queue)
        self.listener = InputListener(args.url)
        self.idle_wait = args.idle_wait
        self.standby_poll = args.standby_poll
        self.schedule = args.schedule
        self.lease: Lease | None = None
        self.inbox = Path(args.logs) / f"{args.name}.inbox"
        self.inbox.mkdir(exist_ok=True)

    def log(self, event: str, **fields: Any) -> None:
        self.log_file.write(json.dumps({"event": event, "worker": self.name, "pid": os.getpid(),
                                        **fields}) + "\n")

    def run(self) -> None:
        self.session.open()
        self.listener.start()
        self.log("ready")
        while True:
            self.accept_dropped()
            self.fire_due()
            if self.lease is None:
                self.lease = self.leases.acquire(CONVERSATION)
                if self.lease is None:
                    self.listener.wait(self.standby_poll)
                    continue
                self.log("lease", token=self.lease.token, interrupted=list(self.lease.interrupted))
            try:
                self.serve(self.lease)
            except LeaseLost as exc:
                self.log("refused", token=self.lease.token, error=str(exc))
                self.lease = None
            except PgStoreUnavailable as exc:  # e.g. its session ended while it was stopped
                self.log("store_error", error=str(exc))  # the next fenced write decides

    def accept_dropped(self) -> None:
        """Inputs sent to this worker: files `<logs>/<name>.inbox/<item_id>` holding the text."""
        for path in sorted(self.inbox.glob("*")):
            self.queue.accept(item(path.name, path.read_text()))
            path.unlink()
            self.log("accepted", item=path.name)

    def serve(self, lease: Lease) -> None:
        pending = self.leases.queued(lease, CODEC)
        if not pending:
            self.log("waiting")
            heard = self.listener.wait(self.idle_wait)
            self.log("woken" if heard else "idle", conversations=sorted(heard))
            self.leases.renew(lease)
            return
        for stored in pending:
            self.turn(lease, stored.item_id, str(stored.messages[0].content))

    def turn(self, lease: Lease, item_id: str, text: str) -> None:
        user_id = f"user-{item_id}"
        self.leases.begin_turn(lease, item_id, {"id": user_id, "role": "user", "item": item_id}, user_id)
        self.log("turn_started", item=item_id, token=lease.token)
        seconds = float(text.split(":", 1)[1]) if text.startswith("sleep:") else 0.0
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            time.sleep(min(0.1, max(0.0, end - time.monotonic())))
            self.leases.renew(lease)
        self.leases.end_turn(lease, item_id, [{"id": f"assistant-{item_id}", "role": "assistant", "item": item_id}])
        self.log("turn_done", item=item_id, token=lease.token)

    def fire_due(self) -> None:
        if not self.schedule:
            return
        schedule_id, first, every, count = self.schedule.split(":")
        for n in range(int(count)):
            due = float(first) + n * float(every)
            if due > time.time():
                break
            at = datetime.fromtimestamp(due, UTC)
            fire = item(f"{schedule_id}-{n}", key=f"{schedule_id}:{at.isoformat()}")
            if self.fires.fire_once(schedule_id, at, fire):
                self.log("fired", schedule=schedule_id, n=n)


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(prog="tests.fleet.worker")
    parser.add_argument("url")
    parser.add_argument("name")
    parser.add_argument("logs")
    parser.add_argument("--ttl", type=float, default=30.0)
    parser.add_argument("--idle-wait", type=float, default=1.0)
    parser.add_argument("--standby-poll", type=float, default=0.1)
    parser.add_argument("--schedule", default="")
    Worker(parser.parse_args(argv)).run()


if __name__ == "__main__":
    main(sys.argv[1:])
