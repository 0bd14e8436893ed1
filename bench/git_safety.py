"""The cost of git safe mode: the `git_hazard` probe per git call, cold and cached, and `git
status` with and without `git_safe_env`.

Run: .venv/bin/python bench/git_safety.py [--files 2000] [--runs 30]

Builds a repository of N committed files (plus a submodule-free benign config) in a temporary
folder. "cold" clears the probe caches before each call (what the first git command in a repository
pays: rev-parse, config --list, ls-files); "a new folder" is the first call from another folder
of a repository already judged (rev-parse only); "cached" is every later call while nothing git reads
has changed (a handful of stat calls). Prints medians in milliseconds.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from tether.core.permissions import gitconfig  # noqa: E402
from tether.tools.git_safety import git_safe_env  # noqa: E402


def median_ms(fn: Callable[[], object], runs: int) -> float:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


def build_repo(root: Path, files: int, env: dict[str, str]) -> Path:
    repo = root / "repo"
    for i in range(files):
        path = repo / f"d{i % 20}" / f"f{i}.txt"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"line {i}\n")
    ident = ["-c", "user.name=b", "-c", "user.email=b@b"]
    for argv in (["init", "-q"], ["add", "-A"], [*ident, "commit", "-qm", "init"]):
        subprocess.run(["git", *argv], cwd=repo, env=env, check=True, capture_output=True)
    return repo


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--files", type=int, default=2000)
    parser.add_argument("--runs", type=int, default=30)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        env = {**os.environ, "HOME": str(root), "GIT_CONFIG_NOSYSTEM": "1"}
        repo = build_repo(root, args.files, env)
        sub = repo / "d3"

        def cold() -> object:
            gitconfig._CACHE.clear()
            gitconfig._REPOS.clear()
            return gitconfig.git_hazard(sub)

        def new_folder() -> object:
            gitconfig._CACHE.clear()  # the folder's entry, not the repository's
            return gitconfig.git_hazard(sub)

        cold_ms = median_ms(cold, args.runs)
        gitconfig.git_hazard(sub)
        folder_ms = median_ms(new_folder, args.runs)
        gitconfig.git_hazard(sub)
        cached_ms = median_ms(lambda: gitconfig.git_hazard(sub), args.runs * 10)
        safe = git_safe_env(env)

        def status(e: dict[str, str]) -> Callable[[], object]:
            return lambda: subprocess.run(["git", "status", "--porcelain"], cwd=repo, env=e,
                                          capture_output=True, check=True)

        plain_ms = median_ms(status(env), args.runs)
        safe_ms = median_ms(status(safe), args.runs)
        print(f"repository: {args.files} files, {args.runs} runs per figure (medians)")
        print(f"git_hazard cold (probe: rev-parse + config --list + ls-files): {cold_ms:7.2f} ms")
        print(f"git_hazard, a new folder of a judged repository (rev-parse):  {folder_ms:7.2f} ms")
        print(f"git_hazard cached (stat checks only):                         {cached_ms:7.3f} ms")
        print(f"git status, plain environment:                                {plain_ms:7.2f} ms")
        print(f"git status, git_safe_env:                                     {safe_ms:7.2f} ms "
              f"({safe_ms - plain_ms:+.2f} ms)")


if __name__ == "__main__":
    main()
