"""Real parts some tests need (bubblewrap, tmux, strace, Landlock): missing means FAIL.

They are part of what tether is, not optional extras, so a test that needs one never skips:
it fails and says how to get it (`.ci/run` installs the Debian packages itself).
"""

from __future__ import annotations

import shutil
import sys
from typing import NoReturn

import pytest

from tether.sandbox import SandboxStatus, probe


def missing(what: str, how: str) -> NoReturn:
    pytest.fail(f"{what} is required by this test and missing here: {how}")


def need_bwrap(*, seccomp: bool = False) -> SandboxStatus:
    """The bubblewrap backend (and, with `seccomp`, its seccomp filter) as this machine has it."""
    if not sys.platform.startswith("linux"):
        missing("bubblewrap (Linux)", f"this is {sys.platform}")
    found = probe()
    if found.backend != "bwrap" or (seccomp and not found.seccomp):
        why = "; ".join(found.reasons) or "no bwrap backend"
        missing("a working bubblewrap sandbox", f"{why} (apt-get install bubblewrap)")
    return found


def need_tmux() -> str:
    found = shutil.which("tmux")
    if found is None:
        missing("tmux", "apt-get install tmux")
    return found
