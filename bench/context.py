"""Context costs: compiling the system prompt from a 200-file memory repo, and estimating the
context of a 5,000-message conversation.

Run: .venv/bin/python bench/context.py [--files 200] [--messages 5000] [--runs 7]

Prints absolute figures: a cold compile (git ls-tree + cat-file of HEAD, rendering, writing
system-prompt.json), the cache check a send pays when nothing changed, one memory-tool commit,
and the compiled prompt's size. The context estimate uses `tether.core.compaction.estimate`
when it is there (chars/4, images 1200, no usage anchor in this synthetic history); otherwise it
falls back to chars/4 over the JSON-serialised messages, and says so.
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

import orjson  # noqa: E402

from tether.backends.local.store import LocalStore  # noqa: E402
from tether.core.prompt import DEFAULT_SYSTEM, compile_system_prompt  # noqa: E402
from tether.memory.memfs import MemFS  # noqa: E402
from tether.protocol.messages import (  # noqa: E402
    AssistantMessage,
    Message,
    TextPart,
    ToolCallPart,
    ToolResultMessage,
    UserMessage,
    message_to_dict,
)
from tether.protocol.turns import ConversationRef  # noqa: E402
from tether.runtime.extensions.skills import SOURCES, discover_skills  # noqa: E402
from tether.runtime.session.prompt_cache import SystemPrompt  # noqa: E402
from tether.tools.memory import apply_memory_command  # noqa: E402

AGENT = "agent-local-bench"


def ms(seconds: float) -> str:
    return f"{seconds * 1000:.1f} ms"


def build_memory(home: Path, files: int) -> MemFS:
    """`files` Markdown files, three quarters in system/ (in the prompt), one commit."""
    memfs = MemFS.open(home, AGENT, agent_name="bench")
    in_prompt = files * 3 // 4
    for i in range(files):
        folder = "system" if i < in_prompt else "notes"
        path = memfs.root / folder / f"topic-{i:03d}.md"
        path.parent.mkdir(parents=True, exist_ok=True)
        body = f"Fact {i}: the build uses make; tests run with pytest -q; keep PRs small.\n" * 6
        path.write_text(f"---\ndescription: Notes on topic {i}\n---\nEdits: 0\n{body}")
    with memfs.writing():
        memfs.commit(["system", "notes"], f"seed {files} files")
    return memfs


def bench_prompt(files: int, runs: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp) / "home"
        cwd = Path(tmp) / "project"
        cwd.mkdir()
        t = time.perf_counter()
        memfs = build_memory(home, files)
        seeded = time.perf_counter() - t
        skills = discover_skills(home=home, cwd=cwd, sources=frozenset(SOURCES),
                                 project_trusted=False, memfs=memfs)
        base = compile_system_prompt(DEFAULT_SYSTEM, cwd=str(cwd), platform="Linux", date="2026-01-01")
        conv = ConversationRef(AGENT, "local-conv-1")
        cache_dir = Path(tmp) / "conv"

        def prompt() -> SystemPrompt:
            return SystemPrompt(base=base, cache_dir=lambda c: cache_dir, memfs=memfs, skills=skills)

        cold = []
        for _ in range(runs):
            p = prompt()
            (cache_dir / "system-prompt.json").unlink(missing_ok=True)
            t = time.perf_counter()
            text = p.resolve(conv)
            cold.append(time.perf_counter() - t)
            assert p.compilations == 1
        warm_process = []  # a new process: reads system-prompt.json
        for _ in range(runs):
            p = prompt()
            t = time.perf_counter()
            p.resolve(conv)
            warm_process.append(time.perf_counter() - t)
            assert p.compilations == 0
        p = prompt()
        p.resolve(conv)
        checks = []
        for _ in range(runs * 100):  # a send in the same process: revision check only
            t = time.perf_counter()
            p.resolve(conv)
            checks.append(time.perf_counter() - t)
        assert p.compilations == 0
        commits = []
        for i in range(runs):
            t = time.perf_counter()
            apply_memory_command(memfs, {"command": "str_replace", "reason": f"edit {i}",
                                         "path": "system/topic-000.md", "old_string": f"Edits: {i}\n",
                                         "new_string": f"Edits: {i + 1}\n"})
            commits.append(time.perf_counter() - t)
        t = time.perf_counter()
        after_edit = p.resolve(conv)
        recompile = time.perf_counter() - t
        assert p.compilations == 1 and after_edit != text

        in_prompt = files * 3 // 4
        print(f"memory repo: {files} files ({in_prompt} in system/), seeded + committed in {ms(seeded)}")
        print(f"  compiled prompt: {len(text):,} chars, ~{math.ceil(len(text) / 4):,} tokens (chars/4)")
        print(f"  cold compile (git read + render + store), median of {runs}: {ms(statistics.median(cold))}")
        print(f"  new process, cache hit (system-prompt.json), median: {ms(statistics.median(warm_process))}")
        print(f"  same process, cache hit (HEAD ref check), median of {len(checks)}: "
              f"{statistics.median(checks) * 1e6:.0f} us")
        print(f"  memory tool str_replace + commit, median of {runs}: {ms(statistics.median(commits))}")
        print(f"  recompile after that commit: {ms(recompile)}")


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
                stop_reason="requires_approval",
            )
        case _:
            return ToolResultMessage(f"letta-msg-{i}", f"call_{i - 1}", "Bash",
                                     (TextPart("1 failed, 41 passed in 0.52s\n" * 4),), False, ts)


def bench_estimate(count: int, runs: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        store = LocalStore(Path(tmp))
        agent = store.create_agent(model="anthropic/claude-test", system=DEFAULT_SYSTEM)
        conv = store.create_conversation(agent.id)
        transcript = store.transcript(agent.id, conv.id, cwd=tmp)
        messages = [sample(i) for i in range(count)]
        if messages and isinstance(messages[-1], AssistantMessage):
            messages.pop()  # end on an answered call
        transcript.append(messages)
        t = time.perf_counter()
        loaded = LocalStore(Path(tmp)).transcript(agent.id, conv.id).load()
        load_s = time.perf_counter() - t
        system = compile_system_prompt(DEFAULT_SYSTEM, cwd=tmp, platform="Linux", date="2026-01-01")
        try:
            from tether.core.compaction import estimate

            how = "tether.core.compaction.estimate (chars/4 over parts, images 1200)"

            def run() -> int:
                return estimate(system, loaded)
        except ImportError:
            how = "no estimator in tether: chars/4 over the JSON-serialised messages"

            def run() -> int:
                chars = len(system) + sum(len(orjson.dumps(message_to_dict(m))) for m in loaded)
                return math.ceil(chars / 4)

        times = []
        for _ in range(runs):
            t = time.perf_counter()
            tokens = run()
            times.append(time.perf_counter() - t)
        serialized = sum(len(orjson.dumps(message_to_dict(m))) for m in loaded)
        size = os.path.getsize(next(Path(tmp).glob("conversations/*/messages.jsonl")))
        print(f"conversation: {len(loaded):,} messages, messages.jsonl {size / 1e6:.2f} MB, loaded in {ms(load_s)}")
        print(f"  estimate: {tokens:,} tokens via {how}")
        print(f"  (for scale: chars/4 of the serialised messages = {math.ceil(serialized / 4):,})")
        print(f"  estimate time, median of {runs}: {ms(statistics.median(times))}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=200)
    parser.add_argument("--messages", type=int, default=5000)
    parser.add_argument("--runs", type=int, default=7)
    ns = parser.parse_args()
    bench_prompt(ns.files, ns.runs)
    bench_estimate(ns.messages, ns.runs)
    return 0


if __name__ == "__main__":
    sys.exit(main())
