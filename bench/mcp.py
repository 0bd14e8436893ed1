"""MCP start-up: what configured servers cost a headless turn, and that they start in parallel.

Run: .venv/bin/python bench/mcp.py [--runs N] [--servers K]

Reports the median wall time of one headless text turn with no MCP server configured, with one
stdio server (mcp-server-time) and with K of them, and the ratio of the K-server turn's MCP cost
to K times the one-server cost (1/K would be perfectly parallel; 1.0 sequential). On 2 cores the
servers' own Python start-up competes for the CPU, so the ideal is not reachable there.
"""

from __future__ import annotations

import argparse
import json
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


def turn_ms(servers: int, runs: int, base_env: dict[str, str], tmp: Path) -> float:
    home = tmp / f"home-{servers}"
    home.mkdir(exist_ok=True)
    config = {f"time{i}": {"command": sys.executable, "args": ["-m", "mcp_server_time"]}
              for i in range(servers)}
    (home / "settings.json").write_text(json.dumps({"mcpServers": config}))
    times = []
    with FakeProvider([{"text": "pong"}] * (runs + 1)) as fake:
        env = {**base_env, "TETHER_HOME": str(home), "ANTHROPIC_BASE_URL": fake.url,
               "ANTHROPIC_API_KEY": "bench"}
        for _ in range(runs):
            t0 = time.perf_counter()
            subprocess.run([TETHER, "-p", "ping", "--model", "anthropic/bench"], env=env, cwd=tmp,
                           check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            times.append((time.perf_counter() - t0) * 1000)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--servers", type=int, default=3)
    ns = parser.parse_args()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TETHER_", "ANTHROPIC_", "OPENAI_"))}
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    with tempfile.TemporaryDirectory() as tmp:
        none = turn_ms(0, ns.runs, env, Path(tmp))
        one = turn_ms(1, ns.runs, env, Path(tmp))
        many = turn_ms(ns.servers, ns.runs, env, Path(tmp))
    k = ns.servers
    print(f"text turn, no MCP server     {none:7.1f} ms")
    print(f"text turn, 1 stdio server    {one:7.1f} ms   (+{one - none:.1f} ms for the server)")
    print(f"text turn, {k} stdio servers   {many:7.1f} ms   (+{many - none:.1f} ms; "
          f"{(many - none) / (k * (one - none)):.2f} of {k}x one server's cost, 1/{k} = parallel)")


if __name__ == "__main__":
    main()
