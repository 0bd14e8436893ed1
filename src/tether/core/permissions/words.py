"""What a shell word is worth before it runs: its static text, the globs and braces bash expands
on it, and the expansions that would make bash evaluate data as code.

A word is static (`str`), a `Glob` (static text bash matches against the disk: `*.py`, `.e*`),
or unknown (`None`: a variable, a `$(…)`). Unknown is fine where the value stays data; but bash
evaluates some values as code — `${!x}` and `${x@P}` expand a name or a prompt string, and any
arithmetic context (`$((x))`, `${x:$n}`, `${a[$i]}`, `[[ $x -eq 1 ]]`) evaluates the subscripts
of names it meets, `$(…)` included. `code_hazard` names those, so the walker can call them opaque.
"""

from __future__ import annotations

import glob as _glob
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

Known = Mapping[str, str] | None  # variables whose value is known before the command runs

MAX_BRACE_WORDS = 64


class Glob(str):
    """A word bash expands against the files on disk; `pattern` is it with quoted parts escaped."""

    pattern: str

    def __new__(cls, text: str, pattern: str) -> Glob:
        made = super().__new__(cls, text)
        made.pattern = pattern
        return made


def static(node: Any, home: Path, known: Known = None) -> str | None:
    """The word's value when it does not depend on run time; a `Glob` when bash will glob it.
    `$HOME` is `home`; a variable in `known` (`$TETHER_HOME`, `$PWD`) is its value there."""
    kind = node.type
    text = node.text.decode()
    if kind == "word":
        if _has_brace_expansion(text):
            return None
        return _unquoted(text, home, first=True)
    if kind == "number":
        return text
    if kind == "raw_string":
        return text[1:-1]
    if kind == "string":
        parts: list[str] = []
        for child in node.named_children:
            if child.type == "string_content":
                parts.append(unescape_double(child.text.decode()))
            elif child.type in ("simple_expansion", "expansion"):
                value = _expansion(child, home, known)
                if value is None:
                    return None
                parts.append(value)
            else:
                return None
        if len(parts) == 1 and isinstance(parts[0], Glob):
            return parts[0]  # `"$f"` in `for f in *.py`: one of the glob's matches
        return "".join(parts)
    if kind == "concatenation":
        if _has_brace_expansion(text):
            return None  # see `brace_words`
        if all(c.type == "word" for c in node.children):
            return _unquoted(text, home, first=True)  # the grammar splits `.[e]nv` at brackets
        if any(c.type == "word" and "[" in c.text.decode() for c in node.children):
            return None  # a bracket expression spanning quoted parts: not worth modelling
        texts: list[str] = []
        patterns: list[str] = []
        globbed = False
        for index, child in enumerate(node.children):
            if child.type == "word":
                raw = child.text.decode()
                if _has_brace_expansion(raw):
                    return None
                piece = _unquoted(raw, home, first=index == 0)
                if piece is None:
                    return None
            else:
                piece = static(child, home, known)
                if piece is None:
                    return None
            if isinstance(piece, Glob):
                globbed = True
                patterns.append(piece.pattern)
            else:
                patterns.append(_glob.escape(piece))
            texts.append(str(piece))
        text = "".join(texts)
        return Glob(text, "".join(patterns)) if globbed else text
    if kind in ("simple_expansion", "expansion"):
        return _expansion(node, home, known)
    return None


def brace_words(node: Any, home: Path, known: Known = None) -> list[str | None]:
    """An argument's words after brace expansion: `{.env,x}` is two words, both static."""
    if node.type == "word":
        pieces = [node]
    elif node.type == "concatenation" and all(c.type == "word" for c in node.children):
        pieces = list(node.children)
    else:
        return [static(node, home, known)]
    text = "".join(p.text.decode() for p in pieces)
    if not _has_brace_expansion(text):
        return [static(node, home, known)]
    expanded = expand_braces(text)
    if expanded is None:
        return [None]
    return [_unquoted(word, home, first=True) for word in expanded]


def expand_braces(text: str) -> list[str] | None:
    """Bash's brace expansion of unquoted text; None when it is too large or a form not handled."""
    start = _brace_open(text)
    if start is None:
        return [text]
    depth, commas, end = 0, [], None
    i = start
    while i < len(text):
        ch = text[i]
        if ch == "\\":
            i += 2
            continue
        if ch == "{":
            depth += 1
        elif ch == "}":
            depth -= 1
            if depth == 0:
                end = i
                break
        elif ch == "," and depth == 1:
            commas.append(i)
        i += 1
    if end is None:
        return [text]  # an unclosed brace is literal
    head, body, tail = text[:start], text[start + 1 : end], text[end + 1 :]
    options: list[str] | None
    if commas:
        cuts = [start, *commas, end]
        options = [text[a + 1 : b] for a, b in zip(cuts, cuts[1:], strict=False)]
    else:
        options = _sequence(body)
        if options is None:
            return None
        if not options:  # `{x}`: literal braces; expansion may still follow in the tail
            rest = expand_braces(tail)
            return None if rest is None else [head + "{" + body + "}" + r for r in rest]
    out: list[str] = []
    for option in options:
        words = expand_braces(head + option + tail)
        if words is None or len(out) + len(words) > MAX_BRACE_WORDS:
            return None
        out.extend(words)
    return out


