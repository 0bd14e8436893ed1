"""A fleet of App Servers on one PostgreSQL store (issue 31): N conversations spread round-robin
over 1, 2, 4 real `tether server --store …` workers (one TETHER_HOME, one database per fleet
size), each running M text turns against the fake provider answering after `--delay` ms.

Run: .venv/bin/python bench/fleet.py [--conversations 1000] [--turns 1] [--delay 1000]
                                     [--workers 1,2,4] [--store postgresql://…]
                                     [--rate N [--duration S] | --soak S --rate N]
                                     [--rotate T] [--loop-probe]

Closed loop (the default): every conversation's turns start together, so on a small machine
the overhead mostly measures the CPU queue. Open loop (`--rate N`): the conversations are opened
first, then turns arrive at N per second (round-robin over them, each conversation one turn at a
time: an arrival finding its conversation busy is counted, not queued) for `--duration` seconds;
a turn's overhead is from its scheduled arrival (so a slow client cannot hide a slow server) to
its `turn_finished`, minus the provider's delay. At a rate below the fleet's capacity this is
what the store and the server add to a turn. Every worker's RSS is sampled every
`RSS_EVERY_S` seconds in open loop; `--soak S` is an open loop of S seconds that also says
whether memory stayed flat (last sample within `FLAT_BOUND` of the first after warm-up).
`--loop-probe` (open loop) loads `bench/loop_probe.py` into every worker and prints how long
its event loop's callbacks ran and how long each store call took, on the loop or off it.

Without `--store` it starts a throwaway cluster (`scripts/start-postgres`) and stops it after.
Per fleet size it prints turns/s over the turn phase and the overhead of each turn over the
provider's time (input → turn_finished minus the delay: p50 / p99 / max), plus the store's
input states after (every input `done` once: nothing lost, nothing run twice). The turn phase
starts once every runtime is up (bench/server.py's `conversation`, reused)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

sys.path.insert(0, str(Path(__file__).resolve().parent))
import server as single  # noqa: E402  (bench/server.py: its client and fake provider helpers)

ROOT = Path(__file__).resolve().parents[1]


@contextlib.contextmanager
def cluster_of(url: str | None) -> Iterator[str]:
    """`url`, or a throwaway PostgreSQL cluster (`scripts/start-postgres`) stopped after."""
    if url is not None:
        yield url
        return
    started = subprocess.run([str(ROOT / "scripts" / "start-postgres")], capture_output=True,
                             text=True, timeout=120, check=True)
    cluster = started.stdout.strip().splitlines()[-1]
    try:
        yield cluster
    finally:
        folder = parse_qs(urlsplit(cluster).query)["host"][0]
        subprocess.run([str(ROOT / "scripts" / "start-postgres"), "--stop", folder],
                       timeout=60, check=False)


def database(cluster: str) -> str:
    import psycopg

    name = "bench_" + uuid.uuid4().hex[:10]
    with psycopg.connect(cluster, autocommit=True) as admin:
        admin.execute(f'CREATE DATABASE "{name}" TEMPLATE template0')
    parts = urlsplit(cluster)
    return f"{parts.scheme}://{parts.netloc}/{name}?{parts.query}"


def states(url: str) -> dict[str, int]:
    import psycopg

    with psycopg.connect(url) as conn:
        return {str(s): int(n) for s, n in conn.execute(
            "SELECT state, count(*) FROM inputs GROUP BY state").fetchall()}


async def turn_phase(urls: list[str], cwd: str, n: int, turns: int, spread_s: float
                     ) -> tuple[list[float], float, single.Tally]:
    latencies: list[float] = []
    starts: list[float] = []
    agent = await single.conversation(urls[0], cwd, None, 0, [], starts)  # one agent for all
    tally = single.Tally(n)
    t0 = 0.0

    async def timed() -> None:  # every runtime up: the turns start together
        nonlocal t0
        await tally.all_arrived.wait()
        t0 = time.perf_counter()
        tally.go.set()

    clock = asyncio.ensure_future(timed())
    await asyncio.gather(*(
        single.conversation(urls[i % len(urls)], cwd, agent, turns, latencies, starts, tally,
                            offset_s=spread_s * i / n)
        for i in range(n)
    ))
    await clock
    return latencies, time.perf_counter() - t0, tally


RSS_EVERY_S = 5.0
FLAT_BOUND = (1.10, 8.0)  # flat: the last RSS sample <= first (after warm-up) * 1.10 + 8 MB
RISE_BOUND = (0.05, 2.0)  # and the fitted rise after warm-up <= that sample * 0.05 + 2 MB
# A soak's warm-up: its first third. A server keeps an idle runtime for a minute
# (`--idle-release-after`) and collects released ones' cycles in batches (gc_policy), so
# with conversations rotating the live runtimes only reach their steady number after that.
WARM_UP_SHARE = 1 / 3


def rss_mb(pid: int) -> float:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return 0.0


async def open_loop(urls: list[str], cwd: str, n: int, rate: float, seconds: float,
                    pids: list[int], rotate: int = 0,
                    ) -> tuple[list[float], float, int, list[list[float]], int]:
    """Turns arriving at `rate` per second for `seconds` over `n` open conversations: each
    turn's time from its scheduled arrival to its turn_finished, the wall time, arrivals that
    found their conversation busy, each worker's RSS samples, and failed turns. With `rotate`,
    a conversation is closed after that many turns and a new one opened in its place (its
    runtime released by the server once idle), so histories stop growing."""
    import json

    starts: list[float] = []
    agent = await single.conversation(urls[0], cwd, None, 0, [], starts)
    opened: list[tuple[Any, dict[str, Any], asyncio.Lock]] = []
    async with contextlib.AsyncExitStack() as stack:
        async def start(i: int, lock: asyncio.Lock) -> tuple[Any, dict[str, Any], asyncio.Lock]:
            ws = await stack.enter_async_context(await single.open_ws(urls[i % len(urls)]))
            await ws.send(json.dumps({"type": "runtime_start", "request_id": "s", "cwd": cwd,
                                      "create_conversation": {}, "agent_id": agent}))
            started = await single.recv_until(ws, "runtime_start_response")
            assert started["success"], started
            return ws, started["runtime"], lock

        for i in range(n):
            opened.append(await start(i, asyncio.Lock()))
        done_in = [0] * n
        latencies: list[float] = []
        busy = failed = 0
        samples: list[list[float]] = [[] for _ in pids]
        stop = asyncio.Event()

        async def sample() -> None:
            while not stop.is_set():
                for i, pid in enumerate(pids):
                    samples[i].append(rss_mb(pid))
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(stop.wait(), RSS_EVERY_S)

        async def turn(k: int, due: float) -> None:
            nonlocal failed
            ws, runtime, lock = opened[k % n]
            async with lock:
                rid = f"t{k}"
                await ws.send(json.dumps({
                    "type": "input", "request_id": rid, "runtime": runtime,
                    "payload": {"kind": "create_message",
                                "messages": [{"role": "user", "content": f"ping {k}"}]}}))
                try:
                    finished = await single.recv_until(ws, "turn_finished", request_id=rid)
                except (TimeoutError, OSError):
                    failed += 1
                    return
                if finished["stop_reason"] != "end_turn":
                    failed += 1
                    return
                latencies.append(time.perf_counter() - due)
                done_in[k % n] += 1
                if rotate and done_in[k % n] % rotate == 0:
                    await ws.close()
                    opened[k % n] = await start(k % n, lock)

        sampler = asyncio.ensure_future(sample())
        tasks = []
        t0 = time.perf_counter()
        for k in range(int(rate * seconds)):
            due = t0 + k / rate
            await asyncio.sleep(max(0.0, due - time.perf_counter()))
            if opened[k % n][2].locked():
                busy += 1
                continue
            tasks.append(asyncio.ensure_future(turn(k, due)))
        await asyncio.gather(*tasks)
        wall = time.perf_counter() - t0
        stop.set()
        await sampler
    return latencies, wall, busy, samples, failed


def probe_env(env: dict[str, str], tmp: str) -> str:
    """`env` loading `bench/loop_probe.py` into the workers; the folder their figures go to."""
    site = Path(tmp) / "probe-site"
    out = Path(tmp) / "probe-out"
    site.mkdir()
    out.mkdir()
    (site / "sitecustomize.py").write_text(
        f"import sys\nsys.path.insert(0, {str(Path(__file__).resolve().parent)!r})\n"
        "import loop_probe\nloop_probe.install()\n"
    )
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(site), env.get("PYTHONPATH")]))
    env["TETHER_LOOP_PROBE_DIR"] = str(out)
    if os.environ.get("TETHER_LOOP_PROBE_TRACEMALLOC"):
        env["TETHER_LOOP_PROBE_TRACEMALLOC"] = "1"
    return str(out)


def print_probe(out: str) -> None:
    import json

    for i, path in enumerate(sorted(Path(out).glob("*.json"))):
        data = json.loads(path.read_text())
        cb = data["loop_callbacks"]
        print(f"  worker {i + 1} loop callbacks: {cb['n']} ran {cb['total_ms'] / 1000:.1f} s,"
              f" p50 {cb['p50_ms']} ms p99 {cb['p99_ms']} ms max {cb['max_ms']} ms;"
              f" by duration (ms<edge: count) {cb['buckets_ms<']}")
        for line in data.get("grew_since_warm_up", [])[:12]:
            print(f"    grew: {line}")
        for ms, at, what in data["slowest_callbacks"][:6]:
            print(f"    slow callback {ms:8.2f} ms at +{at:6.1f} s: {what}")
        for name, t in data["store_calls"].items():
            print(f"    {name:34} n {t['n']:6}  p50 {t['p50_ms']:7.2f} ms  p99 {t['p99_ms']:7.2f}"
                  f" ms  max {t['max_ms']:7.2f} ms")


def run_open(cluster: str, workers: int, n: int, rate: float, seconds: float, delay_ms: int,
             soak: bool, probe: bool = False, rotate: int = 0) -> None:
    url = database(cluster)
    fake, fake_url = single.start_fake(delay_ms, 0, int(rate * seconds) + n + 10)
    procs: list[subprocess.Popen[str]] = []
    with tempfile.TemporaryDirectory() as tmp:
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("TETHER_", "ANTHROPIC_", "OPENAI_"))}
        env.update(TETHER_HOME=str(Path(tmp) / "home"), ANTHROPIC_BASE_URL=fake_url,
                   ANTHROPIC_API_KEY="bench", TETHER_CRON="0")
        probed = probe_env(env, tmp) if probe else None
        try:
            for _ in range(workers):
                procs.append(subprocess.Popen(
                    [single.TETHER, "server", "--listen", "ws://127.0.0.1:0", "--store", url,
                     "--max-connections-per-ip", str(2 * n + 16), "--max-queue", "64"],
                    env=env, cwd=tmp, stdout=subprocess.PIPE, text=True))
            urls = [p.stdout.readline().strip() for p in procs]  # type: ignore[union-attr]
            latencies, wall, busy, samples, failed = asyncio.run(
                open_loop(urls, tmp, n, rate, seconds, [p.pid for p in procs], rotate))
        finally:
            for p in procs:
                if p.poll() is None:
                    p.send_signal(signal.SIGTERM)
                    p.wait(timeout=60)
            fake.terminate()
            fake.wait(timeout=10)
        if probed is not None:
            print_probe(probed)
    settled = states(url)
    over = [x - delay_ms / 1000 for x in latencies]
    rotated = f" (each closed after {rotate} turns, a new one opened)" if rotate else ""
    print(f"{workers} worker(s) open loop {rate:g} turns/s for {seconds:g} s over {n}"
          f" conversations{rotated}: {len(latencies)} turns ({len(latencies) / wall:.1f}/s)"
          f"   overhead p50 {single.pct(over, 0.5):7.1f} ms   p99 {single.pct(over, 0.99):7.1f} ms"
          f"   max {max(over) * 1000:7.1f} ms   busy {busy} failed {failed}   inputs {settled}")
    for i, rss in enumerate(samples):
        if not rss:
            continue
        print(f"  worker {i + 1} RSS MB: {rss_summary(rss, soak)}")


def rss_summary(rss: list[float], soak: bool) -> str:
    """One worker's RSS samples (every `RSS_EVERY_S`): first, after warm-up (the first third
    of a soak; else the second sample), every sixth of the run, last, max, the slope of a
    least-squares line through the samples after warm-up (MB/min), and for a soak the verdict:
    flat when the last sample is within `FLAT_BOUND` of the one after warm-up and that line
    rises by less than `RISE_BOUND` over the rest of the run."""
    start = int(len(rss) * WARM_UP_SHARE) if soak else min(1, len(rss) - 1)
    base, after = rss[start], rss[start:]
    marks = " ".join(f"{rss[min(len(rss) - 1, len(rss) * k // 6)]:.1f}" for k in range(1, 6))
    slope = 0.0
    if len(after) > 1:
        xs = [k * RSS_EVERY_S / 60 for k in range(len(after))]
        mx, my = sum(xs) / len(xs), sum(after) / len(after)
        slope = (sum((x - mx) * (y - my) for x, y in zip(xs, after, strict=True))
                 / sum((x - mx) ** 2 for x in xs))
    rise = slope * (len(after) - 1) * RSS_EVERY_S / 60
    flat = (rss[-1] <= base * FLAT_BOUND[0] + FLAT_BOUND[1]
            and rise <= base * RISE_BOUND[0] + RISE_BOUND[1])
    verdict = (" flat" if flat else " GREW") if soak else ""
    return (f"first {rss[0]:.1f} after warm-up {base:.1f} (sample {start + 1}), by sixths"
            f" {marks}, last {rss[-1]:.1f} max {max(rss):.1f} ({len(rss)} samples), after"
            f" warm-up {slope:+.2f} MB/min{verdict}")


def run_fleet(cluster: str, workers: int, n: int, turns: int, delay_ms: int) -> None:
    url = database(cluster)
    fake, fake_url = single.start_fake(delay_ms, 0, n * turns + 10)
    procs: list[subprocess.Popen[str]] = []
    with tempfile.TemporaryDirectory() as tmp:
        env = {k: v for k, v in os.environ.items()
               if not k.startswith(("TETHER_", "ANTHROPIC_", "OPENAI_"))}
        env.update(TETHER_HOME=str(Path(tmp) / "home"), ANTHROPIC_BASE_URL=fake_url,
                   ANTHROPIC_API_KEY="bench", TETHER_CRON="0")
        try:
            for _ in range(workers):
                procs.append(subprocess.Popen(
                    [single.TETHER, "server", "--listen", "ws://127.0.0.1:0", "--store", url,
                     "--max-connections-per-ip", str(2 * n + 16), "--max-queue", "64"],
                    env=env, cwd=tmp, stdout=subprocess.PIPE, text=True))
            urls = [p.stdout.readline().strip() for p in procs]  # type: ignore[union-attr]
            latencies, wall, tally = asyncio.run(
                turn_phase(urls, tmp, n, turns, delay_ms / 1000))
        finally:
            for p in procs:
                if p.poll() is None:
                    p.send_signal(signal.SIGTERM)
                    p.wait(timeout=60)
            fake.terminate()
            fake.wait(timeout=10)
    settled = states(url)  # after the workers stopped: their last marks committed
    over = [x - delay_ms / 1000 for x in latencies]
    print(f"{workers} worker(s)   {len(latencies)} turns in {wall:6.1f} s = "
          f"{len(latencies) / wall:6.1f} turns/s   overhead p50 {single.pct(over, 0.5):7.1f} ms"
          f"   p99 {single.pct(over, 0.99):7.1f} ms   max {max(over) * 1000:7.1f} ms   "
          f"refused {len(tally.refused)} stuck {len(tally.stuck)}   inputs {settled}")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--conversations", type=int, default=1000)
    parser.add_argument("--turns", type=int, default=1)
    parser.add_argument("--delay", type=int, default=1000, help="ms per provider answer")
    parser.add_argument("--workers", default="1,2,4", help="fleet sizes, comma-separated")
    parser.add_argument("--store", help="a PostgreSQL cluster URL (default: a throwaway one)")
    parser.add_argument("--rate", type=float, help="open loop: turns per second arriving")
    parser.add_argument("--duration", type=float, default=30.0, help="open loop: seconds")
    parser.add_argument("--soak", type=float, help="open loop of this many seconds at --rate, "
                        "RSS of each worker checked flat")
    parser.add_argument("--rotate", type=int, default=0, metavar="T",
                        help="open loop: close each conversation after T turns and open a new "
                        "one in its place (histories stop growing; default: never)")
    parser.add_argument("--loop-probe", action="store_true",
                        help="open loop: time the workers' loop callbacks and store calls")
    args = parser.parse_args()
    if args.soak is not None and args.rate is None:
        parser.error("--soak needs --rate (turns per second)")
    if args.rate is not None and (args.rate <= 0 or (args.soak or args.duration) <= 0):
        parser.error("--rate, --duration and --soak must be > 0")
    sizes = [int(w) for w in args.workers.split(",")]
    if min([args.conversations, args.turns, *sizes]) < 1:
        parser.error("--conversations, --turns and --workers must be >= 1")
    load = os.getloadavg()
    with cluster_of(args.store) as cluster:
        for workers in sizes:
            if args.rate is None:
                run_fleet(cluster, workers, args.conversations, args.turns, args.delay)
            else:
                run_open(cluster, workers, args.conversations, args.rate,
                         args.soak or args.duration, args.delay, args.soak is not None,
                         args.loop_probe, args.rotate)
    print(f"machine   {os.cpu_count()} cores; load average {load[0]:.1f} before, "
          f"{os.getloadavg()[0]:.1f} after; {args.conversations} conversations x {args.turns}"
          f" turn(s), provider {args.delay} ms per answer")


if __name__ == "__main__":
    main()
