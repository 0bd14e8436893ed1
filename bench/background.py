"""How long a `run_in_background` Bash call takes to return, beside a foreground `true`.

Run: .venv/bin/python bench/background.py [--runs 30]

The background command sleeps 5 s, so a call that waited for it would show; each task is
stopped after its call returned. Prints medians in milliseconds. Moved here from a timed unit
test (tests/tools/test_background.py keeps the behaviour: the call answers with the task id
while the command still runs).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from tether.core.tools import ToolRunContext  # noqa: E402
from tether.tools.background import BackgroundTasks  # noqa: E402
from tether.tools.bash import BashTool  # noqa: E402


async def measure(tmp: Path, runs: int) -> tuple[float, float]:
    background, foreground = [], []
    for i in range(runs):
        tasks = BackgroundTasks(tmp / f"scratch-{i}")
        ctx = ToolRunContext(cwd=tmp, tool_call_id=f"call-{i}", services={"background": tasks})
        t0 = time.perf_counter()
        result = await BashTool().run(
            {"command": "sleep 5", "description": "bench", "run_in_background": True}, ctx)
        background.append((time.perf_counter() - t0) * 1000)
        assert not result.is_error and tasks.running_count == 1, result.output
        await tasks.stop_all()
        t0 = time.perf_counter()
        await BashTool().run({"command": "true", "description": "bench"}, ctx)
        foreground.append((time.perf_counter() - t0) * 1000)
    return statistics.median(background), statistics.median(foreground)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=30)
    runs = parser.parse_args().runs
    with tempfile.TemporaryDirectory() as tmp:
        background, foreground = asyncio.run(measure(Path(tmp), runs))
    print(f"run_in_background returns in {background:.1f} ms (median of {runs}); "
          f"a foreground `true` takes {foreground:.1f} ms")


if __name__ == "__main__":
    main()
