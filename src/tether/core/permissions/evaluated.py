"""Builtins that evaluate some of their words as code: the class behind `test -v 'a[$(cmd)]'`.

Bash reads certain builtin operands as variable names (`test -v`, `printf -v`, `read`, `mapfile`,
`getopts`, `wait -p`, `unset`, `declare`/`local`/`export`/`readonly`/`typeset` names) or as
arithmetic (`let`, `test`'s `-eq` …, the values of `declare -i`). A name with a subscript
(`a[…]`) and any arithmetic evaluate the subscript — `$(…)` in it included — so a word in one of
those positions is code, whatever its quoting. Others take code outright (`mapfile -C`,
`compgen -C/-F`, `compgen -W` expands its word list). `evaluated_problem(argv, splits)` names such
a word, or returns None when every such word is plainly literal: a plain name (or `name[0]`,
`name[@]`) and literal numbers. The walker makes the command opaque, so it asks — in
unrestricted mode too when deny rules exist that the hidden command could be dodging.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence

from tether.core.permissions.readonly import test_problem

Argv = tuple[str | None, ...]
Attributes = Mapping[str, str] | None  # variable name -> its attributes (`i`, `n`, `a`, `A`)

DECLARATIONS = frozenset({"declare", "typeset", "local", "export", "readonly"})
# Builtins whose operands name variables they set: the walker forgets what it knew of those.
NAME_SETTERS = DECLARATIONS | {"read", "printf", "mapfile", "readarray", "getopts", "wait",
                               "unset", "let"}
UNKNOWN_VALUE = "\x00"  # a declaration's `NAME=<value known only at run time>` (see the walker)

_PLAIN_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(?:\[(?:\d+|@|\*)\])?$")
_NUMBER = re.compile(r"^\s*[+-]?(?:0[xX][0-9a-fA-F]+|\d+)\s*$")
_DECLARED = re.compile(r"^([^=\[]*(?:\[[^\]]*\])?)(\+?=)?(.*)$", re.S)


def plain_name(word: str | None) -> bool:
    """A variable name bash reads without evaluating anything: `x`, `a[0]`, `a[@]`."""
    return word is not None and _PLAIN_NAME.match(word) is not None


def evaluated_problem(argv: Argv, splits: bool = False, attributed: Attributes = None) -> str | None:
    """Why bash would evaluate one of this builtin's words as code, or None. `attributed`: the
    attributes the command gave its variables earlier (`declare -i n` …)."""
    if not argv or argv[0] is None:
        return None
    head, args = argv[0], list(argv[1:])
    if head in ("test", "["):
        return test_problem(args, splits)
    if head == "let":
        for word in args:
            if word is None or not _NUMBER.match(word):
                return f"`let` evaluates `{_show(word)}` as arithmetic, where subscripts run code"
        return None
    if head in DECLARATIONS:
        return _declaration(head, args, attributed or {})
    judge = _NAMED.get(head)
    return judge(args) if judge is not None else None


def _declaration(head: str, args: Sequence[str | None], attributed: Mapping[str, str]) -> str | None:
    flags = ""
    for word in args:
        if word is None:
            return f"`{head}` declares a variable named only at run time"
        if word[:1] in "-+" and len(word) > 1 and "=" not in word:
            flags += word[1:] if word[0] == "-" else ""
            continue
        match = _DECLARED.match(word)
        assert match is not None  # the pattern matches every string
        name, assigns, value = match.groups()
        if not plain_name(name):
            return (f"`{head}` declares `{_show(word)}`, whose name bash evaluates (its subscript "
                    "runs code)")
        has = flags + attributed.get(name.split("[", 1)[0], "")
        if assigns:
            problem = assigned_problem(name, value, has, compound=True)
            if problem:
                return problem
    return None


def attributes_set(argv: Argv) -> dict[str, str]:
    """The attributes (`i`, `n`, `a`, `A`) a declaration gives to the names it declares."""
    if not argv or argv[0] not in DECLARATIONS:
        return {}
    flags, out = "", {}
    for word in argv[1:]:
        if word is None:
            continue
        if word[:1] == "-" and len(word) > 1 and "=" not in word:
            flags += word[1:]
        elif word[:1] != "+":
            match = _DECLARED.match(word)
            if match is not None and plain_name(match.group(1)):
                out[match.group(1).split("[", 1)[0]] = "".join(f for f in flags if f in "inaA")
    return out


def assigned_problem(name: str, value: str, attributes: str, *, compound: bool = False) -> str | None:
    """Why assigning `value` (UNKNOWN_VALUE: known only at run time) to a variable with these
    attributes evaluates code: an integer's value is arithmetic, a nameref's is a name, and a
    declaration's `(…)` value for an array is a compound assignment with subscripts."""
    if "i" in attributes and not _NUMBER.match(value):
        return f"`{name}` is an integer variable: bash evaluates the value given to it as arithmetic"
    if "n" in attributes and not plain_name(value):
        return f"`{name}` is a name reference: bash will evaluate the name it is given"
    if compound and (value.startswith("(") or (
            value == UNKNOWN_VALUE and any(f in attributes for f in "aA"))):
        return f"`{name}` gets an array value bash evaluates (its subscripts run code)"
    return None


