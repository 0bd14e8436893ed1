"""App Server under load: N concurrent conversations, each running M text turns against the fake
provider through the real `tether server` subprocess, measured as overhead over the provider.

Run: .venv/bin/python bench/server.py [--conversations 200] [--turns 50] [--delay 1000]
                                     [--slowloris 1000] [--soak 1000] [--profile FILE]

The fake provider (`python -m tether.testing.fake_provider --keep-alive`, its own process, so its
200 handler threads do not share the bench client's GIL) answers every request after `--delay`
ms, standing in for a model's own time; `--delay 0` answers at once. All runtimes are started
first (runtime_start builds a session synchronously, like a headless run's bootstrap), then
every conversation runs its turns back to back, the i-th starting i/N of the delay after the
first, so turns arrive spread out as independent users' do (`--burst`: all at one instant,
after which they stay in lockstep, each second's 200 answers landing together). It prints:

- the provider's time and the overhead of each turn, input → turn_finished minus the delay
  (p50 / p99 / max; it includes the loopback HTTP and the fake's own work, so it is an upper
  bound on the server's share), turns/s;
- CPU seconds per turn (user + system from /proc/<pid>/stat) of the server, the fake provider
  and the bench client, which load does not inflate the way it does wall time;
- the server's RSS sampled every `RSS_EVERY_S` against turns finished, with a least-squares
  slope in KiB per 1,000 turns (overall and over the second half, after warm-up); peak RSS.

`--profile FILE` runs the server under cProfile switched on (SIGUSR1) for the turn phase only
and off (SIGUSR2) after it, writes the stats to FILE and prints the top functions in ms per
turn (cProfile's own cost inflates them ~2x: compare CPU per turn from unprofiled runs).

Conversations the server refuses (its per-address connection cap answers 429 past
`--max-connections-per-ip`) or that stop answering (no frame for `FRAME_TIMEOUT_S`) are counted
and reported; the others still run. Nothing waits forever.

With `--soak N` it then serves N more turns (the provider now answering at once) in
conversations of `--soak-turns` turns, `SOAK_PARALLEL` open at a time, each closed when done and
released by the server at once (`--idle-release-after 0`), sampling RSS against turns served:
the slope over the second half (KiB per 1,000 turns) says whether memory is bounded by the open
conversations (≈ 0) or grows with every turn and conversation ever served.

With `--slowloris K` (security case e10) the turn phase runs a second time while K sockets from
the same address dribble a websocket handshake at one byte per 10 s: it prints the p50/p99 shift
against the first run and when the server closed those sockets (its handshake timeout).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import orjson
from websockets.asyncio.client import connect

TETHER = str(Path(sys.executable).with_name("tether"))
MODEL = "anthropic/bench"
FRAME_TIMEOUT_S = 120.0  # a conversation with no frame for this long is counted as stuck
SOAK_PARALLEL = 50
SOAK_SAMPLES = 40
RSS_EVERY_S = 0.5
# With --slowest K: (finish time, latency) of every turn, to see when the slowest ones ended.
FINISHED: list[tuple[float, float]] | None = None
TICK = os.sysconf("SC_CLK_TCK")

# socketserver's listen backlog is 5: with 200 conversations calling at once the fake provider
# (not the App Server) would drop SYNs and add 1 s / 3 s TCP retransmits to the tail.
# Its collector is off: the fake keeps every request body it was sent (~250 MB at 10,000
# turns), and a full collection over them froze all its answers at once for ~0.4 s, a stall of
# the stand-in that is not the server's (its own garbage is acyclic and freed as it goes).
FAKE = (
    "import gc, sys\nfrom tether.testing import fake_provider as f\ngc.disable()\n"
    "f._Server.request_queue_size = 1024\nsys.exit(f.main(sys.argv[1:]))\n"
)
# The server under cProfile, on for the turn phase only (SIGUSR1 on, SIGUSR2 off and dump),
# timing the event loop thread's CPU: a blocking fsync shows as the wait it is not.
PROFILED = """import cProfile, signal, sys, time
prof, out = cProfile.Profile(time.thread_time), sys.argv.pop(1)
def off(*_):
    prof.disable()
    prof.dump_stats(out + ".part")
    import os; os.replace(out + ".part", out)