def _brace_open(text: str) -> int | None:
    i = 0
    while i < len(text):
        if text[i] == "\\":
            i += 2
            continue
        if text[i] == "{" and (i == 0 or text[i - 1] != "$"):
            return i
        i += 1
    return None


def _sequence(body: str) -> list[str] | None:
    match = re.fullmatch(r"(-?\d+|[A-Za-z])\.\.(-?\d+|[A-Za-z])(?:\.\.-?\d+)?", body)
    if match and body.count("..") == 2:
        return None  # `{1..9..2}`: a step; not worth modelling
    if not match:
        return None if ".." in body else []
    a, b = match.groups()
    if a.lstrip("-").isdigit() and b.lstrip("-").isdigit():
        lo, hi = int(a), int(b)
        step = 1 if hi >= lo else -1
        if abs(hi - lo) >= MAX_BRACE_WORDS:
            return None
        return [str(n) for n in range(lo, hi + step, step)]
    if len(a) == len(b) == 1 and not a.isdigit() and not b.isdigit():
        step = 1 if ord(b) >= ord(a) else -1
        return [chr(c) for c in range(ord(a), ord(b) + step, step)]
    return None


def _unquoted(text: str, home: Path, *, first: bool) -> str | None:
    """An unquoted word's value (tilde, backslashes); a `Glob` when it has live glob characters."""
    if first:
        if text == "~" or text.startswith("~/"):
            text = str(home) + text[1:]
        elif text.startswith("~"):
            return None
    value: list[str] = []
    pattern: list[str] = []
    globbed = False
    i = 0
    while i < len(text):
        ch = text[i]
        if ch == "\\":
            nxt = text[i + 1 : i + 2]
            if nxt and nxt != "\n":
                value.append(nxt)
                pattern.append(_glob.escape(nxt))
            i += 2
            continue
        if ch in "*?":
            globbed = True
            pattern.append(ch)
        elif ch == "[" and (close := _bracket_end(text, i)) > 0:
            globbed = True
            pattern.append(_bracket(text[i : close + 1]))
            value.append(text[i : close + 1])
            i = close + 1
            continue
        else:
            pattern.append(_glob.escape(ch))
        value.append(ch)
        i += 1
    literal = "".join(value)
    return Glob(literal, "".join(pattern)) if globbed else literal


def _bracket_end(text: str, start: int) -> int:
    """Index of the `]` closing the bracket expression opened at `start`; -1 when none does."""
    i = start + 1
    if i < len(text) and text[i] in "!^":
        i += 1
    if i < len(text) and text[i] == "]":
        i += 1  # a leading `]` is a member
    while i < len(text):
        if text[i] == "[" and text[i + 1 : i + 2] in (":", "=", "."):
            end = text.find(text[i + 1] + "]", i + 2)
            if end < 0:
                return -1
            i = end + 2
            continue
        if text[i] == "]":
            return i
        i += 1
    return -1


def _bracket(expression: str) -> str:
    """A bash bracket expression as Python's fnmatch reads it: `[^x]` negates in bash (`[!x]`);
    a POSIX class (`[[:alpha:]]`) fnmatch does not know becomes `?`, a superset of its matches."""
    if any(mark in expression for mark in ("[:", "[=", "[.")):
        return "?"
    if expression.startswith("[^"):
        return "[!" + expression[2:]
    return expression


def _expansion(node: Any, home: Path, known: Known) -> str | None:
    names = list(node.named_children)
    if len(names) != 1 or names[0].type != "variable_name" or len(node.children) > 3:
        return None  # `${x:-w}` and friends: their value depends on more than the name
    name = names[0].text.decode()
    if name == "HOME":
        return str(home)
    return known.get(name) if known else None


def _has_brace_expansion(text: str) -> bool:
    depth = 0
    for index, ch in enumerate(text):
        if ch == "\\":
            continue
        if ch == "{" and (index == 0 or text[index - 1] != "$"):
            depth += 1
        elif ch == "}" and depth or ch in ",." and depth:
            return True
    return False


