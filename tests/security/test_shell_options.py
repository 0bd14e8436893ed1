"""Option spelling, tried: GNU abbreviations, glued and clustered short values of options that
write a file or run a program. Each would leave a file behind; none may."""

from __future__ import annotations

import os

import pytest

from tests.security.support import MARKER, World, attempt, bash

WRITES = [
    f"sort --outp={MARKER} README.md",
    f"sort --o={MARKER} README.md",
    f"sort -o{MARKER} README.md",
    f"sort -uo{MARKER} README.md",
    f"sort -ruo {MARKER} README.md",
    f"uniq README.md {MARKER}",
    f"uniq -c README.md {MARKER}",
    f"xxd README.md {MARKER}",
    f"tree -o {MARKER}",
    f"tree -ao {MARKER}",
    f"git log --outp={MARKER}",
    f"git diff --output={MARKER} HEAD",
    f"file -C -m {MARKER}.magic",
    f"file -kC -m {MARKER}.magic",
]
RUNS = [
    "rg --pre ./evil.sh demo",
    "rg --pr=./evil.sh demo",
    "fd --exe ./evil.sh",
    "fd -Hx ./evil.sh",
    "find . -name README.md -exec ./evil.sh {} ;",
    "git grep -O./evil.sh demo",
    "git grep --open=./evil.sh demo",
]


def _evil(world: World) -> None:
    script = world.project / "evil.sh"
    script.write_text(f"#!/bin/sh\ntouch {world.project / MARKER}\n")
    script.chmod(0o755)
    (world.project / f"{MARKER}.magic").write_text("0 string demo demo file\n")


@pytest.mark.parametrize("command", WRITES + RUNS)
def test_no_spelling_of_a_vetoed_option_has_an_effect(git_world: World, command: str) -> None:
    _evil(git_world)
    before = set(os.listdir(git_world.project))
    out = attempt(git_world, bash(command))
    after = set(os.listdir(git_world.project))
    assert after <= before, (after - before, out.explain())
    assert not (git_world.project / MARKER).exists(), out.explain()
    assert out.denied, out.explain()
