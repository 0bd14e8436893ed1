"""The cost of trusting a folder: the digest of what would run (settings, hooks, mods, skills),
first and cached, for a folder of many skill files.

Run: .venv/bin/python bench/trust.py [--files 2000] [--runs 20]

Builds `.tether/skills/` with N files of 50 lines in a temporary folder, times
`TrustStore.trust` (every file hashed) once, then the median of `state()` over RUNS calls (the
second look reuses the hashes of files whose size and mtime did not change). Moved here from a
timed unit test (tests/runtime/test_trust_binding.py keeps the correctness half).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from tether.runtime.policy.trust import TrustStore  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=2000)
    parser.add_argument("--runs", type=int, default=20)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        folder, home = Path(tmp) / "project", Path(tmp) / "home"
        for n in range(args.files):
            path = folder / ".tether" / "skills" / f"s{n // 10}" / f"f{n % 10}.md"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(f"{n}\n" * 50)
        store = TrustStore(home)
        t0 = time.perf_counter()
        store.trust(folder)
        first = (time.perf_counter() - t0) * 1000
        cached = []
        for _ in range(args.runs):
            t0 = time.perf_counter()
            assert store.state(folder) == "trusted"
            cached.append((time.perf_counter() - t0) * 1000)
    again = statistics.median(cached)
    print(f"trust digest, {args.files} skill files: first {first:.1f} ms, "
          f"cached {again:.1f} ms (median of {args.runs}; {first / again:.0f}x)")


if __name__ == "__main__":
    main()
