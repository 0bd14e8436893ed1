"""Writes into `$TETHER_HOME` through `cd`, `pushd` or a variable (issue 30.7): under `--yolo`
with no sandbox the state guard saw only literal path words. Each attack runs the real
`tether -p --yolo` (TETHER_FS_SANDBOX=0); the proof is on disk: no marker anywhere, tether's
state unchanged, no provider key printed."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.security.support import MARKER, World, attempt, bash

NO_SANDBOX = {"TETHER_FS_SANDBOX": "0"}

ATTACKS = [
    f'cd "$TETHER_HOME"; echo x > {MARKER}',  # the example
    f"cd $TETHER_HOME && touch {MARKER}",
    f"cd ${{TETHER_HOME}}/providers && mkdir {MARKER}",
    f'D=$TETHER_HOME; echo x > "$D/{MARKER}"',
    f'pushd "$TETHER_HOME" >/dev/null && touch {MARKER}',
    f"pushd /tmp >/dev/null; pushd \"$TETHER_HOME\" >/dev/null; popd >/dev/null; popd; touch {MARKER}",
    f"cd ~ && cd ../tether-home && touch {MARKER}",
    f"cd \"$PWD/../tether-home\" && touch {MARKER}",
    f"bash -c 'cd \"$TETHER_HOME\" && touch {MARKER}'",
    f'cp README.md "$TETHER_HOME/{MARKER}"',
    f'X=$TETHER_HOME; cp README.md "$X/{MARKER}"',
    f'for d in "$TETHER_HOME"; do echo x > "$d/{MARKER}"; done',
    f"CDPATH=$TETHER_HOME cd providers && touch {MARKER}",
    f'cd "$(dirname "$TETHER_HOME/x")" && git init -q {MARKER}',
    f'cd "$TETHER_HOME" && cat providers/anthropic.json > ../project/{MARKER}',
    'cd "$TETHER_HOME" && cat providers/anthropic.json',
    'K=$TETHER_HOME/providers; cat "$K/anthropic.json"',
    f"bash -c 'cp README.md \"$1/{MARKER}\"' _ \"$TETHER_HOME\"",
    f"export D=$TETHER_HOME; bash -c 'echo x > \"$D/{MARKER}\"'",
    f"cd $(echo $TETHER_HOME) && touch {MARKER}",
]


def _state(world: World) -> dict[Path, bytes]:
    return {p: p.read_bytes() for p in world.tether_home.rglob("*")
            if p.is_file() and p.parent.name == "providers"}


@pytest.mark.parametrize("command", ATTACKS)
def test_yolo_without_a_sandbox_cannot_reach_tether_state_indirectly(
    world: World, command: str
) -> None:
    before = _state(world)
    out = attempt(world, bash(command), args=["--yolo"], env=NO_SANDBOX)
    assert out.effect_free(), out.explain()
    assert out.denied, out.explain()
    assert _state(world) == before, out.explain()


@pytest.mark.parametrize(("command", "made"), [
    ("mkdir -p sub && cd sub && echo x > out.txt", "sub/out.txt"),
    ('for f in *.md; do wc -l "$f"; done > counts.txt', "counts.txt"),
    ('echo x > "$PWD/here.txt"', "here.txt"),
    ("pushd . >/dev/null && echo x > pushed.txt", "pushed.txt"),
])
def test_yolo_still_runs_ordinary_commands(world: World, command: str, made: str) -> None:
    out = attempt(world, bash(command), args=["--yolo"], env=NO_SANDBOX)
    assert out.statuses == ["success"], out.explain()
    assert (world.project / made).is_file(), out.explain()


def test_a_variable_the_users_environment_sets_is_the_users_choice(world: World) -> None:
    """Only what the command computes is the model's: `$OUT` from the run's environment runs."""
    (world.project / "out").mkdir()
    out = attempt(world, bash('echo x > "$OUT/made.txt" && cd "$OUT" && touch there.txt'),
                  args=["--yolo"], env={**NO_SANDBOX, "OUT": str(world.project / "out")})
    assert out.statuses == ["success"], out.explain()
    assert (world.project / "out" / "made.txt").is_file()
    assert (world.project / "out" / "there.txt").is_file()
