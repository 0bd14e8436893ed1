"""Wrappers, tried with `Bash(rm:*)` denied, in `standard` and `unrestricted` mode: each wrapper's
options are read from its real grammar, so the `rm` behind it is found (deny) or the launch is
opaque (ask); the victim file survives either way."""

from __future__ import annotations

import pytest

from tests.security.support import World, attempt, bash

DENY_RM = {"permissions": {"deny": ["Bash(rm:*)"]}}
WRAPPED = [
    "nice -n5 rm victim", "nice --adjustment 5 rm victim", "nice --adj=5 rm victim",
    "stdbuf --output 0 rm victim", "ionice --class 3 rm victim", "taskset 0x1 rm victim",
    "chrt -o 0 rm victim", "flock lockfile rm victim", "flock lockfile -c 'rm victim'",
    "setpriv --nnp rm victim", "script -qc 'rm victim' /dev/null",
    "unshare --fork rm victim", "xargs --process-slot-var X rm <<< victim",
    "git -c alias.x='!rm victim' x", "command rm victim", "builtin command rm victim",
    "exec rm victim", "time rm victim", "nohup rm victim", "env -S 'rm victim'",
    "timeout -sKILL 5 rm victim", "strace -f -o /dev/null rm victim", "nice --foo rm victim",
]


@pytest.mark.parametrize("mode", ["standard", "unrestricted"])
@pytest.mark.parametrize("command", WRAPPED)
def test_deny_holds_behind_every_wrapper(world: World, command: str, mode: str) -> None:
    victim = world.project / "victim"
    victim.write_text("keep me\n")
    out = attempt(world, bash(command), settings=DENY_RM, args=["--permission-mode", mode])
    assert victim.exists(), out.explain()
    assert out.denied, out.explain()
