"""Connection reuse: a 10-step tool turn of the real `tether` against a TLS fake provider.

Run: .venv/bin/python bench/connections.py [--runs 5] [--rtt-ms 40] [--steps 10]

The fake provider serves https on loopback with a throwaway certificate, keeps connections
alive, and adds `--rtt-ms` per network round trip (TCP handshake, TLS handshake, each request)
to stand in for a hosted API. Each run is one headless turn of `--steps` model calls (a Read
per step, then an answer); runs alternate between the default (keep-alive) and
`TETHER_HTTP_KEEPALIVE=0` (`connection: close`, what tether did before), so both see the same
machine load. It prints, per mode, the connections, TLS handshakes (full / resumed) and requests
the server counted per turn, and the median wall time of the turn.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from tether.testing.fake_provider import FakeProvider  # noqa: E402

TETHER = str(Path(sys.executable).with_name("tether"))
MODEL = "anthropic/bench"
MODES = {"keep-alive": {}, "connection: close": {"TETHER_HTTP_KEEPALIVE": "0"}}


def script(steps: int) -> list[dict[str, object]]:
    read = {"name": "Read", "arguments": {"file_path": "notes.txt"}}
    return [{"tool_calls": [read]}] * (steps - 1) + [{"text": "read it"}]


def one_turn(fake: FakeProvider, env: dict[str, str], cwd: str) -> tuple[float, dict[str, int]]:
    before = fake.stats()
    started = time.perf_counter()
    subprocess.run(
        [TETHER, "-p", "read the notes", "--model", MODEL],
        env=env,
        cwd=cwd,
        check=True,
        stdout=subprocess.DEVNULL,
        stdin=subprocess.DEVNULL,
    )
    wall = (time.perf_counter() - started) * 1000
    after = fake.stats()
    return wall, {k: after[k] - before[k] for k in after}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=5, help="turns per mode (default 5)")
    parser.add_argument("--rtt-ms", type=float, default=40.0, help="added per round trip")
    parser.add_argument("--steps", type=int, default=10, help="model calls per turn")
    args = parser.parse_args()
    if args.runs < 1 or args.steps < 2:
        parser.error("--runs must be >= 1 and --steps >= 2")
    walls: dict[str, list[float]] = {m: [] for m in MODES}
    counts: dict[str, list[dict[str, int]]] = {m: [] for m in MODES}
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp) / "project"
        work.mkdir()
        (work / "notes.txt").write_text("the notes\n" * 20)
        base = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("TETHER_", "ANTHROPIC_", "OPENAI_", "SSL_CERT"))
        }
        base.pop("PYTHONDONTWRITEBYTECODE", None)
        base["TETHER_HOME"] = str(Path(tmp) / "home")
        turns = script(args.steps) * (2 * args.runs + 1)
        with FakeProvider(turns, keep_alive=True, tls=True, rtt_ms=args.rtt_ms) as fake:
            base.update(
                ANTHROPIC_BASE_URL=fake.url,
                ANTHROPIC_API_KEY="bench",
                SSL_CERT_FILE=str(fake.ca_file),
            )
            one_turn(fake, base, str(work))  # warm-up: bytecode, the agent, the prompt cache
            for _ in range(args.runs):
                for mode, extra in MODES.items():
                    wall, count = one_turn(fake, {**base, **extra}, str(work))
                    walls[mode].append(wall)
                    counts[mode].append(count)
    print(f"{args.steps}-step tool turn, TLS on loopback, +{args.rtt_ms:g} ms per round trip")
    print(
        f"{'mode':18} {'conns/turn':>10} {'TLS full':>9} {'resumed':>8} {'requests':>9} {'wall ms':>9}"
    )
    for mode in MODES:
        c = counts[mode]
        per = {k: statistics.mean(x[k] for x in c) for k in c[0]}
        full = per["handshakes"] - per["resumed_handshakes"]
        print(
            f"{mode:18} {per['connections']:10.1f} {full:9.1f} {per['resumed_handshakes']:8.1f} "
            f"{per['requests']:9.1f} {statistics.median(walls[mode]):9.0f}"
        )
    saved = statistics.median(walls["connection: close"]) - statistics.median(walls["keep-alive"])
    print(f"keep-alive saves {saved:.0f} ms per turn (median of {args.runs})")


if __name__ == "__main__":
    main()
