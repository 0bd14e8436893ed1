"""Option spelling: a vetoed option has no spelling that slips past the read-only analysis — GNU
long-option abbreviations, `=` and separate values, glued short values, clusters."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.core.permissions.support import policy, rules, shell
from tether.core.permissions.options import Grammar
from tether.core.permissions.readonly import COMMANDS, WILD_SAFE, inspect

VETOED = [
    "sort --output=F x", "sort --outp=F x", "sort --o=F x", "sort --output F x", "sort -oF x",
    "sort -o F x", "sort -uoF x", "sort -ruo F x",
    "sort --compress-program=./x x", "sort --compress-prog=./x x", "sort --compr ./x x",
    "sort -T /tmp x", "sort --temporary-directory=/tmp x", "sort --temp=/tmp x",
    "date --set=2020-01-01", "date --se=2020-01-01", "date -s 2020-01-01", "date -us now",
    "date 0101000020",
    "hostname -Fx", "hostname -F x", "hostname --file x", "hostname --fi=x", "hostname evil",
    "hostname -b", "hostname --boot",
    "file -C", "file -C -m x", "file --compile -m x", "file --comp -m x", "file -kC x",
    "file -p x", "file --preserve-date x",
    "tail -f x", "tail -F x", "tail --foll x", "tail --follow=name x", "tail -qf x",
    "tree -o out", "tree -ao out", "tree -R", "tree --output=out",
    "rg --pre ./x foo", "rg --pre=./x foo", "rg --pr ./x foo", "rg --pre-glob '*' foo",
    "rg --hostname-bin=./x foo",
    "fd -x rm", "fd --exec rm", "fd --exe rm", "fd -X rm", "fd -Hx rm", "fd --exec-batch rm",
    "find . -exec rm {} ;", "find . -delete", "find . -fprint out",
    "printf -v x y", "base64 -o out x", "base64 --output=out x",
    "uniq in out", "uniq -c in out", "xxd in out", "xxd -r in", "xxd -revert in",
    "xxd -r -p in", "git log --output=x", "git log --outp=x", "git diff --ext-diff",
    "git diff --ext-d", "git log --exec=x", "git grep -O", "git grep --open-files-in-pager",
    "git grep --open", "git log --textconv", "git show --textc", "git grep -Oless x",
    "gh pr view --web", "gh pr view -w", "jq -n 'import \"x\" as $x; $x'", "jq -f prog.jq",
    "jq -L / -n 'import \"etc/x\" as $x; $x'", "jq -L/ -n .",
]

ALLOWED = [
    "sort -u x", "sort -k 2 -t , x", "sort -rn x", "sort --key=2 x", "sort --unique x",
    "date", "date +%s", "date -u +%Y", "date --date=yesterday +%F", "date -d @0",
    "hostname", "hostname -s", "hostname --short", "hostname -f",
    "file README.md", "file -b README.md", "file --mime-type README.md",
    "tail -n 5 README.md", "tail -5 README.md", "tail -n5 README.md", "tail --lines=5 README.md",
    "tree", "tree -L 2", "tree -a -I node_modules",
    "rg foo", "rg -n foo src", "rg --files", "rg -t py foo", "rg --glob '*.py' foo",
    "fd py", "fd -e py", "fd --extension py", "find . -name '*.py'", "find . -type f -newer x",
    "head -n 5 README.md", "head -c100 README.md", "ls -la", "ls --color=auto",
    "uniq README.md", "uniq -c README.md", "xxd README.md", "xxd -l 16 README.md",
    "xxd -c 8 -g 1 README.md", "base64 README.md", "base64 -d README.md",
    "printf '%s\\n' a b", "git log --oneline -5", "git diff --stat", "git log -p -1",
    "git show HEAD", "gh pr view 1", "jq .name README.md", "cut -d: -f1 README.md",
    "wc -l README.md", "du -sh .", "stat README.md", "grep -rn foo .",
]


@pytest.fixture
def proj(tmp_path: Path) -> tuple[Path, Path]:
    cwd, home = tmp_path / "proj", tmp_path / "userhome"
    cwd.mkdir()
    home.mkdir()
    (cwd / "README.md").write_text("x\n")
    (cwd / "x").write_text("x\n")
    return cwd, home


@pytest.mark.parametrize("command", VETOED)
def test_vetoed_option_spellings_are_not_read_only(proj, command) -> None:
    d = shell(policy(*proj, rules()), command)
    assert d.verdict != "allow", (command, d)


@pytest.mark.parametrize("command", ALLOWED)
def test_plain_option_spellings_stay_read_only(proj, command) -> None:
    d = shell(policy(*proj, rules()), command)
    assert d.verdict == "allow" and d.confine, (command, d)


@pytest.mark.parametrize(
    ("command", "named"),
    [
        ("date -f.env", ".env"), ("date -uf.env", ".env"), ("date --file=.env", ".env"),
        ("date --fi .env", ".env"), ("date -r .env", ".env"), ("grep -f .env x", ".env"),
        ("grep -f.env x", ".env"), ("grep --file=.env x", ".env"), ("wc --files0-from=.env", ".env"),
        ("sort --files0-from=.env", ".env"), ("sort --random-source=.env x", ".env"),
        ("du --exclude-from=.env .", ".env"), ("diff --from-file=.env x", ".env"),
        ("file -m .env x", ".env"), ("file -f .env", ".env"), ("hexdump -f .env x", ".env"),
        ("jq --rawfile v .env -n '$v'", ".env"), ("jq --slurpfile v .env -n '$v'", ".env"),
        ("rg -f .env x", ".env"), ("rg --ignore-file .env foo", ".env"),
    ],
)
def test_options_that_name_a_file_are_held_to_file_deny_rules(proj, command, named) -> None:
    (proj[0] / ".env").write_text("SECRET=1\n")
    d = shell(policy(*proj, rules(deny=[f"Read({named})"])), command)
    assert d.verdict == "deny", (command, d)


@pytest.mark.parametrize(
    "command", ["date -f/etc/passwd", "grep -f /etc/passwd x", "wc --files0-from=/etc/x"]
)
def test_options_that_name_a_file_outside_ask(proj, command) -> None:
    d = shell(policy(*proj, rules()), command)
    assert d.verdict == "ask", (command, d)


def test_grammar_parse_abbreviations_clusters_and_values() -> None:
    g = Grammar("ab:f@o!", "alpha beta= file=@ output! outline")
    assert g.parse(["--outp=x"]).veto == "--outp=x"
    assert g.parse(["--out"]).veto == "--out"  # ambiguous with --outline: the veto wins
    assert g.parse(["--outl"]).veto is None
    assert g.parse(["-ao"]).veto == "-ao"
    assert g.parse(["-bo", "x"]).veto is None  # `o` is -b's value, not an option
    parsed = g.parse(["-af.env", "--fi", "y", "--beta", "z", "op", "--", "-o"])
    assert parsed.veto is None
    assert parsed.files == (".env", "y")
    assert parsed.operands == ("op", "-o")


def test_a_word_known_only_at_run_time_is_read_only_only_where_no_option_is_dangerous() -> None:
    for name in COMMANDS:
        verdict = inspect((name, None))
        if name in WILD_SAFE:
            assert verdict is not None, name
        elif name not in ("test", "[", "printf"):
            assert verdict is None, name  # the word could be `-o F`, `--pre=x`, `-exec` …
    assert inspect(("printf", None, "x")) is None  # it could be `-v NAME`
    assert inspect(("printf", "%s", None)) is not None