def _options(
    args: Sequence[str | None], with_value: str
) -> tuple[list[tuple[str, str | None]], list[str | None]]:
    """Bash builtin options (`-v NAME`, `-vNAME`, flags bundled) and the operands after them."""
    found: list[tuple[str, str | None]] = []
    i = 0
    while i < len(args):
        word = args[i]
        if word is None or word == "-" or not word.startswith("-"):
            break
        if word == "--":
            i += 1
            break
        j = 1
        while j < len(word):
            letter = word[j]
            if letter in with_value:
                value = word[j + 1 :] or (args[i + 1] if i + 1 < len(args) else "")
                if not word[j + 1 :]:
                    i += 1
                found.append((letter, value))
                break
            found.append((letter, ""))
            j += 1
        i += 1
    return found, list(args[i:])


def _names(head: str, words: Sequence[str | None]) -> str | None:
    for word in words:
        if not plain_name(word):
            return (f"`{head}` names the variable `{_show(word)}`, whose subscript bash "
                    "evaluates as code")
    return None


def _printf(args: Sequence[str | None]) -> str | None:
    options, _ = _options(args, "v")
    return _names("printf -v", [v for k, v in options if k == "v"])


def _read(args: Sequence[str | None]) -> str | None:
    options, operands = _options(args, "adinNptu")
    return _names("read", [*(v for k, v in options if k == "a"), *operands])


def _mapfile(args: Sequence[str | None]) -> str | None:
    options, operands = _options(args, "dnOsuCc")
    if any(k == "C" for k, _ in options):
        return "`mapfile -C` runs a callback given as shell code"
    return _names("mapfile", operands[:1])


def _getopts(args: Sequence[str | None]) -> str | None:
    return _names("getopts", args[1:2])


def _wait(args: Sequence[str | None]) -> str | None:
    options, _ = _options(args, "p")
    return _names("wait -p", [v for k, v in options if k == "p"])


def _unset(args: Sequence[str | None]) -> str | None:
    options, operands = _options(args, "")
    if any(k == "f" for k, _ in options):
        return None
    return _names("unset", operands)


def _compgen(args: Sequence[str | None]) -> str | None:
    options, _ = _options(args, "ACFGPSWXo")
    for letter, value in options:
        if letter in "CF":
            return f"`compgen -{letter}` runs shell code to generate completions"
        if letter == "W" and (value is None or any(m in value for m in ("$", "`"))):
            return "`compgen -W` expands its word list, which can run commands"
    return None


_NAMED = {
    "printf": _printf,
    "read": _read,
    "mapfile": _mapfile,
    "readarray": _mapfile,
    "getopts": _getopts,
    "wait": _wait,
    "unset": _unset,
    "compgen": _compgen,
}


def _show(word: str | None, limit: int = 40) -> str:
    if word is None:
        return "a word known only at run time"
    return word if len(word) <= limit else word[: limit - 1] + "…"
