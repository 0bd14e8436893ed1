"""Subagent costs: time from spawning a child `tether` to its first stream-json event (target
< 400 ms), the whole foreground round trip, and N concurrent background children completing.

Run: .venv/bin/python bench/subagents.py [--runs 7] [--concurrent 8]
Prints absolute milliseconds (medians over the runs). Children are real `python -m tether`
processes against the loopback fake provider, in a temporary TETHER_HOME. Children get a
bytecode cache (PYTHONPYCACHEPREFIX in the temp dir, warmed by one uncounted run), as an
installed tether has; `--no-bytecode` measures them compiling every module each start instead
(what PYTHONDONTWRITEBYTECODE=1 in a source checkout costs).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from tether.runtime.agents.subagents import ParentScope, Subagents, discover_types  # noqa: E402
from tether.testing.fake_provider import FakeProvider  # noqa: E402

MODEL = "anthropic/claude-test"
TARGET_FIRST_EVENT_MS = 400


def service(home: Path, cwd: Path) -> Subagents:
    scope = ParentScope("agent-bench-parent", "default", MODEL, cwd, tether_home=home)
    types = discover_types(home, cwd, project_trusted=False)
    return Subagents(scope, types, home / "tmp" / "bench", task_log=home / "tasks.jsonl")


async def foreground(subagents: Subagents) -> tuple[float, float]:
    args = {
        "description": "bench",
        "prompt": "hi",
        "subagent_type": "general-purpose",
        "run_in_background": False,
    }
    started = time.time()
    result = await subagents.launch(args, asyncio.Event())
    if result.is_error:
        raise SystemExit(f"child failed: {result.output}")
    task = subagents.tasks()[-1]
    assert task.first_event_at is not None
    return (task.first_event_at - started) * 1000, (time.time() - started) * 1000


async def concurrent(subagents: Subagents, n: int) -> tuple[float, list[float]]:
    args = {"description": "bench", "prompt": "hi", "subagent_type": "general-purpose"}
    started = time.time()
    launched = [await subagents.launch(args, asyncio.Event()) for _ in range(n)]
    if any(r.is_error for r in launched):
        raise SystemExit(f"launch failed: {[r.output for r in launched if r.is_error]}")
    mine = subagents.tasks()[-n:]
    await asyncio.gather(*(subagents.wait(t.id) for t in mine))
    failed = [t.error for t in mine if t.error is not None]
    if failed:
        raise SystemExit(f"children failed: {failed}")
    return (time.time() - started) * 1000, [t.duration_ms for t in mine]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--concurrent", type=int, default=8)
    parser.add_argument("--no-bytecode", action="store_true")
    opts = parser.parse_args()
    turns = [{"text": "ok"}] * (opts.runs + opts.concurrent + 1)
    with tempfile.TemporaryDirectory() as tmp, FakeProvider(turns) as fake:
        home, cwd = Path(tmp) / "home", Path(tmp) / "work"
        cwd.mkdir()
        for key in [k for k in os.environ if k.startswith(("TETHER_", "ANTHROPIC_", "OPENAI_"))]:
            del os.environ[key]
        os.environ.update(
            TETHER_HOME=str(home),
            HOME=tmp,
            ANTHROPIC_BASE_URL=fake.url,
            ANTHROPIC_API_KEY="sk-bench",
        )
        if opts.no_bytecode:
            os.environ["PYTHONDONTWRITEBYTECODE"] = "1"
        else:
            os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
            os.environ["PYTHONPYCACHEPREFIX"] = str(Path(tmp) / "pycache")
        subagents = service(home, cwd)
        asyncio.run(foreground(subagents))  # warm-up: bytecode cache, page cache
        firsts, totals = [], []
        for _ in range(opts.runs):
            first, total = asyncio.run(foreground(subagents))
            firsts.append(first)
            totals.append(total)
        wall, each = asyncio.run(concurrent(subagents, opts.concurrent))
    first_ms = statistics.median(firsts)
    verdict = "ok" if first_ms < TARGET_FIRST_EVENT_MS else "OVER TARGET"
    print(f"bytecode cache: {'off' if opts.no_bytecode else 'on'}")
    print(
        f"spawn → first child event: median {first_ms:.0f} ms over {opts.runs} runs "
        f"(min {min(firsts):.0f}, max {max(firsts):.0f}; target < {TARGET_FIRST_EVENT_MS} ms: {verdict})"
    )
    print(
        f"foreground subagent round trip (spawn → report): median {statistics.median(totals):.0f} ms"
    )
    print(
        f"{opts.concurrent} concurrent background children: all completed in {wall:.0f} ms "
        f"(each {min(each)}–{max(each)} ms, median {statistics.median(each):.0f} ms)"
    )


if __name__ == "__main__":
    main()
