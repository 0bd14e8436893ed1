"""Permission-check throughput: `decide()` over 10,000 mixed calls against a 200-rule settings set.

Run: .venv/bin/python bench/permissions.py [--calls N] [--seed S]
Target: >= 5,000 decisions/s. Prints decisions/s cold (the shell-analysis cache cleared before
every call, so each shell command is parsed) and warm (every command already in the cache), and
the median cost of analysing one 3-segment command (tree-sitter parse alone, and parse + walk).
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from tether.core.permissions import Call, Policy, RuleSet, Scope, decide  # noqa: E402
from tether.core.permissions import shell as shell_analysis  # noqa: E402
from tether.core.permissions.rules import parse_rule  # noqa: E402

TARGET = 5_000  # decisions per second
TYPICAL = "git status --short && pytest -q tests/test_app.py 2>&1 | tail -n 20"

# What coding agents run, one simple command each; joined into 1-6 segment command lines.
SEGMENTS = [
    "git status",
    "git status --short",
    "git diff",
    "git diff --stat HEAD~1",
    "git log --oneline -10",
    "git show HEAD --stat",
    "git branch --show-current",
    "git add -A",
    "git commit -m 'fix: parser'",
    "git stash list",
    "git rev-parse HEAD",
    "ls",
    "ls -la",
    "ls src",
    "ls -R tests",
    "pwd",
    "cat README.md",
    "cat src/app.py",
    "head -n 50 src/app.py",
    "tail -n 20 build.log",
    "grep -rn TODO src",
    "grep -n 'def main' src/app.py",
    "rg -n 'class .*Error' src",
    "find . -name '*.py' -not -path './.venv/*'",
    "wc -l src/*.py",
    "sed -n '1,80p' src/app.py",
    "pytest -q",
    "pytest -x tests/test_app.py -k parse",
    "python -m pytest -q",
    "python3 -c 'print(1)'",
    "npm test",
    "npm run build",
    "npm install",
    "npm run lint -- --fix",
    "pnpm test",
    "yarn build",
    "cargo build",
    "cargo test -- --nocapture",
    "go test ./...",
    "go vet ./...",
    "make",
    "make test",
    "ruff check .",
    "ruff format --check src",
    "mypy src",
    "tsc --noEmit",
    "eslint src --ext .ts",
    "echo done",
    "echo $HOME",
    "printf '%s\\n' a b",
    "jq '.scripts' package.json",
    "sort names.txt",
    "uniq -c",
    "cut -d: -f1 /etc/passwd",
    "xargs -n1 echo",
    "timeout 60 pytest -q",
    "docker ps",
    "docker compose up -d",
    "tree -L 2",
    "du -sh .",
    "which python3",
    "uname -a",
    "date",
    "cd src",
    "cd ..",
    "mkdir -p build",
    "rm -rf build",
    "rm -f out.txt",
    "cp a.txt b.txt",
    "mv old.py new.py",
    "touch src/new.py",
    "chmod +x run.sh",
    "curl -s https://example.com",
    "wget -q https://example.com/x.tar.gz",
    "pip install -e .",
    "uv run pytest",
    "node index.js",
    "env | sort",
    "export FOO=1",
    "sudo apt-get install -y jq",
    "bash -c 'make -j4'",
    "echo hi > out.txt",
    "pytest -q > test.log 2>&1",
    "git diff > patch.diff",
    "cat $(ls *.md)",
]
OPERATORS = [" && ", " | ", "; ", " || ", " 2>&1 | ", "\n"]
FILE_TOOLS = ["Read", "Read", "Read", "Edit", "Edit", "Write", "Grep", "Glob"]


def settings_rules() -> RuleSet:
    """200 rules, shaped like a long-lived project's settings: many prefix allows, a few exact
    commands, the usual destructive denies, and file rules per source directory."""
    allow: list[str] = []
    for tool in ("git", "npm", "pnpm", "yarn", "cargo", "go", "make", "docker", "kubectl", "gh"):
        for sub in (
            "status",
            "diff",
            "log",
            "show",
            "test",
            "build",
            "run",
            "lint",
            "list",
            "view",
        ):
            allow.append(f"Bash({tool} {sub}:*)")
    allow += [
        f"Bash({c}:*)"
        for c in (
            "ls",
            "cat",
            "pytest",
            "python -m pytest",
            "ruff",
            "mypy",
            "tsc",
            "eslint",
            "uv run",
            "jq",
            "tree",
            "du",
            "node",
        )
    ]
    allow += [
        f"Bash({c})"
        for c in (
            "npm test",
            "make",
            "make test",
            "cargo build",
            "pwd",
            "date",
            "docker ps",
            "git stash list",
            "echo done",
            "uname -a",
        )
    ]
    deny = [
        f"Bash({c}:*)"
        for c in (
            "rm",
            "curl",
            "wget",
            "sudo",
            "chmod",
            "chown",
            "dd",
            "mkfs",
            "git push",
            "git reset --hard",
            "npm publish",
            "docker rm",
            "kubectl delete",
            "shutdown",
            "reboot",
        )
    ]
    ask = [
        f"Bash({c}:*)"
        for c in (
            "git commit",
            "git add",
            "pip install",
            "npm install",
            "mv",
            "cp",
            "docker compose",
        )
    ]
    files_allow = [f"{verb}(src/pkg{i}/**)" for i in range(14) for verb in ("Read", "Edit")]
    files_allow += [f"Write(build/out{i}/**)" for i in range(10)]
    files_allow += ["Read(docs/**)", "Read(tests/**)", "Edit(tests/**)", "Read(*.md)"]
    files_deny = [
        "Read(.env)",
        "Read(.env.*)",
        "Read(~/.ssh/**)",
        "Read(~/.aws/**)",
        "Read(**/*.pem)",
        "Write(.tether/**)",
        "Edit(.tether/**)",
        "Write(.git/**)",
        "Read(/etc/shadow)",
        "Edit(~/.bashrc)",
    ]
    always_ask = ["Bash(git rebase:*)", "Write(pyproject.toml)"]
    texts = {
        "allow": allow + files_allow,
        "deny": deny + files_deny,
        "ask": ask,
        "always_ask": always_ask,
    }
    total = sum(len(v) for v in texts.values())
    filler = [f"Read(src/gen{i}/**)" for i in range(200 - total)]  # pad to exactly 200
    texts["allow"] += filler
    parsed = {k: tuple(parse_rule(t) for t in v) for k, v in texts.items()}
    assert sum(len(v) for v in parsed.values()) == 200, sum(len(v) for v in parsed.values())
    return RuleSet(
        deny=parsed["deny"],
        always_ask=parsed["always_ask"],
        allow=parsed["allow"],
        ask=parsed["ask"],
    )


def workspace(root: Path) -> tuple[Path, Path]:
    cwd, home = root / "proj", root / "home"
    for d in ("src/pkg0", "src/pkg1", "tests", "docs", "build", ".git", "home/.ssh"):
        (cwd / d if not d.startswith("home") else root / d).mkdir(parents=True, exist_ok=True)
    (cwd / ".git" / "config").write_text("[core]\n\tbare = false\n")
    (cwd / "README.md").write_text("hi\n")
    (cwd / "src" / "app.py").write_text("print(1)\n")
    (cwd / ".env").write_text("SECRET=1\n")
    return cwd, home


def command_lines(rng: random.Random, count: int) -> list[str]:
    out = []
    for _ in range(count):
        parts = [rng.choice(SEGMENTS) for _ in range(rng.randint(1, 6))]
        line = parts[0]
        for part in parts[1:]:
            line += rng.choice(OPERATORS) + part
        out.append(line)
    return out


def file_paths(rng: random.Random) -> str:
    return rng.choice(
        [
            f"src/pkg{rng.randrange(25)}/mod{rng.randrange(40)}.py",
            f"tests/test_{rng.randrange(60)}.py",
            "README.md",
            "docs/guide.md",
            ".env",
            "~/.ssh/id_rsa",
            "../other/x.py",
            "/etc/hosts",
            f"build/out{rng.randrange(12)}/a.js",
            ".tether/settings.json",
            "pyproject.toml",
        ]
    )


def mixed_calls(rng: random.Random, count: int, pool: Sequence[str]) -> list[Call]:
    """~70% shell calls drawn from `pool`, the rest file-tool calls."""
    calls = []
    for _ in range(count):
        if rng.random() < 0.7:
            command = rng.choice(pool)
            calls.append(Call("Bash", {"command": command}, command=command))
        else:
            path = file_paths(rng)
            calls.append(Call(rng.choice(FILE_TOOLS), {"path": path}, paths=(path,)))
    return calls


def rate(calls: Sequence[Call], policy: Policy, before_each: Callable[[], None] | None) -> float:
    started = time.perf_counter()
    for call in calls:
        if before_each is not None:
            before_each()
        decide(call, policy)
    return len(calls) / (time.perf_counter() - started)


def median_us(fn: Callable[[], object], runs: int) -> float:
    samples = []
    for _ in range(runs):
        started = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - started)
    return statistics.median(samples) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--calls", type=int, default=10_000)
    parser.add_argument("--seed", type=int, default=7)
    args = parser.parse_args()
    rng = random.Random(args.seed)
    analyse = shell_analysis.analyse
    with tempfile.TemporaryDirectory() as scratch:
        cwd, home = workspace(Path(scratch))
        policy = Policy("standard", settings_rules(), Scope.of(cwd, home))
        # A session repeats itself: 2,000 distinct command lines (within the 4,096-entry cache).
        pool = command_lines(rng, 2_000)
        calls = mixed_calls(rng, args.calls, pool)
        shell_calls = sum(c.command is not None for c in calls)
        verdicts: dict[str, int] = {}
        for call in calls[:2_000]:
            verdict = decide(call, policy).verdict
            verdicts[verdict] = verdicts.get(verdict, 0) + 1

        cold = rate(calls, policy, analyse.cache_clear)
        analyse.cache_clear()
        rate(calls, policy, None)  # prime the cache
        before = analyse.cache_info()
        warm = rate(calls, policy, None)
        after = analyse.cache_info()
        hits = (after.hits - before.hits) / max(1, shell_calls)

        parse = shell_analysis._parser().parse
        raw = TYPICAL.encode()
        parse_us = median_us(lambda: parse(raw), 2_000)

        def analyse_cold() -> None:
            analyse.cache_clear()
            analyse(TYPICAL, cwd, home)

        analyse_us = median_us(analyse_cold, 2_000)
        typical_us = median_us(
            lambda: (
                analyse.cache_clear(),
                decide(Call("Bash", {"command": TYPICAL}, command=TYPICAL), policy),
            ),
            2_000,
        )

    print(f"python {platform.python_version()}, {os.cpu_count()} cpus, {platform.machine()}")
    print(
        f"rules: 200; calls: {len(calls)} ({shell_calls} shell from {len(pool)} distinct lines of "
        f"1-6 segments, {len(calls) - shell_calls} file); sample verdicts {verdicts}"
    )
    print(
        f"cold (cache cleared per call)  {cold:9,.0f} decisions/s   ({cold / TARGET:.2f}x target {TARGET:,})"
    )
    print(
        f"warm (all cached, {hits:.0%} hits)   {warm:9,.0f} decisions/s   ({warm / TARGET:.2f}x target {TARGET:,})"
    )
    print(f"3-segment command {TYPICAL!r}")
    print(f"  tree-sitter parse            {parse_us:7.1f} us median")
    print(f"  analyse (parse + walk)       {analyse_us:7.1f} us median")
    print(f"  decide, cache cleared        {typical_us:7.1f} us median")


if __name__ == "__main__":
    main()
