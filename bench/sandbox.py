"""Cost of the shell sandbox: median wall time of `true` unsandboxed vs wrapped by wrap_command.

Run: .venv/bin/python bench/sandbox.py [--runs N]
Prints absolute medians in ms, the ratio, and the milliseconds the sandbox adds per command.
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

from tether.sandbox import format_status, probe, workspace_policy, wrap_command  # noqa: E402


def median_ms(samples: list[float]) -> float:
    return statistics.median(samples) * 1000


def time_plain(runs: int, cwd: Path, env: dict[str, str]) -> list[float]:
    samples = []
    for _ in range(runs):
        started = time.perf_counter()
        subprocess.run(["true"], cwd=cwd, env=env, check=True)
        samples.append(time.perf_counter() - started)
    return samples


def time_wrapped(runs: int, cwd: Path, tmp: Path, env: dict[str, str]) -> list[float]:
    samples = []
    for _ in range(runs):
        started = time.perf_counter()  # policy + wrapping are part of the per-command cost
        policy = workspace_policy(cwd, tmp_dir=tmp)
        with wrap_command(policy, ["true"], cwd=cwd, env=env) as wrapped:
            subprocess.run(
                wrapped.argv, cwd=cwd, env=wrapped.env, pass_fds=wrapped.pass_fds, check=True
            )
        samples.append(time.perf_counter() - started)
    return samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=200)
    runs = parser.parse_args().runs
    status = probe()
    print(format_status(status))
    if status.backend is None:
        sys.exit("no sandbox backend: nothing to measure")
    env = {k: v for k, v in os.environ.items() if k != "TETHER_SANDBOX"}
    with tempfile.TemporaryDirectory() as scratch:
        root, tmp = Path(scratch) / "ws", Path(scratch) / "tmp"
        root.mkdir()
        tmp.mkdir()
        time_wrapped(5, root, tmp, env)  # warm-up: probe, cgroup creation, page cache
        plain = median_ms(time_plain(runs, root, env))
        wrapped = median_ms(time_wrapped(runs, root, tmp, env))
    print(f"runs:        {runs}")
    print(f"unsandboxed: {plain:.2f} ms")
    print(f"sandboxed:   {wrapped:.2f} ms ({status.backend})")
    print(f"ratio:       {wrapped / plain:.1f}x")
    print(f"added:       {wrapped - plain:.2f} ms per command")


if __name__ == "__main__":
    main()
