"""What the `tether <command>` handlers share: a parser whose mistakes are UsageErrors, and a
TetherError reported as `Error: …` on stderr with exit code 1."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

from tether.errors import TetherError, UsageError


class UsageParser(argparse.ArgumentParser):
    """argparse raising UsageError (`prog: message`) instead of printing usage and exiting 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(f"{self.prog}: {message}")


def reported(run: Callable[[list[str]], int], argv: Sequence[str]) -> int:
    """`run(argv)`; a TetherError it raises is written as `Error: …` and exits 1."""
    try:
        return run(list(argv))
    except TetherError as exc:
        sys.stderr.write(f"Error: {exc}\n")
        return 1
