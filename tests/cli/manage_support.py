"""Running `tether` management subcommands in a subprocess against the test's TETHER_HOME."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

from tests.e2e.support import Run, run_tether


def tether(*args: str, cwd: Path, env: dict[str, str] | None = None) -> Run:
    return run_tether(list(args), env=env if env is not None else dict(os.environ), cwd=cwd)


def tether_json(*args: str, cwd: Path) -> Any:
    run = tether(*args, cwd=cwd)
    assert run.code == 0, run.stderr
    return json.loads(run.stdout)


def git(repo: Path, *args: str) -> str:
    import subprocess

    env = {**os.environ, "GIT_CONFIG_GLOBAL": os.devnull, "GIT_CONFIG_NOSYSTEM": "1",
           "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@t"}
    return subprocess.run(["git", *args], cwd=repo, env=env, check=True, capture_output=True,
                          text=True).stdout
