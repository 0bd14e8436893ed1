"""Code hidden in data: bash evaluates `$(…)` in subscripts met in arithmetic, `-v`, indirect and
transform expansions. Each attack is first run in a real bash to prove it runs code, then must
not be admitted; the benign forms next to them stay auto-allowed (and confined)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tests.core.permissions.support import policy, rules, shell

# {X} is the marker file the hidden `touch` creates.
ATTACKS = [
    "[[ 'a[$(touch {X})]' -eq 0 ]]",
    "[[ 1 -eq 'a[$(touch {X})]' ]]",
    "v='a[$(touch {X})]'; [[ 1 -eq v ]]",
    "test -v 'a[$(touch {X})]'",
    "[ -v 'a[$(touch {X})]' ]",
    "[[ -v 'a[$(touch {X})]' ]]",
    "test x -gt 'a[$(touch {X})]'",
    "[ 'a[$(touch {X})]' -eq 0 ]",
    "for x in 'a[$(touch {X})]'; do ls $((x)); done",
    "for x in 'a[$(touch {X})]'; do ls ${!x}; done",
    "for x in 'a[$(touch {X})]'; do echo $[x]; done",
    "for x in 'a[$(touch {X})]'; do echo ${a[x]}; done",
    "for x in 'a[$(touch {X})]'; do echo ${#a[x]}; done",
    "for x in 'a[$(touch {X})]'; do echo ${a[@]:x}; done",
    "for x in 'a[$(touch {X})]'; do echo \"${x:x}\"; done",
    "for x in 'a[$(touch {X})]'; do set -- 1; echo ${1:x}; done",
    "for x in 'a[$(touch {X})]'; do [[ $x -eq 1 ]]; done",
    "for x in 'a[$(touch {X})]'; do [[ 1 -eq $x ]]; done",
    "for x in 'a[$(touch {X})]'; do [ \"$x\" -eq 1 ]; done",
    "for x in 'a[$(touch {X})]'; do [ -v \"$x\" ]; done",
    "for x in 'a[$(touch {X})]'; do test -v \"$x\"; done",
    "for x in '-v a[$(touch {X})]'; do [ $x ]; done",
    "for x in '$(touch {X})'; do echo ${x@P}; done",
    "for x in 'a[$(touch {X})]'; do echo ${!x@}; done",
    "for x in 'a[$(touch {X})]'; do printf -v \"$x\" y; done",
    "printf -v 'a[$(touch {X})]' y",
    "printf -va[\\$\\(touch\\ {X}\\)] y",
    "for v in -v; do printf \"$v\" 'a[$(touch {X})]' y; done",
    "read 'a[$(touch {X})]' < /dev/null",
    "let 'x=a[$(touch {X})]'",
    "declare -i x='a[$(touch {X})]'",
    "(( a[$(touch {X})] ))",
    "for i in 'a[$(touch {X})]'; do [[ ${#a[i]} -gt 0 ]]; done",
    "for ((i=a[$(touch {X})]; i<0; i++)); do :; done",
    "for x in 'a[$(touch {X})]'; do cat <<EOF\n${!x}\nEOF\ndone",
    "for x in 'a[$(touch {X})]'; do cat <<EOF\n$((x))\nEOF\ndone",
    "for x in 'a[$(touch {X})]'; do cat <<< ${!x}; done",
    "for x in 'a[$(touch {X})]'; do unset \"$x\"; done",
    "for x in 'a[$(touch {X})]'; do declare -n r=\"$x\"; echo $r; done",
]

BENIGN = [
    'basename "$PWD"',
    'for f in *.md; do wc -l "$f"; done',
    "echo $(git rev-parse HEAD)",
    'echo "${HOME}"',
    "echo $((1 + 2)) $[3*4]",
    "echo ${x%.md} ${x##*/} ${#x} ${x:-default} ${x:0:2} ${a[0]} ${a[@]}",
    '[ -n "$x" ]',
    '[ "$x" = yes ]',
    '[[ $? -eq 0 ]]',
    '[[ ${#x} -gt 0 && "$#" -ge 1 && ${#a[@]} -lt 3 ]]',
    '[[ -n $x && $x == *.py ]]',
    "[[ -v HOME ]]",
    "test -f README.md",
    'test -n "$x"',
    'printf "%s\\n" "$x"',
    'for f in *.md; do echo "${f%.md}"; done',
    "cat <<'EOF'\n${!x} $((x))\nEOF",
]


@pytest.fixture
def proj(tmp_path: Path) -> tuple[Path, Path]:
    cwd, home = tmp_path / "proj", tmp_path / "userhome"
    cwd.mkdir()
    home.mkdir()
    (cwd / "README.md").write_text("x\n")
    return cwd, home


def _runs_code_in_bash(command: str, where: Path) -> bool:
    marker = where / "MARKER"
    subprocess.run(["bash", "-c", "a=(1 2); " + command.replace("{X}", "MARKER")],
                   cwd=where, capture_output=True, timeout=10, stdin=subprocess.DEVNULL)
    return marker.exists()


@pytest.mark.parametrize("attack", ATTACKS)
def test_code_in_data_is_not_admitted(proj, tmp_path, attack) -> None:
    lab = tmp_path / "lab"
    lab.mkdir()
    command = attack.replace("{X}", "MARKER")
    for mode in ("standard", "acceptEdits", "strict"):
        d = shell(policy(*proj, rules(), mode), command)
        assert d.verdict != "allow", (mode, command, d)
    # with an allow rule for every command named in it, the hidden code still asks
    d = shell(policy(*proj, rules(allow=["Bash(ls:*)", "Bash(echo:*)", "Bash(cat:*)"])), command)
    assert d.verdict != "allow", (command, d)


# The attacks this machine's bash really falls for, checked, so the list cannot drift into
# harmless strings. (`test`/`[` compare with `-eq` without arithmetic in bash 5.2, but other
# shells and versions do not promise it: those stay refused without being proven here.)
PROVEN = [a for a in ATTACKS if not a.startswith(("test x", "[ '", "let", "declare", "(("))][:14]


@pytest.mark.parametrize("attack", PROVEN)
def test_the_attacks_are_real(tmp_path, attack) -> None:
    assert _runs_code_in_bash(attack, tmp_path), f"bash did not run the hidden code: {attack}"


@pytest.mark.parametrize("command", BENIGN)
def test_data_that_stays_data_is_auto_allowed(proj, command) -> None:
    d = shell(policy(*proj, rules()), command)
    assert d.verdict == "allow" and d.confine, (command, d)
