"""Prompt caching: what a 20-step session of the real `tether` would be billed as uncached input.

Run: .venv/bin/python bench/cache.py [--steps 20] [--show-steps]

One headless turn of `--steps` model calls (a Read of a different ~3 KB file per step, then an
answer) against the fake provider, in the Anthropic Messages and OpenAI Responses dialects. The
fake provider logs every request body; this script then applies each provider's documented
caching rules to those bodies (tokens estimated as 4 characters each, from compact JSON):

Anthropic (docs "Prompt caching"): the prefix runs tools -> system -> messages, block by block;
an entry is written at each `cache_control` breakpoint whose prefix has at least 1,024 tokens;
a request reads the longest cached prefix found at a breakpoint or up to 20 blocks before one;
tokens between that hit and the last breakpoint are written (billed 1.25x), tokens after the
last breakpoint are plain input. The same bodies with only the system breakpoint (what tether
sent before) are scored beside them.

OpenAI (docs "Prompt caching"): automatic for prompts of 1,024 tokens or more; a request reads
the longest prefix an earlier request with the same `prompt_cache_key` computed, counted from
1,024 tokens in 128-token steps; the prefix runs instructions -> tools -> input items.

"Repeated" input is the prefix a step shares with the step before it; the target is that at
least 90 % of it is read from the cache from step 2 on. The 5-minute TTL is not modelled (the
session takes seconds).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from tether.testing.fake_provider import FakeProvider  # noqa: E402

TETHER = str(Path(sys.executable).with_name("tether"))
MIN_CACHEABLE = 1024
LOOKBACK_BLOCKS = 20
OPENAI_STEP = 128


@dataclass
class Step:
    total: int
    read: int
    written: int
    plain: int  # after the last breakpoint, or not cacheable
    repeated: int  # shared with the previous request


def tokens(value: Any) -> int:
    return max(1, len(json.dumps(value, separators=(",", ":"))) // 4)


def unmarked(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: unmarked(v) for k, v in value.items() if k != "cache_control"}
    if isinstance(value, list):
        return [unmarked(v) for v in value]
    return value


def chain(blocks: list[Any]) -> list[str]:
    """The hash of every prefix, one per block (what a cache entry is keyed by)."""
    out, h = [], hashlib.sha256()
    for block in blocks:
        h.update(json.dumps(unmarked(block), sort_keys=True).encode())
        out.append(h.copy().hexdigest())
    return out


def anthropic_blocks(body: dict[str, Any]) -> list[dict[str, Any]]:
    blocks = list(body.get("tools") or []) + list(body.get("system") or [])
    for message in body["messages"]:
        content = message["content"]
        if isinstance(content, str):
            content = [{"type": "text", "text": content}]
        # The role is part of what the model sees at that position.
        blocks += [{**b, "_role": message["role"]} for b in content]
    return blocks


def shared(a: list[str], b: list[str]) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


def score_anthropic(bodies: list[dict[str, Any]]) -> list[Step]:
    cache: set[str] = set()
    steps, previous = [], []
    for body in bodies:
        blocks = anthropic_blocks(body)
        sizes = [tokens(unmarked(b)) for b in blocks]
        upto = [sum(sizes[: i + 1]) for i in range(len(sizes))]
        hashes = chain(blocks)
        marks = [i for i, b in enumerate(blocks) if "cache_control" in b]
        hit = -1
        for p in marks:
            for q in range(p, max(-1, p - LOOKBACK_BLOCKS - 1), -1):
                if hashes[q] in cache:
                    hit = max(hit, q)
                    break
        read = upto[hit] if hit >= 0 else 0
        last = marks[-1] if marks else -1
        written = upto[last] - read if last > hit and upto[last] >= MIN_CACHEABLE else 0
        cache.update(hashes[p] for p in marks if upto[p] >= MIN_CACHEABLE)
        n = shared(hashes, previous)
        steps.append(
            Step(upto[-1], read, written, upto[-1] - read - written, upto[n - 1] if n else 0)
        )
        previous = hashes
    return steps


def score_openai(bodies: list[dict[str, Any]]) -> list[Step]:
    seen: dict[str, list[list[str]]] = {}
    steps, previous = [], []
    for body in bodies:
        blocks = [body.get("instructions")] + list(body.get("tools") or []) + list(body["input"])
        sizes = [tokens(b) for b in blocks]
        upto = [sum(sizes[: i + 1]) for i in range(len(sizes))]
        hashes = chain(blocks)
        group = seen.setdefault(str(body.get("prompt_cache_key")), [])
        best = max((shared(hashes, h) for h in group), default=0)
        prefix = upto[best - 1] if best else 0
        read = 0
        if upto[-1] >= MIN_CACHEABLE and prefix >= MIN_CACHEABLE:
            read = MIN_CACHEABLE + (prefix - MIN_CACHEABLE) // OPENAI_STEP * OPENAI_STEP
        group.append(hashes)
        n = shared(hashes, previous)
        steps.append(Step(upto[-1], read, 0, upto[-1] - read, upto[n - 1] if n else 0))
        previous = hashes
    return steps


def system_breakpoint_only(body: dict[str, Any]) -> dict[str, Any]:
    """The body as tether sent it before: one breakpoint, on the system prompt."""
    return {**body, "tools": unmarked(body.get("tools")), "messages": unmarked(body["messages"])}


def run_session(model: str, env_for: dict[str, str], steps: int, tmp: Path) -> list[dict[str, Any]]:
    work = tmp / f"project-{model.split('/')[0]}"
    work.mkdir()
    for n in range(steps - 1):
        lines = [f"{n:03d}.{i:03d} value={(n * 7919 + i * 104729) % 1000003}" for i in range(120)]
        (work / f"file{n}.txt").write_text("\n".join(lines) + "\n")
    script: list[dict[str, Any]] = [
        {
            "text": f"Reading file {n}.",
            "tool_calls": [{"name": "Read", "arguments": {"file_path": f"file{n}.txt"}}],
        }
        for n in range(steps - 1)
    ] + [{"text": "All files read."}]
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("TETHER_", "ANTHROPIC_", "OPENAI_"))
    }
    env["TETHER_HOME"] = str(tmp / f"home-{model.split('/')[0]}")
    with FakeProvider(script) as fake:
        env.update({k: v.replace("URL", fake.url) for k, v in env_for.items()})
        subprocess.run(
            [TETHER, "-p", "read every file", "--model", model],
            env=env,
            cwd=work,
            check=True,
            stdout=subprocess.DEVNULL,
            stdin=subprocess.DEVNULL,
        )
        if fake.violations:
            raise SystemExit(f"the fake provider refused requests: {fake.violations}")
        return [r["body"] for r in fake.requests]


def report(name: str, steps: list[Step], show: bool) -> None:
    if show:
        print(
            f"  {'step':>4} {'input':>7} {'read':>7} {'written':>8} {'plain':>6} {'repeated':>8} {'uncached':>8}"
        )
        for n, s in enumerate(steps, 1):
            print(
                f"  {n:4} {s.total:7} {s.read:7} {s.written:8} {s.plain:6} {s.repeated:8} "
                f"{(s.plain + s.written) / s.total:8.1%}"
            )
    total = sum(s.total for s in steps)
    uncached = sum(s.plain + s.written for s in steps)
    later = steps[1:]
    repeated_share = sum(s.read for s in later) / max(1, sum(s.repeated for s in later))
    worst = min((s.read / s.repeated for s in later if s.repeated), default=0.0)
    cost = sum(s.plain + 1.25 * s.written + 0.1 * s.read for s in steps) / total
    print(
        f"{name:38} uncached {uncached / total:6.1%} of {total:7} input tokens | repeated input "
        f"cached from step 2: {repeated_share:6.1%} (worst step {worst:6.1%}) | "
        f"input cost {cost:5.1%} of uncached"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--show-steps", action="store_true", help="print every step's figures")
    args = parser.parse_args()
    if args.steps < 2:
        parser.error("--steps must be at least 2")
    with tempfile.TemporaryDirectory() as tmp:
        anthropic = run_session(
            "anthropic/claude-bench",
            {"ANTHROPIC_BASE_URL": "URL", "ANTHROPIC_API_KEY": "bench"},
            args.steps,
            Path(tmp),
        )
        responses = run_session(
            "openai/gpt-bench",
            {"OPENAI_BASE_URL": "URL/v1", "OPENAI_API_KEY": "bench"},
            args.steps,
            Path(tmp),
        )
    print(
        f"{args.steps}-step session (a Read per step), request bodies logged by the fake provider"
    )
    report("Anthropic, rolling breakpoints", score_anthropic(anthropic), args.show_steps)
    single = [system_breakpoint_only(b) for b in anthropic]
    report("Anthropic, system breakpoint only", score_anthropic(single), args.show_steps)
    report("OpenAI Responses, prompt_cache_key", score_openai(responses), args.show_steps)


if __name__ == "__main__":
    main()
