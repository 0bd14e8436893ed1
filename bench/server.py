"""App Server under load: N concurrent conversations, each running M text turns against the fake
provider through the real `tether server` subprocess.

Run: .venv/bin/python bench/server.py [--conversations 50] [--turns 5] [--slowloris 1000]
                                     [--soak 1000]
All runtimes are started first (runtime_start builds a session synchronously, like a headless
run's bootstrap), then every conversation runs its turns at once. Prints turns/s and p50/p99 of
input → turn_finished for that phase, runtime_start p50/p99, and the server's peak RSS.

Conversations the server refuses (its per-address connection cap answers 429 past
`--max-connections-per-ip`, 64 by default) or that stop answering (no frame for
`FRAME_TIMEOUT_S`) are counted and reported; the others still run. Nothing waits forever.

With `--soak N` it then opens N conversations one after another (`SOAK_PARALLEL` at a time), runs
one turn in each and closes it, sampling the server's RSS as it goes: the least-squares slope
over the second half (KiB per conversation) says whether memory is bounded by the active
conversations (slope ≈ 0) or grows with every conversation ever opened.

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
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from websockets.asyncio.client import connect  # noqa: E402

from tether.testing import fake_provider  # noqa: E402
from tether.testing.fake_provider import FakeProvider  # noqa: E402

# socketserver's listen backlog is 5: with 50 conversations calling at once, the fake provider
# (not the App Server) would drop SYNs and add 1 s / 3 s TCP retransmits to the tail.
fake_provider._Server.request_queue_size = 256

TETHER = str(Path(sys.executable).with_name("tether"))
MODEL = "anthropic/bench"
FRAME_TIMEOUT_S = 120.0  # a conversation with no frame for this long is counted as stuck
SOAK_PARALLEL = 8
SOAK_SAMPLES = 20


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
        frame = json.loads(raw)
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
            await ws.send(
                json.dumps(
                    {
                        "type": "runtime_start",
                        "request_id": "s",
                        "cwd": cwd,
                        "create_conversation": {},
                        **spec,
                    }
                )
            )
            started = await recv_until(ws, "runtime_start_response")
            assert started["success"], started
            starts.append(time.perf_counter() - t0)
            runtime = started["runtime"]
            if tally is not None:  # every runtime is up before any turn: steady-state latencies
                tally.arrive()
                arrived = True
                await tally.go.wait()
            for n in range(turns):
                rid = f"t{n}"
                t1 = time.perf_counter()
                await ws.send(
                    json.dumps(
                        {
                            "type": "input",
                            "request_id": rid,
                            "runtime": runtime,
                            "payload": {
                                "kind": "create_message",
                                "messages": [{"role": "user", "content": f"ping {n}"}],
                            },
                        }
                    )
                )
                finished = await recv_until(ws, "turn_finished", request_id=rid)
                assert finished["stop_reason"] == "end_turn", finished
                latencies.append(time.perf_counter() - t1)
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
                if not await asyncio.wait_for(reader.read(1), 10):  # EOF: the server closed it
                    closed_after.append(time.perf_counter() - t0)
                    return
                closed_after.append(time.perf_counter() - t0)  # answered (an error status)
                return
            except TimeoutError:
                continue
    except OSError:
        closed_after.append(time.perf_counter() - t0)
    finally:
        writer.close()


async def under_slowloris(
    url: str, cwd: str, n: int, turns: int, sockets: int
) -> tuple[list[float], list[float], list[int], float]:
    host, port = url.removeprefix("ws://").split("/")[0].rsplit(":", 1)
    closed: list[float] = []
    refused: list[int] = []
    attack = [asyncio.ensure_future(slow_client(host, int(port), closed, refused)) for _ in range(sockets)]
    await asyncio.sleep(1.0)  # every socket is open and has sent its first byte
    latencies, _, wall, _tally = await drive(url, cwd, n, turns)
    await asyncio.gather(*attack)
    return latencies, closed, refused, wall


def peak_rss_mib(pid: int) -> float:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    return float("nan")


async def drive(url: str, cwd: str, n: int, turns: int) -> tuple[list[float], list[float], float, Tally]:
    """Returns turn latencies, runtime_start latencies, the wall time of the turn phase, and
    how many conversations were refused or got stuck."""
    latencies: list[float] = []
    starts: list[float] = []
    agent = await conversation(url, cwd, None, 1, [], starts)  # warm-up: creates the shared agent
    starts.clear()
    tally = Tally(n)
    tasks = [
        asyncio.ensure_future(conversation(url, cwd, agent, turns, latencies, starts, tally))
        for _ in range(n)
    ]
    await tally.all_arrived.wait()  # each one arrives: started, refused or failed
    tally.go.set()
    t0 = time.perf_counter()
    await asyncio.gather(*tasks)
    return latencies, starts, time.perf_counter() - t0, tally


def rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def slope(points: list[tuple[int, int]]) -> float:
    """Least-squares slope of (x, y) points."""
    mx = statistics.mean(x for x, _ in points)
    my = statistics.mean(y for _, y in points)
    den = sum((x - mx) ** 2 for x, _ in points)
    return sum((x - mx) * (y - my) for x, y in points) / den if den else 0.0


async def soak(url: str, cwd: str, total: int, pid: int) -> tuple[list[tuple[int, int]], Tally]:
    """Open, use once and close `total` conversations, SOAK_PARALLEL at a time; RSS samples."""
    agent = await conversation(url, cwd, None, 1, [], [])
    tally = Tally(total)
    tally.go.set()  # no gate: each conversation runs its turn as soon as it has started
    samples: list[tuple[int, int]] = [(0, rss_kib(pid))]
    every = max(total // SOAK_SAMPLES, 1)
    done = 0
    while done < total:
        batch = min(SOAK_PARALLEL, total - done)
        await asyncio.gather(
            *(conversation(url, cwd, agent, 1, [], [], tally) for _ in range(batch))
        )
        before, done = done, done + batch
        if done // every != before // every or done == total:
            samples.append((done, rss_kib(pid)))
    return samples, tally


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))] * 1000


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--conversations", type=int, default=50)
    parser.add_argument("--turns", type=int, default=5)
    parser.add_argument("--slowloris", type=int, default=0, metavar="K")
    parser.add_argument("--soak", type=int, default=0, metavar="N",
                        help="then open, use once and close N conversations; print the RSS slope")
    parser.add_argument("--rtt-ms", type=int, default=0,
                        help="the fake provider's added round-trip delay (a hosted API stand-in)")
    args = parser.parse_args()
    n, turns = args.conversations, args.turns
    rounds = 2 if args.slowloris else 1
    replies = (n * turns + 1) * rounds + (args.soak + 1 if args.soak else 0)
    with (
        tempfile.TemporaryDirectory() as tmp,
        FakeProvider([{"text": "pong"}] * replies, keep_alive=True, rtt_ms=args.rtt_ms) as fake,
    ):
        env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("TETHER_", "ANTHROPIC_", "OPENAI_"))
        }
        env.update(
            TETHER_HOME=str(Path(tmp) / "home"),
            ANTHROPIC_BASE_URL=fake.url,
            ANTHROPIC_API_KEY="bench",
        )
        proc = subprocess.Popen(
            # every benchmark client comes from 127.0.0.1: the per-address cap must admit them all
            [TETHER, "server", "--listen", "ws://127.0.0.1:0", "--max-queue", "64",
             "--max-connections-per-ip", str(max(64, 2 * n + 16)),
             # a soak measures memory of closed conversations: release them at once
             *(["--idle-release-after", "0"] if args.soak else [])],
            env=env,
            cwd=tmp,
            stdout=subprocess.PIPE,
            text=True,
        )
        try:
            assert proc.stdout is not None
            url = proc.stdout.readline().strip()
            latencies, starts, wall, tally = asyncio.run(drive(url, tmp, n, turns))
            attacked = (
                asyncio.run(under_slowloris(url, tmp, n, turns, args.slowloris))
                if args.slowloris
                else None
            )
            soaked = asyncio.run(soak(url, tmp, args.soak, proc.pid)) if args.soak else None
            rss = peak_rss_mib(proc.pid)
        finally:
            proc.send_signal(signal.SIGTERM)
            code = proc.wait(timeout=30)
    total = len(latencies)
    print(f"conversations            {n} concurrent, {turns} text turns each ({total} turns)")
    report_tally("", tally)
    if not latencies:
        print("no turn finished: nothing to measure")
        return
    print(f"throughput               {total / wall:7.1f} turns/s   (wall {wall:.2f} s)")
    print(
        f"input -> turn_finished   p50 {pct(latencies, 0.5):7.1f} ms   p99 {pct(latencies, 0.99):7.1f} ms"
        f"   mean {statistics.mean(latencies) * 1000:.1f} ms"
    )
    print(
        f"runtime_start            p50 {pct(starts, 0.5):7.1f} ms   p99 {pct(starts, 0.99):7.1f} ms"
    )
    if attacked is not None:
        hit, closed, refused, hit_wall = attacked
        p50, p99 = pct(hit, 0.5), pct(hit, 0.99)
        print(
            f"under {args.slowloris} slowloris   p50 {p50:7.1f} ms   p99 {p99:7.1f} ms   "
            f"({p50 / pct(latencies, 0.5):.2f}x / {p99 / pct(latencies, 0.99):.2f}x the run above; "
            f"{len(hit) / hit_wall:.1f} turns/s)"
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
        first, last = samples[0], samples[-1]
        print(
            f"soak                     {args.soak} conversations opened, used once, closed "
            f"({SOAK_PARALLEL} at a time): RSS {first[1] / 1024:.1f} -> {last[1] / 1024:.1f} MiB"
        )
        print(
            f"soak RSS slope           {slope(half):7.2f} KiB per conversation over the second half "
            f"({slope(samples):.2f} overall)"
        )
        report_tally("soak ", soak_tally)
    print(f"server peak RSS          {rss:7.1f} MiB   (exit {code} on SIGTERM)")
    print(f"fake provider requests   {len(fake.requests)}   violations {len(fake.violations)}")


def report_tally(label: str, tally: Tally) -> None:
    if tally.refused:
        print(
            f"{label}refused".ljust(25) + f"{len(tally.refused)} of {tally.parties} "
            f"(e.g. {tally.refused[0]}; the per-address cap is --max-connections-per-ip)"
        )
    if tally.stuck:
        print(f"{label}failed".ljust(25) + f"{len(tally.stuck)} of {tally.parties} (e.g. {tally.stuck[0]})")


if __name__ == "__main__":
    main()
