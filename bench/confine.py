"""Cost of confining an auto-allowed command: median wrap + start overhead per command.

Run: .venv/bin/python bench/confine.py [--runs N]
For each backend here (bwrap, landlock) it times `bash -c true` spawned through
`confinement_sandbox(...).wrap` (the policy built once, as the runner does; the wrap, which on
the Landlock backend enumerates the allow-list, is timed per command) against the same
`bash -c true` unconfined, and prints the medians in ms, the ratio and the added ms, beside the
15 ms target. Wall time on a shared machine mostly measures waiting for a CPU (every layer is
another exec), so the CPU time the command's processes used (user + system, all children) is
printed too: it does not grow with the machine's load.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from tether.runtime.policy.sandboxing import confinement_sandbox  # noqa: E402

TARGET_MS = 15.0


def median_ms(samples: list[float]) -> float:
    return statistics.median(samples) * 1000


CPU: dict[str, float] = {}


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def time_plain(runs: int, cwd: Path, env: dict[str, str]) -> list[float]:
    samples = []
    cpu = children_cpu()
    for _ in range(runs):
        started = time.perf_counter()
        subprocess.run(["bash", "-c", "true"], cwd=cwd, env=env, check=True)
        samples.append(time.perf_counter() - started)
    CPU["plain"] = (children_cpu() - cpu) / runs * 1000
    return samples


def time_confined(runs: int, cwd: Path, home: Path, env: dict[str, str]) -> list[float] | None:
    sandbox = confinement_sandbox(env, {}, cwd, home, home / "tmp" / "bench")
    if sandbox is None:
        return None
    samples = []
    cpu = children_cpu()
    for _ in range(runs):
        started = time.perf_counter()
        with sandbox.wrap(["bash", "-c", "true"], cwd, env) as wrapped:
            subprocess.run(
                wrapped.argv, cwd=cwd, env=wrapped.env, pass_fds=wrapped.pass_fds, check=True
            )
        samples.append(time.perf_counter() - started)
    CPU["confined"] = (children_cpu() - cpu) / runs * 1000
    return samples


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=100)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="tether-bench-confine-") as tmp:
        root = Path(tmp)
        cwd, home = root / "project", root / "tether-home"
        cwd.mkdir()
        env = {**os.environ, "TETHER_HOME": str(home)}
        plain = median_ms(time_plain(args.runs, cwd, env))
        print(
            f"unconfined bash -c true: {plain:.2f} ms (median of {args.runs}), "
            f"{CPU['plain']:.2f} ms CPU"
        )
        for backend in ("bwrap", "landlock"):
            benv = {**env, "TETHER_SANDBOX_BACKEND": backend}
            time_confined(3, cwd, home, benv)  # warm: probe, helper build
            samples = time_confined(args.runs, cwd, home, benv)
            if samples is None:
                print(f"{backend:8}: not available here")
                continue
            confined = median_ms(samples)
            added = confined - plain
            verdict = "within" if added < TARGET_MS else "OVER"
            print(
                f"{backend:8}: {confined:.2f} ms confined, x{confined / plain:.1f}, "
                f"+{added:.2f} ms per command ({verdict} the {TARGET_MS:.0f} ms target); "
                f"CPU {CPU['confined']:.2f} ms vs {CPU['plain']:.2f} ms"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
