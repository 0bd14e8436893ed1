"""sed and awk: the reading forms are auto-allowed (confined); any way to write a file, run a
program or read a program from a file is not."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.core.permissions.support import policy, rules, shell

READ_ONLY = [
    "sed -n '1,20p' README.md", "sed -n '/foo/p' README.md", "sed 's/a/b/g' README.md",
    "sed -e 's|a|b|' -e '2d' README.md", "sed -E 's/(a)/\\1/2' README.md", "sed -n '$p' README.md",
    "sed '10q' README.md", "sed -ne '1p' README.md", "sed '$!N' README.md",
    "sed -n '/start/,/end/p' README.md", "sed 'y/abc/xyz/' README.md", "sed -n 1p *.md",
    "cat README.md | sed 's/x/y/'", "awk '{print $1}' README.md", "awk -F: '{print $1}' README.md",
    "awk '/x/ {print}' README.md", "awk -v n=1 'NR==n' README.md", "command -v python3",
    "env", "printenv PATH", "strings README.md", "node -v", "python3 --version", "expr 1 + 2",
]
NOT_READ_ONLY = [
    "sed -n '1w out' README.md", "sed 's/a/b/w out' README.md", "sed 's/a/id/e' README.md",
    "sed 'e id' README.md", "sed -i 's/a/b/' README.md", "sed -i.bak 's/a/b/' README.md",
    "sed --in-place 's/a/b/' README.md", "sed --in 's/a/b/' README.md", "sed -ni 'p' README.md",
    "sed -f script.sed README.md", "sed --file=script.sed README.md", "sed 'r /etc/passwd' README.md",
    "sed 'R x' README.md", "sed 'W out' README.md", "sed 's/[/]/x/w out' README.md",
    "sed 's/a/b/;w out' README.md", "sed '1!G;h;$!d;w x' README.md", "sed \"$x\" README.md",
    "awk 'BEGIN{system(\"id\")}'", "awk '{print > \"out\"}' README.md",
    "awk '{print | \"sh\"}' README.md", "awk '{ \"id\" | getline x }' README.md",
    "awk -f prog.awk README.md", "awk 'BEGIN{ARGV[1]=\"/etc/passwd\"} {print}' README.md",
    "awk '@include \"x\"'", "gawk -e 'BEGIN{}'", "awk -W exec x", "awk '{print}' /etc/passwd",
    "env -i", "strings @opts", "python3 -v", "make version", "python3 -c 1",
]


@pytest.fixture
def proj(tmp_path: Path) -> tuple[Path, Path]:
    cwd, home = tmp_path / "proj", tmp_path / "userhome"
    cwd.mkdir()
    home.mkdir()
    (cwd / "README.md").write_text("x\n")
    return cwd, home


@pytest.mark.parametrize("command", READ_ONLY)
def test_reading_forms_are_auto_allowed(proj, command) -> None:
    d = shell(policy(*proj, rules()), command)
    assert d.verdict == "allow" and d.confine, (command, d)


@pytest.mark.parametrize("command", NOT_READ_ONLY)
def test_writing_running_or_loading_forms_are_not(proj, command) -> None:
    d = shell(policy(*proj, rules()), command)
    assert d.verdict != "allow", (command, d)


def test_sed_and_awk_inputs_are_held_to_deny_rules(proj) -> None:
    (proj[0] / ".env").write_text("K=1\n")
    pol = policy(*proj, rules(deny=["Read(.env)"]))
    for command in ("sed -n p .env", "sed -n p .e*", "awk '{print}' .env", "awk 1 .[e]nv"):
        assert shell(pol, command).verdict == "deny", command
