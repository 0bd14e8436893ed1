"""Transcript cost: loading a 100,000-entry conversation, one fsynced append, and resuming.

Run: .venv/bin/python bench/transcript.py [--entries N] [--resume-only]
Target (issue 2): load < 1 s for 100,000 entries on the project machine.

Resume (issue 20 item 3): a fresh reader opening conversations of 100, 10,000 and 100,000 entries,
each shaped two ways: compacted (a compaction every COMPACT_EVERY entries keeping the last KEPT
messages, as the context window forces; the reader starts from the last compaction via the
resume index) and never compacted (a huge window, or compaction off: the next request carries
every message, so resuming parses them all). For both, `tether messages list --limit 20`: in
process (a fresh store, as the command does after start-up) and as the real command. Each
figure is printed with its ratio to the 100-entry one.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
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


COMPACT_EVERY = 1_000
KEPT = 20
RESUME_SIZES = (100, 10_000, 100_000)
LIST_LIMIT = 20
TETHER = str(Path(sys.executable).with_name("tether"))


@contextlib.contextmanager
def no_fsync() -> Iterator[None]:
    """Building 33,000 one-step appends with an fsync each would take minutes; only reads are
    timed, and what is on disk is the same bytes either way."""
    real = os.fsync
    os.fsync = lambda fd: None
    try:
        yield
    finally:
        os.fsync = real


def build_compacted(home: Path, n: int) -> tuple[LocalStore, str, str]:
    """A conversation of `n` entries with a compaction each time COMPACT_EVERY more have
    accumulated (the first after half that), so the tail after the last one is never empty."""
    store = LocalStore(home)
    agent = store.create_agent(model="anthropic/claude-test", system="")
    conv = store.create_conversation(agent.id)
    transcript = store.transcript(agent.id, conv.id)
    step = COMPACT_EVERY // 2
    for start in range(0, n, step):
        end = min(n, start + step)
        transcript.append([sample(i) for i in range(start, end)])
        if end % COMPACT_EVERY == step and end < n:
            view = transcript.load()
            summary = UserMessage(f"summary-{end}", (TextPart("summary of the work so far " * 20),), end)
            transcript.append_compaction(summary, summary="summary", tokens_before=150_000,
                                         first_kept_message_id=view[-KEPT].id)
    return store, agent.id, conv.id


def build_uncompacted(home: Path, n: int) -> tuple[LocalStore, str, str]:
    """A conversation of `n` entries never compacted, appended a step (one to three messages)
    at a time as a run writes it: the user's input, the model's reply with a tool call, its
    result."""
    store = LocalStore(home)
    agent = store.create_agent(model="anthropic/claude-test", system="")
    conv = store.create_conversation(agent.id)
    transcript = store.transcript(agent.id, conv.id)
    with no_fsync():
        for start in range(0, n, 3):
            transcript.append([sample(start)])
            transcript.append([sample(i) for i in range(start + 1, min(n, start + 3))])
    return store, agent.id, conv.id


def median_of(runs: int, fn: Callable[[], object]) -> float:
    times = []
    for _ in range(runs):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def time_list(home: Path, agent_id: str, conv_id: str) -> float:
    """`messages list --limit LIST_LIMIT` in process: a fresh store reading the tail."""
    def once() -> None:
        assert len(LocalStore(home).transcript(agent_id, conv_id).tail(LIST_LIMIT)) == LIST_LIMIT
    return median_of(5, once)


def time_list_command(home: Path, conv_id: str) -> float:
    """The real `tether messages list --limit LIST_LIMIT` (start-up included), median of 3."""
    env = {**os.environ, "TETHER_HOME": str(home)}
    argv = [TETHER, "messages", "list", "--conversation", conv_id, "--limit", str(LIST_LIMIT)]
    subprocess.run(argv, env=env, check=True, capture_output=True)  # warm the page cache
    return median_of(3, lambda: subprocess.run(argv, env=env, check=True, capture_output=True))


def time_resume(home: Path, agent_id: str, conv_id: str, *, index: bool) -> float:
    """Median of 5 fresh loads (a new store each time: what a new process does)."""
    sidecars = list(home.rglob("messages.jsonl.resume"))
    saved = {p: p.read_bytes() for p in sidecars}
    if not index:
        for p in sidecars:
            p.unlink()
    try:
        times = []
        for _ in range(5):
            t0 = time.perf_counter()
            LocalStore(home).transcript(agent_id, conv_id).load()
            times.append(time.perf_counter() - t0)
        return statistics.median(times)
    finally:
        for p, data in saved.items():
            p.write_bytes(data)


def resume_figures() -> None:
    shapes = (
        (f"compacted (a compaction every {COMPACT_EVERY:,} entries, {KEPT} kept)", build_compacted),
        ("never compacted (the request needs every message: resume is a full parse)",
         build_uncompacted),
    )
    for title, build in shapes:
        rows = []
        for n in RESUME_SIZES:
            with tempfile.TemporaryDirectory() as tmp:
                home = Path(tmp)
                _, agent_id, conv_id = build(home, n)
                rows.append((n, time_resume(home, agent_id, conv_id, index=True),
                             time_resume(home, agent_id, conv_id, index=False),
                             time_list(home, agent_id, conv_id), time_list_command(home, conv_id)))
        print(f"{title}; median of 5 fresh reads, ratio to the 100-entry one")
        print(f"  {'entries':>7}  {'resume':>21}  {'full read':>9}  "
              f"{f'list --limit {LIST_LIMIT}':>21}  {'the command':>17}")
        base = rows[0]
        for n, resumed, full, listed, command in rows:
            print(f"  {n:>7,}  {resumed * 1000:9.2f} ms ({resumed / base[1]:6.1f}x)  "
                  f"{full * 1000:6.1f} ms  {listed * 1000:9.2f} ms ({listed / base[3]:6.2f}x)  "
                  f"{command * 1000:6.0f} ms ({command / base[4]:4.2f}x)")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--entries", type=int, default=100_000)
    parser.add_argument("--resume-only", action="store_true")
    args = parser.parse_args()
    n = args.entries
    if args.resume_only:
        resume_figures()
        return
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
    resume_figures()


if __name__ == "__main__":
    main()
