"""Words bash evaluates as code (issue 30.6): `test -v 'a[$(cmd)]'` and its family hid a denied
program from a deny rule in `--yolo`. Each attack runs the real `tether -p --yolo` with
`deny: Bash(touch:*)`; the proof is on disk: the marker `touch` would make never appears."""

from __future__ import annotations

import pytest

from tests.security.support import MARKER, World, attempt, bash

DENY_TOUCH = {"permissions": {"deny": ["Bash(touch:*)"]}}
HIDDEN = f"a[$(touch {MARKER})]"

ATTACKS = [
    f"test -v '{HIDDEN}'",  # the example
    f"command test -v '{HIDDEN}' || true",
    f"builtin test -R '{HIDDEN}'; echo ok",
    f"printf -v '{HIDDEN}' %s x",
    f"read '{HIDDEN}' <<< x",
    f"echo x | {{ read -r '{HIDDEN}'; }}",
    f"let '{HIDDEN}'",
    f"declare '{HIDDEN}=1'",
    f"x='{HIDDEN}'; declare -i n=$x",
    f"x='{HIDDEN}'; declare -i n; n=5; declare -i m=\"$x\"",
    f"mapfile -C 'touch {MARKER}' -c 1 lines <<< x",
    f"compgen -W '$(touch {MARKER})'",
    f"x='{HIDDEN}'; test -v \"$x\"",
    f"declare -a a='([$(touch {MARKER})]=1)'",
    f"declare -A m; declare m='([$(touch {MARKER})]=1)'",
    f"declare -i n; n='{HIDDEN}'",
    f"x='{HIDDEN}'; typeset -i n; n=$x",
]


@pytest.mark.parametrize("command", ATTACKS)
def test_yolo_deny_rule_sees_through_evaluated_words(world: World, command: str) -> None:
    out = attempt(world, bash(command), args=["--yolo"], settings=DENY_TOUCH)
    assert not world.effects(), out.explain()
    assert out.denied, out.explain()


def test_the_harness_can_tell_without_the_deny_rule(world: World) -> None:
    """Without a deny rule yolo runs it, and bash really does run the hidden `touch`."""
    out = attempt(world, bash(f"test -v '{HIDDEN}'; printf -v '{HIDDEN}' %s x"), args=["--yolo"])
    assert world.effects(), out.explain()


@pytest.mark.parametrize("command", [
    "test -v HOME && echo set", "printf -v out '%s' hi && echo \"$out\"",
    "read -r line <<< hello; echo \"$line\"", "let n=1 || true; echo ok",
    "declare -i n=5; echo $n", "export FOO=bar; echo $FOO", "unset FOO; echo gone",
])
def test_plain_names_still_run_under_a_deny_rule(world: World, command: str) -> None:
    out = attempt(world, bash(command), args=["--yolo"], settings=DENY_TOUCH)
    if command.startswith("let"):  # `let` evaluates its words as arithmetic: it asks
        assert out.denied, out.explain()
        return
    assert out.statuses == ["success"], out.explain()
