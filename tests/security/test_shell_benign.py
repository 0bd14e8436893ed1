"""No over-blocking, end to end: the read-only commands that used to ask because of a variable, a
loop or a substitution now run (kernel-confined) and give their real output."""

from __future__ import annotations

import pytest

from tests.requirements import need_bwrap
from tests.security.support import World, attempt, bash

BENIGN = [
    ('basename "$PWD"', "project"),
    ('for f in *.md; do wc -l "$f"; done', "notes.md"),
    ("echo branch=$(git rev-parse --abbrev-ref HEAD)", "branch=ma"),
    ("ls -la | head -3", "total"),
    ("git log --oneline -1", "init"),
    ("wc -l *.md", "README.md"),
    ("find . -name '*.md'", "./notes.md"),
    ("grep -rn demo README.md", "demo"),
]


@pytest.mark.parametrize(("command", "expected"), BENIGN)
def test_benign_read_only_commands_run(git_world: World, command: str, expected: str) -> None:
    need_bwrap()
    out = attempt(git_world, bash(command))
    assert out.statuses == ["success"], out.explain()
    assert expected in out.outputs[0], out.explain()
