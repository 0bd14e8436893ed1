"""Grep and Glob on a generated 10k-file project with a `node_modules` folder, beside `rg` and
`grep -r` in the same run.

Run: .venv/bin/python bench/search.py [--files 10000] [--runs 5]
The tree: `src/` and `tests/` source files, a `.gitignore` naming `node_modules/` and `dist/`,
and half the files under those ignored folders (as in a Node project). Prints the median wall
time of each tool call (the tool's own code, as the turn engine runs it) and of the same search
by `rg` and `grep -r`, their ratios, and how many ignored files each answer returned (should be
0 for the tools).
"""

from __future__ import annotations

import argparse
import asyncio
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from tether.core.tools import ToolRunContext  # noqa: E402
from tether.tools.search import GlobTool, GrepTool  # noqa: E402

WORDS = ["alpha", "beta", "gamma", "delta", "render", "props", "state", "fetch", "import", "const"]
IGNORED = ("node_modules/", "dist/")


def make_tree(root: Path, files: int, seed: int = 7) -> None:
    rng = random.Random(seed)
    (root / ".gitignore").write_text("node_modules/\ndist/\n")
    for index in range(files):
        if index % 2:
            top = rng.choice([f"node_modules/pkg{index % 97}", f"dist/chunk{index % 13}"])
        else:
            top = rng.choice(["src/components", "src/lib", "tests", "src/util/deep/er"])
        folder = root / top
        folder.mkdir(parents=True, exist_ok=True)
        lines = [" ".join(rng.choice(WORDS) for _ in range(8)) for _ in range(40)]
        if index % 25 == 0:
            lines[rng.randrange(40)] += " needleToken"
        (folder / f"file{index}.ts").write_text("\n".join(lines) + "\n")


def median_ms(samples: list[float]) -> float:
    return statistics.median(samples) * 1000


def time_tool(tool: object, args: dict, root: Path, runs: int) -> tuple[float, str]:
    samples: list[float] = []
    output = ""
    for _ in range(runs):
        ctx = ToolRunContext(cwd=root, tool_call_id="bench")
        started = time.perf_counter()
        output = asyncio.run(tool.run(args, ctx)).output  # type: ignore[attr-defined]
        samples.append(time.perf_counter() - started)
    return median_ms(samples), output


def time_cmd(argv: list[str], root: Path, runs: int) -> tuple[float, str]:
    samples: list[float] = []
    output = ""
    for _ in range(runs):
        started = time.perf_counter()
        output = subprocess.run(argv, cwd=root, capture_output=True, text=True).stdout
        samples.append(time.perf_counter() - started)
    return median_ms(samples), output


def ignored_count(output: str) -> int:
    return sum(1 for line in output.splitlines() if any(f"/{d}" in line for d in IGNORED))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--files", type=int, default=10_000)
    parser.add_argument("--runs", type=int, default=5)
    ns = parser.parse_args()
    rg = shutil.which("rg", path=str(Path(sys.executable).parent)) or shutil.which("rg")
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        make_tree(root, ns.files)
        print(f"tree: {ns.files} files, half under node_modules/ and dist/ (gitignored)")
        grep_ms, grep_out = time_tool(
            GrepTool(), {"pattern": "needleToken", "output_mode": "files_with_matches"}, root, ns.runs
        )
        glob_ms, glob_out = time_tool(GlobTool(), {"pattern": "**/*.ts"}, root, ns.runs)
        rows = [("Grep (tether)", grep_ms, ignored_count(grep_out)),
                ("Glob (tether)", glob_ms, ignored_count(glob_out))]  # fmt: skip
        baselines: dict[str, float] = {}
        grep_r_ms, grep_r_out = time_cmd(["grep", "-rl", "needleToken", "."], root, ns.runs)
        baselines["grep -r"] = grep_r_ms
        rows.append(("grep -rl", grep_r_ms, ignored_count(grep_r_out)))
        if rg:
            rg_ms, rg_out = time_cmd([rg, "-l", "needleToken"], root, ns.runs)
            files_ms, files_out = time_cmd([rg, "--files", "-g", "*.ts", "--sortr=modified"], root, ns.runs)
            baselines["rg"], baselines["rg --files"] = rg_ms, files_ms
            rows += [("rg -l", rg_ms, ignored_count(rg_out)),
                     ("rg --files --sortr=modified", files_ms, ignored_count(files_out))]  # fmt: skip
        for name, ms, ignored in rows:
            print(f"{name:30s} {ms:8.1f} ms   ignored files returned: {ignored}")
        print(f"Grep / grep -r: {grep_ms / baselines['grep -r']:.2f}x")
        if rg:
            print(f"Grep / rg: {grep_ms / baselines['rg']:.2f}x")
            print(f"Glob / rg --files: {glob_ms / baselines['rg --files']:.2f}x")


if __name__ == "__main__":
    main()
