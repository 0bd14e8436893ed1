"""Transcript cost: loading a 100,000-entry conversation, and one fsynced append.

Run: .venv/bin/python bench/transcript.py [--entries N]
Target (issue 2): load < 1 s for 100,000 entries on the project machine.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from tether.backends.local.store import LocalStore  # noqa: E402
from tether.protocol.messages import (  # noqa: E402
    AssistantMessage,
    Message,
    TextPart,
    ToolCallPart,
    ToolResultMessage,
    Usage,
    UserMessage,
)


def sample(i: int) -> Message:
    ts = 1_700_000_000_000 + i
    match i % 3:
        case 0:
            return UserMessage(f"ui-msg-{i}", (TextPart("please fix the failing test in foo.py " * 3),), ts)
        case 1:
            return AssistantMessage(
                f"letta-msg-{i}",
                (TextPart("Looking at it. " * 5), ToolCallPart(f"call_{i}", "Bash", {"command": "pytest -q"})),
                ts, api="anthropic-messages", provider="anthropic", model="claude-test",
                usage=Usage(1200, 80), stop_reason="requires_approval",
            )
        case _:
            return ToolResultMessage(f"letta-msg-{i}", f"call_{i - 1}", "Bash", (TextPart("ok\n" * 20),), False, ts)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--entries", type=int, default=100_000)
    n = parser.parse_args().entries
    with tempfile.TemporaryDirectory() as tmp:
        store = LocalStore(Path(tmp))
        agent = store.create_agent(model="anthropic/claude-test", system="")
        conv = store.create_conversation(agent.id)
        transcript = store.transcript(agent.id, conv.id)
        batch = 5_000
        for start in range(0, n, batch):
            transcript.append([sample(i) for i in range(start, min(n, start + batch))])
        size = sum(p.stat().st_size for p in Path(tmp).rglob("messages.jsonl"))
        loads = []
        for _ in range(3):
            fresh = LocalStore(Path(tmp)).transcript(agent.id, conv.id)
            t0 = time.perf_counter()
            messages = fresh.load()
            loads.append(time.perf_counter() - t0)
        assert len(messages) == n
        appends = []
        for i in range(50):
            t0 = time.perf_counter()
            fresh.append([sample(n + i)])
            appends.append(time.perf_counter() - t0)
    load_s = statistics.median(loads)
    append_ms = statistics.median(appends) * 1000
    print(f"entries                 {n:>10,}  ({size / 1e6:.1f} MB on disk)")
    print(f"load (median of 3)      {load_s * 1000:10.1f} ms   ({load_s:.2f}x the 1 s target; {n / load_s:,.0f} entries/s)")
    print(f"append one entry        {append_ms:10.2f} ms   (one write + one fsync; median of 50)")


if __name__ == "__main__":
    main()
