"""Start-up cost: `tether --version` and one headless text turn, each beside `python -c pass`.

Run: .venv/bin/python bench/startup.py [--runs N]
Targets (issue 2): --version within 40 ms of `python -c pass`; a headless text turn < 250 ms.
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


def median_ms(cmd: list[str], runs: int, env: dict[str, str], cwd: str) -> float:
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        subprocess.run(cmd, env=env, cwd=cwd, check=True, stdout=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
        times.append((time.perf_counter() - t0) * 1000)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=15)
    runs = parser.parse_args().runs
    with tempfile.TemporaryDirectory() as tmp:
        env = {k: v for k, v in os.environ.items() if not k.startswith(("TETHER_", "ANTHROPIC_", "OPENAI_"))}
        # An installed tether has its bytecode compiled; a session with PYTHONDONTWRITEBYTECODE
        # would otherwise measure the compiler on every start.
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        subprocess.run([sys.executable, "-m", "compileall", "-q", str(Path(__file__).resolve().parents[1] / "src")],
                       check=True, stdout=subprocess.DEVNULL)
        env["TETHER_HOME"] = str(Path(tmp) / "home")
        baseline = median_ms([sys.executable, "-c", "pass"], runs, env, tmp)
        version = median_ms([TETHER, "--version"], runs, env, tmp)
        with FakeProvider([{"text": "pong"}] * (runs + 1)) as fake:
            env.update(ANTHROPIC_BASE_URL=fake.url, ANTHROPIC_API_KEY="bench")
            turn = median_ms([TETHER, "-p", "ping", "--model", "anthropic/bench"], runs, env, tmp)
    print(f"python -c pass           {baseline:7.1f} ms")
    print(f"tether --version         {version:7.1f} ms   (+{version - baseline:.1f} ms, {version / baseline:.2f}x; target +40 ms)")
    print(f"tether -p (text turn)    {turn:7.1f} ms   ({turn / baseline:.2f}x python; target < 250 ms)")


if __name__ == "__main__":
    main()
