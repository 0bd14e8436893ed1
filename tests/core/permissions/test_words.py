"""Word values as bash makes them: brace expansion, globs (quoted parts stay literal), tilde."""

from __future__ import annotations

from pathlib import Path

import pytest

from tether.core.permissions.shell import analyse
from tether.core.permissions.words import Glob, expand_braces

HOME = Path("/home/u")


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("{.env,x}", [".env", "x"]),
        (".{env,x}", [".env", ".x"]),
        ("a{b,c{d,e}}f", ["abf", "acdf", "acef"]),
        ("{1..3}", ["1", "2", "3"]),
        ("{a..c}x", ["ax", "bx", "cx"]),
        ("{x}", ["{x}"]),
        ("{}", ["{}"]),
        ("a\\{b,c}", ["a\\{b,c}"]),
        ("{1..1000}", None),
        ("{1..9..2}", None),
    ],
)
def test_brace_expansion(text, words) -> None:
    assert expand_braces(text) == words


def _argv(command: str) -> tuple:
    return analyse(command, Path("/p"), HOME).commands[-1].argv


def test_globs_know_their_quoted_parts() -> None:
    argv = _argv("""cat *.py '*.md' "a"*.txt .[e]nv \\*.c ~/x* src/*""")
    kinds = [(w, isinstance(w, Glob), getattr(w, "pattern", None)) for w in argv[1:]]
    assert kinds == [
        ("*.py", True, "*.py"),
        ("*.md", False, None),
        ("a*.txt", True, "a*.txt"),
        (".[e]nv", True, ".[e]nv"),
        ("*.c", False, None),
        ("/home/u/x*", True, "/home/u/x*"),
        ("src/*", True, "src/*"),
    ]
    quoted = _argv("""cat "x*"*""")[1]
    assert isinstance(quoted, Glob) and quoted.pattern == "x[*]*"


def test_braces_become_words_and_unknowns_stay_unknown() -> None:
    assert _argv("cat {.env,README.md} $x \"$(ls)\" ${HOME}/a") == (
        "cat", ".env", "README.md", None, None, "/home/u/a")
    command = analyse("ls $x", Path("/p"), HOME).commands[0]
    assert command.splits
    assert not analyse('ls "$x"', Path("/p"), HOME).commands[0].splits