signal.signal(signal.SIGUSR1, lambda *_: prof.enable())
signal.signal(signal.SIGUSR2, off)
from tether.cli.main import entry
entry()
"""


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process, all its threads."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK  # utime, stime (fields 14, 15)


def rss_kib(pid: int, key: str = "VmRSS:") -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith(key):
                return int(line.split()[1])
    return 0


def slope(points: list[tuple[float, float]]) -> float:
    """Least-squares slope of (x, y) points."""
    if len(points) < 2:
        return 0.0
    mx = statistics.mean(x for x, _ in points)
    my = statistics.mean(y for _, y in points)
    den = sum((x - mx) ** 2 for x, _ in points)
    return sum((x - mx) * (y - my) for x, y in points) / den if den else 0.0


class Refused(Exception):
    """The server would not take the connection (its per-address cap, or a closed port)."""


class Tally:
    """How the conversations of one phase ended, and the gate that starts their turns together."""

    def __init__(self, parties: int) -> None:
        self.parties = parties
        self.arrived = 0
        self.all_arrived = asyncio.Event()
        self.go = asyncio.Event()
        self.refused: list[str] = []
        self.stuck: list[str] = []

    def arrive(self) -> None:
        """A conversation is ready for its turns, or will never be (refused, failed)."""
        self.arrived += 1
        if self.arrived >= self.parties:
            self.all_arrived.set()


async def recv_until(ws: object, kind: str, **match: str) -> dict:
    while True:
        raw = await asyncio.wait_for(ws.recv(), FRAME_TIMEOUT_S)  # type: ignore[attr-defined]
        frame = orjson.loads(raw)
        if frame.get("type") == kind and all(frame.get(k) == v for k, v in match.items()):
            return frame


async def open_ws(url: str):  # noqa: ANN201 - websockets' connection type
    from websockets.exceptions import InvalidHandshake

    try:
        return await asyncio.wait_for(connect(url, max_size=None), FRAME_TIMEOUT_S)
    except InvalidHandshake as exc:  # e.g. 429 from the per-address connection cap
        raise Refused(str(exc)) from exc
    except OSError as exc:
        raise Refused(f"connect failed: {exc}") from exc


async def conversation(
    url: str,
    cwd: str,
    agent_id: str | None,
    turns: int,
    latencies: list[float],
    starts: list[float],
    tally: Tally | None = None,
    later: list[float] | None = None,
    offset_s: float = 0.0,
) -> str | None:
    """Start a runtime and run `turns` turns; returns the agent id, or None when the server
    refused the connection or stopped answering (counted in `tally`)."""
    arrived = False
    try:
        async with await open_ws(url) as ws:
            t0 = time.perf_counter()
            spec: dict = (
                {"agent_id": agent_id} if agent_id else {"create_agent": {"body": {"model": MODEL}}}
            )
            await ws.send(json.dumps(
                {"type": "runtime_start", "request_id": "s", "cwd": cwd,
                 "create_conversation": {}, **spec}
            ))  # fmt: skip
            started = await recv_until(ws, "runtime_start_response")
            assert started["success"], started
            starts.append(time.perf_counter() - t0)
            runtime = started["runtime"]
            if tally is not None:  # every runtime is up before any turn: steady-state latencies
                tally.arrive()
                arrived = True
                await tally.go.wait()
            await asyncio.sleep(offset_s)  # spread over the provider's time, as real users are
            for n in range(turns):
                rid = f"t{n}"
                t1 = time.perf_counter()
                await ws.send(json.dumps(
                    {"type": "input", "request_id": rid, "runtime": runtime,
                     "payload": {"kind": "create_message",
                                 "messages": [{"role": "user", "content": f"ping {n}"}]}}
                ))  # fmt: skip
                finished = await recv_until(ws, "turn_finished", request_id=rid)
                assert finished["stop_reason"] == "end_turn", finished
                latencies.append(time.perf_counter() - t1)
                if FINISHED is not None:
                    FINISHED.append((time.perf_counter(), latencies[-1]))
                if n and later is not None:  # the first turn also pays the prompt's compile
                    later.append(latencies[-1])
            return runtime["agent_id"]
    except Refused as exc:
        if tally is None:
            raise
        tally.refused.append(str(exc))
    except (TimeoutError, OSError) as exc:  # OSError: the connection closed under us
        if tally is None:
            raise
        tally.stuck.append(f"{type(exc).__name__}: {exc}")
    finally:
        if tally is not None and not arrived:
            tally.arrive()
    return None


HANDSHAKE = (
    b"GET /ws HTTP/1.1\r\nHost: 127.0.0.1\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
    b"Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
)


async def slow_client(host: str, port: int, closed_after: list[float], refused: list[int]) -> None:
    """One slowloris socket: a byte of the handshake every 10 s until the server gives up."""
    try:
        reader, writer = await asyncio.open_connection(host, port)
    except OSError:
        refused.append(1)
        return
    t0 = time.perf_counter()
    try:
        for i in range(len(HANDSHAKE)):
            writer.write(HANDSHAKE[i : i + 1])
            await writer.drain()
            try:
                # EOF (the server closed it) or an answer (an error status): either way, done
                await asyncio.wait_for(reader.read(1), 10)
                closed_after.append(time.perf_counter() - t0)
                return
            except TimeoutError:
                continue
    except OSError:
        closed_after.append(time.perf_counter() - t0)
    finally:
        writer.close()


class Phase:
    """One turn phase: latencies, runtime starts, wall time, CPU of each process, RSS samples."""

    def __init__(self, pids: dict[str, int]) -> None:
        self.pids = pids
        self.latencies: list[float] = []
        self.later: list[float] = []  # every turn but each conversation's first
        self.starts: list[float] = []
        self.wall = 0.0
        self.cpu: dict[str, float] = {}
        self.start_cpu = 0.0  # the server's CPU for the runtime_start phase
        self.rss: list[tuple[float, float]] = []  # (turns finished, KiB)
        self.tally = Tally(0)

    def cpu_now(self) -> dict[str, float]:
        return {"client": time.process_time()} | {k: cpu_s(p) for k, p in self.pids.items()}

    async def sample_rss(self) -> None:
        server = self.pids["server"]
        while True:
            self.rss.append((len(self.latencies), rss_kib(server)))
            await asyncio.sleep(RSS_EVERY_S)


async def drive(
    url: str, cwd: str, n: int, turns: int, pids: dict[str, int], spread_s: float = 0.0
) -> Phase:
    """Start n runtimes, then run every conversation's turns, the i-th starting after
    i/n of `spread_s`; measured as a Phase."""
    phase = Phase(pids)
    agent = await conversation(url, cwd, None, 1, [], [])  # warm-up: creates the shared agent
    before_start = cpu_s(pids["server"])
    phase.tally = tally = Tally(n)
    tasks = [
        asyncio.ensure_future(
            conversation(
                url,
                cwd,
                agent,
                turns,
                phase.latencies,
                phase.starts,
                tally,
                phase.later,
                offset_s=i * spread_s / n,
            )
        )
        for i in range(n)
    ]
    await tally.all_arrived.wait()  # each one arrives: started, refused or failed
    cpu0 = phase.cpu_now()
    phase.start_cpu = cpu0["server"] - before_start
    if "profile" in pids:
        os.kill(pids["server"], signal.SIGUSR1)
    sampler = asyncio.ensure_future(phase.sample_rss())
    tally.go.set()
    t0 = time.perf_counter()
    await asyncio.gather(*tasks)
    phase.wall = time.perf_counter() - t0
    if "profile" in pids:
        os.kill(pids["server"], signal.SIGUSR2)
    sampler.cancel()
    phase.rss.append((len(phase.latencies), rss_kib(pids["server"])))
    phase.cpu = {k: v - cpu0[k] for k, v in phase.cpu_now().items()}
    return phase


async def under_slowloris(
    url: str, cwd: str, n: int, turns: int, sockets: int, pids: dict[str, int], spread_s: float
) -> tuple[Phase, list[float], list[int]]:
    host, port = url.removeprefix("ws://").split("/")[0].rsplit(":", 1)
    closed: list[float] = []
    refused: list[int] = []
    attack = [
        asyncio.ensure_future(slow_client(host, int(port), closed, refused)) for _ in range(sockets)
    ]
    await asyncio.sleep(1.0)  # every socket is open and has sent its first byte
    phase = await drive(url, cwd, n, turns, pids, spread_s)
    await asyncio.gather(*attack)
    return phase, closed, refused


async def soak(
    url: str, cwd: str, total: int, per: int, pid: int
) -> tuple[list[tuple[float, float]], Tally]:
    """`total` turns as conversations of `per` turns each, SOAK_PARALLEL conversations at a
    time, each closed (and released by the server) when done; RSS against turns served."""
    agent = await conversation(url, cwd, None, 1, [], [])
    conversations = -(-total // per)
    tally = Tally(conversations)
    tally.go.set()  # no gate: each conversation runs its turns as soon as it has started
    samples: list[tuple[float, float]] = [(0, rss_kib(pid))]
    every = max(conversations // SOAK_SAMPLES, 1)
    done = 0
    while done < conversations:
        batch = min(SOAK_PARALLEL, conversations - done)
        await asyncio.gather(
            *(conversation(url, cwd, agent, per, [], [], tally) for _ in range(batch))
        )
        before, done = done, done + batch
        if done // every != before // every or done == conversations:
            samples.append((done * per, rss_kib(pid)))
    return samples, tally


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))] * 1000


def start_fake(delay_ms: int, rtt_ms: int, replies: int) -> tuple[subprocess.Popen[str], str]:
    proc = subprocess.Popen(
        [sys.executable, "-c", FAKE, "--keep-alive", "--idle-timeout", "60", "--rtt-ms", str(rtt_ms)],
        stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert proc.stdout is not None
    url = proc.stdout.readline().strip()
    post_script(url, [{"text": "pong", **({"delay_ms": delay_ms} if delay_ms else {})}] * replies)
    return proc, url


def post_script(url: str, script: list[dict]) -> None:
    """Give the fake provider a new script, from its first turn (POST /_script)."""
    post = urllib.request.Request(
        f"{url}/_script", data=orjson.dumps(script), headers={"content-type": "application/json"}
    )
    with urllib.request.urlopen(post, timeout=30) as answer:
        assert orjson.loads(answer.read())["ok"]


def fake_get(url: str, what: str) -> object:
    with urllib.request.urlopen(f"{url}/_{what}", timeout=60) as answer:
        return orjson.loads(answer.read())


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--conversations", type=int, default=50)
    parser.add_argument("--turns", type=int, default=5)
    parser.add_argument(
        "--delay",
        type=int,
        default=1000,
        metavar="MS",
        help="the provider's own time per response (a model stand-in); 0: at once",
    )
    parser.add_argument(
        "--burst",
        action="store_true",
        help="start every conversation's turns at the same instant (default: spread over --delay)",
    )
    parser.add_argument(
        "--slowest",
        type=int,
        default=0,
        metavar="K",
        help="print when the K slowest turns finished (seconds into the turn phase): stalls",
    )
    parser.add_argument("--slowloris", type=int, default=0, metavar="K")
    parser.add_argument(
        "--soak",
        type=int,
        default=0,
        metavar="N",
        help="then N more turns in conversations opened and closed as they go; the RSS slope",
    )
    parser.add_argument(
        "--soak-turns", type=int, default=10, metavar="T", help="turns per soak conversation"
    )
    parser.add_argument(
        "--rtt-ms",
        type=int,
        default=0,
        help="the fake provider's added round-trip delay (a hosted API stand-in)",
    )
    parser.add_argument(
        "--profile", metavar="FILE", help="cProfile the server during the turn phase; stats to FILE"
    )
    args = parser.parse_args()
    if min(args.conversations, args.turns, args.soak_turns) < 1:
        parser.error("--conversations, --turns and --soak-turns must be >= 1")
    if min(args.delay, args.rtt_ms, args.soak) < 0:
        parser.error("--delay, --rtt-ms and --soak must be >= 0")
    n, turns = args.conversations, args.turns
    global FINISHED
    FINISHED = [] if args.slowest else None
    rounds = 2 if args.slowloris else 1
    replies = (n * turns + 1) * rounds
    load = os.getloadavg()
    fake, fake_url = start_fake(args.delay, args.rtt_ms, replies)
    profile = str(Path(args.profile).resolve()) if args.profile else None
    with tempfile.TemporaryDirectory() as tmp:
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("TETHER_", "ANTHROPIC_", "OPENAI_"))
        }
        env.update(
            TETHER_HOME=str(Path(tmp) / "home"),
            ANTHROPIC_BASE_URL=fake_url,
            ANTHROPIC_API_KEY="bench",
        )
        server_argv = [
            "server", "--listen", "ws://127.0.0.1:0", "--max-queue", "64",
            # every benchmark client comes from 127.0.0.1: the per-address cap must admit them all
            "--max-connections-per-ip", str(max(64, 2 * n + 16)),
            # a soak measures memory of closed conversations: release them at once
            *(["--idle-release-after", "0"] if args.soak else []),
        ]  # fmt: skip
        argv = [sys.executable, "-c", PROFILED, profile] if profile else [TETHER]
        proc = subprocess.Popen(
            [*argv, *server_argv], env=env, cwd=tmp, stdout=subprocess.PIPE, text=True
        )
        pids = {"server": proc.pid, "fake": fake.pid, **({"profile": 1} if profile else {})}
        try:
            assert proc.stdout is not None
            url = proc.stdout.readline().strip()
            spread_s = 0.0 if args.burst else args.delay / 1000
            phase = asyncio.run(drive(url, tmp, n, turns, pids, spread_s))
            if profile:
                pids.pop("profile")
            attacked = (
                asyncio.run(under_slowloris(url, tmp, n, turns, args.slowloris, pids, spread_s))
                if args.slowloris
                else None
            )
            soaked = None
            if args.soak:  # memory, not latency: the provider answers at once from here on
                post_script(fake_url, [{"text": "pong"}] * (args.soak + args.soak_turns + 1))
                soaked = asyncio.run(soak(url, tmp, args.soak, args.soak_turns, proc.pid))
            peak = rss_kib(proc.pid, "VmHWM:") / 1024
        finally:
            try:
                proc.send_signal(signal.SIGTERM)
                code = proc.wait(timeout=60)
                stats, violations = fake_get(fake_url, "stats"), fake_get(fake_url, "violations")
            finally:  # whatever failed above, neither process outlives the bench
                for child in (proc, fake):
                    if child.poll() is None:
                        child.terminate()
                        try:
                            child.wait(timeout=10)
                        except subprocess.TimeoutExpired:
                            child.kill()
                            child.wait(timeout=10)
    print(f"machine                  {os.cpu_count()} cores; load average {load[0]:.1f} before, "
          f"{os.getloadavg()[0]:.1f} after")  # fmt: skip
    report(phase, n, turns, args.delay)
    if FINISHED:
        start = min(t - x for t, x in FINISHED)
        worst = sorted(FINISHED, key=lambda f: f[1], reverse=True)[: args.slowest]
        ends = ", ".join(f"{t - start:.1f} s ({x * 1000:.0f} ms)" for t, x in sorted(worst))
        print(f"slowest turns ended at   {ends}")
    if attacked is not None:
        hit, closed, refused = attacked
        base = phase.latencies
        p50, p99 = pct(hit.latencies, 0.5), pct(hit.latencies, 0.99)
        print(
            f"under {args.slowloris} slowloris   p50 {p50:7.1f} ms   p99 {p99:7.1f} ms   "
            f"({p50 / pct(base, 0.5):.2f}x / {p99 / pct(base, 0.99):.2f}x the run above; "
            f"{len(hit.latencies) / hit.wall:.1f} turns/s)"
        )
        if closed:
            print(
                f"slow sockets closed      {len(closed)} of {args.slowloris} by the server, after "
                f"median {statistics.median(closed):.1f} s (max {max(closed):.1f} s); "
                f"{len(refused)} refused at connect"
            )
    if soaked is not None:
        samples, soak_tally = soaked
        half = samples[len(samples) // 2 :]
        print(
            f"soak                     {samples[-1][0]:.0f} turns in conversations of "
            f"{args.soak_turns}, {SOAK_PARALLEL} at a time, each closed and released after: "
            f"RSS {samples[0][1] / 1024:.1f} -> {samples[-1][1] / 1024:.1f} MiB"
        )
        print(
            f"soak RSS slope           {slope(half) * 1000:7.1f} KiB per 1,000 turns over the "
            f"second half ({slope(samples) * 1000:.1f} overall, {len(samples)} samples)"
        )
        report_tally("soak ", soak_tally)
    print(f"server peak RSS          {peak:7.1f} MiB   (exit {code} on SIGTERM)")
    print(f"fake provider            {stats}   violations {len(violations)}")  # type: ignore[arg-type]
    if profile:
        print_profile(profile, len(phase.latencies))


def report(phase: Phase, n: int, turns: int, delay_ms: int) -> None:
    lat = phase.latencies
    total = len(lat)
    print(f"conversations            {n} concurrent, {turns} text turns each ({total} turns)")
    report_tally("", phase.tally)
    if not lat:
        print("no turn finished: nothing to measure")
        return
    over = [x - delay_ms / 1000 for x in lat]
    print(f"provider time            {delay_ms} ms per response (the fake's delay)")
    print(f"throughput               {total / phase.wall:7.1f} turns/s   (wall {phase.wall:.2f} s)")
    print(
        f"input -> turn_finished   p50 {pct(lat, 0.5):7.1f} ms   p99 {pct(lat, 0.99):7.1f} ms"
        f"   mean {statistics.mean(lat) * 1000:.1f} ms"
    )
    print(
        f"overhead over provider   p50 {pct(over, 0.5):7.1f} ms   p99 {pct(over, 0.99):7.1f} ms"
        f"   max {max(over) * 1000:.1f} ms"
    )
    if phase.later:
        later = [x - delay_ms / 1000 for x in phase.later]
        print(
            f"  after the first turn   p50 {pct(later, 0.5):7.1f} ms   p99 {pct(later, 0.99):7.1f} ms"
            f"   max {max(later) * 1000:.1f} ms   (each conversation's first turn left out)"
        )
    print(
        f"runtime_start            p50 {pct(phase.starts, 0.5):7.1f} ms   p99 "
        f"{pct(phase.starts, 0.99):7.1f} ms   server CPU {phase.start_cpu / max(n, 1) * 1000:.1f} ms each"
    )
    cpu = "   ".join(f"{k} {v / total * 1000:.2f}" for k, v in phase.cpu.items())
    print(f"CPU ms per turn          {cpu}   (server {phase.cpu['server'] / phase.wall:.2f} cores)")
    rss = phase.rss
    half = rss[len(rss) // 2 :]
    print(
        f"server RSS in turns      {rss[0][1] / 1024:.1f} -> {rss[-1][1] / 1024:.1f} MiB "
        f"({len(rss)} samples); slope {slope(rss) * 1000:.1f} KiB per 1,000 turns overall, "
        f"{slope(half) * 1000:.1f} over the second half"
    )


def print_profile(path: str, turns: int, top: int = 30) -> None:
    import pstats

    for _ in range(100):  # the server writes it on SIGUSR2
        if Path(path).exists():
            break
        time.sleep(0.1)
    rows = pstats.Stats(path).stats  # type: ignore[attr-defined]
    for key, label in ((2, "own time"), (3, "cumulative")):
        print(f"\nprofile: top {top} by {label}, ms per turn (cProfile inflates them)")
        ranked = sorted(rows.items(), key=lambda kv: kv[1][key], reverse=True)[:top]
        for (file, line, func), (_cc, calls, tt, ct, _callers) in ranked:
            where = f"{Path(file).parent.name}/{Path(file).name}:{line}" if line else file
            print(f"  {tt / turns * 1000:7.3f} {ct / turns * 1000:7.3f}  "
                  f"{calls / turns:6.1f}x  {func}  {where}")  # fmt: skip


def report_tally(label: str, tally: Tally) -> None:
    if tally.refused:
        print(
            f"{label}refused".ljust(25) + f"{len(tally.refused)} of {tally.parties} "
            f"(e.g. {tally.refused[0]}; the per-address cap is --max-connections-per-ip)"
        )
    if tally.stuck:
        print(
            f"{label}failed".ljust(25)
            + f"{len(tally.stuck)} of {tally.parties} (e.g. {tally.stuck[0]})"
        )


if __name__ == "__main__":
    main()
