"""`tether update` (alias `upgrade`): install the newest stable tether with the tool that
installed this one (pipx, uv tool or pip in a venv); `--check` only reports.

Exit 0: up to date or updated; 1: the update failed (the old version stays installed and the
message says how to retry by hand); 2: bad arguments.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence


def run_update(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="tether update",
        description="Update tether from its package index (TETHER_UPDATE_INDEX_URL, default PyPI).",
    )
    parser.add_argument(
        "--check", action="store_true", help="only say whether a newer version exists"
    )
    ns = parser.parse_args(list(argv))
    from tether.runtime.updater import UpdateError, update

    env = dict(os.environ)
    try:
        outcome = update(env, check_only=ns.check)
    except UpdateError as exc:
        sys.stderr.write(f"Error: {exc}\n")
        return 1
    sys.stdout.write(outcome.message + "\n")
    return 0