def unescape_double(text: str) -> str:
    return re.sub(r"\\([$`\"\\\n])", lambda m: "" if m.group(1) == "\n" else m.group(1), text)


def literal_assignment(node: Any, home: Path, known: Known = None) -> str | None:
    name = node.child_by_field_name("name")
    value = node.child_by_field_name("value")
    value_text = static(value, home, known) if value is not None else ""
    if name is None or value_text is None:
        return None
    return f"{name.text.decode()}={value_text}"


# -- words that stay data, and values bash evaluates as code ------------------------------------

_DYNAMIC = frozenset({"simple_expansion", "expansion", "command_substitution", "arithmetic_expansion"})
# `${x%pat}`, `${x:-word}` …: operators whose operands are patterns or words, never arithmetic.
_PLAIN_OPERATORS = frozenset(
    {"#", "##", "%", "%%", "/", "//", "/#", "/%", "^", "^^", ",", ",,", ":-", "-", ":+", "+",
     ":?", "?"}
)
_OPERANDS = frozenset(
    {"regex", "word", "string", "raw_string", "simple_expansion", "expansion", "concatenation",
     "command_substitution", "number", "string_content", "ansi_c_string"}
)
_NUMBER = re.compile(r"^\s*[+-]?(?:0[xX][0-9a-fA-F]+|\d+#[0-9A-Za-z@_]+|\d+)\s*$")
_NUMERIC_SPECIALS = frozenset({"?", "#", "$", "!"})


def splits(node: Any) -> bool:
    """An unquoted expansion: bash splits and globs its value into any number of words."""
    if node.type in _DYNAMIC:
        return True
    if node.type == "concatenation":
        return any(c.type in _DYNAMIC for c in node.children)
    return False


def is_number(value: str | None) -> bool:
    return value is not None and _NUMBER.match(value) is not None


def literal_number(node: Any, home: Path, known: Known = None) -> bool:
    """A test or arithmetic operand that is a number as written (or `$?`, `$#`), never a name."""
    if node.type == "simple_expansion":
        special = [c for c in node.named_children if c.type == "special_variable_name"]
        return bool(special) and special[0].text.decode() in _NUMERIC_SPECIALS
    if node.type == "expansion" and len(node.children) > 2 and node.children[1].type == "#":
        # `${#x}`, `${#a[@]}`: a length is always a number (its subscript must be safe too)
        return all(code_hazard(n) is None for n in (node, *node.named_children))
    if node.type == "string" and len(node.named_children) == 1:
        return literal_number(node.named_children[0], home, known)
    return is_number(static(node, home, known))


def code_hazard(node: Any) -> str | None:
    """Why bash would evaluate part of this expansion as code, or None."""
    kind = node.type
    if kind == "arithmetic_expansion":
        return None if _numeric_arithmetic(node) else (
            f"evaluates `{_clip(node)}` as arithmetic, where names and subscripts run code")
    if kind == "subscript":
        index = [c for c in node.named_children[1:]]
        if all(c.type == "number" or c.text in (b"@", b"*") for c in index):
            return None
        return f"evaluates the array subscript in `{_clip(node)}` as arithmetic"
    if kind != "expansion":
        return None
    children = node.children
    for position, child in enumerate(children):
        t = child.type
        if t in ("${", "}", "variable_name", "special_variable_name", "subscript"):
            continue
        if t == "#" and position == 1:
            continue  # `${#x}`: the length
        if t == "!":
            return f"expands `{_clip(node)}` indirectly, which evaluates a name taken from data"
        if t == "@":
            return f"transforms `{_clip(node)}`, which can expand a prompt or evaluate a name"
        if t == ":":
            rest = [c for c in children[position + 1 :] if c.is_named]
            if all(c.type == "number" for c in rest):
                return None
            return f"takes an offset in `{_clip(node)}`, which bash evaluates as arithmetic"
        if t in _PLAIN_OPERATORS or t in _OPERANDS:
            continue
        return f"uses the expansion `{_clip(node)}`, which tether does not analyse"
    return None


def _numeric_arithmetic(node: Any) -> bool:
    stack = list(node.children)
    while stack:
        child = stack.pop()
        if child.type == "variable_name":
            if not _NUMBER.match(child.text.decode()):
                return False
            continue
        if child.is_named and child.type not in (
            "number", "binary_expression", "unary_expression", "parenthesized_expression",
            "ternary_expression",
        ):
            return False
        stack.extend(child.children)
    return True


def _clip(node: Any, limit: int = 40) -> str:
    text: str = node.text.decode()
    return text if len(text) <= limit else text[: limit - 1] + "…"
