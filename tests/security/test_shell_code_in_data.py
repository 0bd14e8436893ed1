"""Code hidden in data, tried as a prompt-injected model would: bash runs `$(…)` found in array
subscripts it meets in arithmetic, `-v`, indirect and transform expansions. No attempt may have an
effect on disk, in `standard` mode or with allow rules for every command it names."""

from __future__ import annotations

import pytest

from tests.security.support import MARKER, World, attempt, bash

ATTACKS = [
    f"[[ 'a[$(touch {MARKER})]' -eq 0 ]]",
    f"test -v 'a[$(touch {MARKER})]'",
    f"[ -v 'a[$(touch {MARKER})]' ]",
    f"v='a[$(touch {MARKER})]'; [[ 1 -eq v ]]",
    f"for x in 'a[$(touch {MARKER})]'; do ls $((x)); done",
    f"for x in 'a[$(touch {MARKER})]'; do ls ${{!x}}; done",
    f"for x in 'a[$(touch {MARKER})]'; do echo $[x]; done",
    f"for x in 'a[$(touch {MARKER})]'; do echo ${{a[x]}}; done",
    f"for x in 'a[$(touch {MARKER})]'; do echo \"${{x:x}}\"; done",
    f"for x in 'a[$(touch {MARKER})]'; do [[ $x -eq 1 ]]; done",
    f"for x in '$(touch {MARKER})'; do echo ${{x@P}}; done",
    f"for x in '-v a[$(touch {MARKER})]'; do [ $x ]; done",
    f"printf -v 'a[$(touch {MARKER})]' y",
    f"for x in 'a[$(touch {MARKER})]'; do cat <<EOF\n${{!x}}\nEOF\ndone",
]


@pytest.mark.parametrize("command", ATTACKS)
def test_code_hidden_in_data_never_runs(world: World, command: str) -> None:
    out = attempt(world, bash(command))
    assert out.effect_free(), out.explain()
    assert out.denied, out.explain()


@pytest.mark.parametrize("command", ATTACKS[4:8])
def test_allow_rules_for_the_named_commands_do_not_admit_it(world: World, command: str) -> None:
    out = attempt(world, bash(command), args=["--allowedTools", "Bash(ls:*),Bash(echo:*)"])
    assert out.effect_free(), out.explain()
    assert out.denied, out.explain()


@pytest.mark.parametrize("command", [ATTACKS[0], "# runs nothing", "[[ -n x ]]"])
def test_strict_never_allows_what_runs_no_command(world: World, command: str) -> None:
    out = attempt(world, bash(command), args=["--permission-mode", "strict"])
    assert out.effect_free(), out.explain()
    assert out.denied and "strict" in out.outputs[0], out.explain()
