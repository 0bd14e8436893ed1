"""The cost of one effect checkpoint on the PostgreSQL store (issue 31): a tool call's
`record_before` and `record_after` (`backends/postgres/checkpoints.py`), each fenced by the
conversation's lease, as a fleet worker makes them, from T threads at once on one pooled
session; per call p50 / p99 / max in ms, and calls/s.

Run: .venv/bin/python bench/fleet_checkpoints.py [--calls 2000] [--threads 1,4] [--store postgresql://…]

Without `--store` it starts a throwaway cluster (`scripts/start-postgres`) and stops it after.
The calls run in worker threads (as the runtime's `asyncio.to_thread` runs them), so their
time is a turn's wait, not the event loop's."""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import fleet  # noqa: E402  (bench/fleet.py: a fresh database per run)

ROOT = Path(__file__).resolve().parents[1]


def pct(xs: list[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, int(q * len(s)))] * 1000


def run(url: str, calls: int, threads: int) -> None:
    from tether.backends.postgres.checkpoints import CheckpointShape, PgCheckpointStore
    from tether.backends.postgres.connection import PgSession
    from tether.backends.postgres.leases import ConversationLeases
    from tether.protocol.tool_calls import ToolCall, ToolReturn
    from tether.runtime.turns import checkpoints as cps

    session = PgSession(url, "bench-worker", pool_size=max(threads, 1))
    shape = CheckpointShape(cps.Checkpoint, cps.UNKNOWN_OUTCOME, cps.AlreadyCheckpointed,
                            cps.CheckpointConflict)
    store = PgCheckpointStore(session, shape)
    leases = ConversationLeases(session, 60)
    conversations = [f"agent/c{t}" for t in range(threads)]
    for c in conversations:
        assert leases.acquire(c) is not None
    before: list[float] = []
    after: list[float] = []
    lock = threading.Lock()

    def work(t: int) -> None:
        mine_b, mine_a = [], []
        for i in range(calls // threads):
            call = ToolCall(f"call-{t}-{i}", "Bash", {"command": f"echo {i}"})
            t0 = time.perf_counter()
            cp = store.record_before(conversations[t], call, "bench-worker")
            t1 = time.perf_counter()
            store.record_after(cp, ToolReturn(call.id, "Bash", f"{i}\n", False))
            t2 = time.perf_counter()
            mine_b.append(t1 - t0)
            mine_a.append(t2 - t1)
        with lock:
            before.extend(mine_b)
            after.extend(mine_a)

    workers = [threading.Thread(target=work, args=(t,)) for t in range(threads)]
    t0 = time.perf_counter()
    for w in workers:
        w.start()
    for w in workers:
        w.join()
    wall = time.perf_counter() - t0
    session.close()
    for name, xs in (("record_before", before), ("record_after", after)):
        print(f"{threads} thread(s) {name:13} n {len(xs):5}  p50 {pct(xs, 0.5):6.2f} ms"
              f"  p99 {pct(xs, 0.99):6.2f} ms  max {max(xs) * 1000:6.2f} ms")
    print(f"{threads} thread(s) {len(before) / wall:7.0f} checkpointed calls/s (before + after)")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--threads", default="1,4")
    parser.add_argument("--store", help="a PostgreSQL cluster URL (default: a throwaway one)")
    args = parser.parse_args()
    load = os.getloadavg()
    with fleet.cluster_of(args.store) as cluster:
        for threads in [int(t) for t in args.threads.split(",")]:
            run(fleet.database(cluster), args.calls, threads)
    print(f"machine   {os.cpu_count()} cores; load average {load[0]:.1f} before,"
          f" {os.getloadavg()[0]:.1f} after")


if __name__ == "__main__":
    main()
