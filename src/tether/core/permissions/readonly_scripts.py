"""`sed` and `awk` programs that only read: the few forms a coding agent uses to look at text.

Both languages can write files and run programs (`sed 'w f'`, `s///e`, `awk '{print > "f"}'`,
`system()`, `"cmd" | getline`), so a program is read-only only when it is made entirely of a
small, checked vocabulary: for sed, addresses (`1,20`, `$`, `/re/`) with `p d q = l n N …` and
`s///` / `y///` whose flags are only `g p i I m M` and digits; for awk, a program with no output
redirection, pipe, `system`, `getline`, `close`, `ARGV` or gawk `@` directive. Anything else —
and any option that reads a program from a file or edits in place — is not read-only.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from tether.core.permissions.readonly import ReadOnly

_SED_SIMPLE = set("pdqQ=lnNDPhHgGx")
_SED_FLAGS = re.compile(r"^[gpiImM0-9]*$")
_ADDRESS = re.compile(r"^(?:\d+(?:~\d+)?|\$)")


def inspect_sed(args: Sequence[str | None]) -> ReadOnly | None:
    if any(a is None for a in args):
        return None
    words = [a for a in args if a is not None]
    scripts: list[str] = []
    files: list[str] = []
    i = 0
    while i < len(words):
        word = words[i]
        i += 1
        if word == "--":
            files.extend(words[i:])
            break
        if word.startswith("--"):
            name, eq, value = word.partition("=")
            if name in ("--expression", "--expr", "--e", "--ex", "--exp", "--expre", "--expres",
                        "--express", "--expressi", "--expressio"):
                if not eq:
                    if i >= len(words):
                        return None
                    value = words[i]
                    i += 1
                scripts.append(value)
            elif name in ("--line-length",) and not eq:
                i += 1
            elif name not in ("--quiet", "--silent", "--regexp-extended", "--separate",
                              "--unbuffered", "--null-data", "--posix", "--debug", "--sandbox",
                              "--line-length"):
                return None  # --in-place, --file, abbreviations of them, anything unknown
            continue
        if word.startswith("-") and word != "-":
            for k in range(1, len(word)):
                letter = word[k]
                if letter in "nErsuz":
                    continue
                if letter in "el":
                    value = word[k + 1 :]
                    if not value:
                        if i >= len(words):
                            return None
                        value = words[i]
                        i += 1
                    if letter == "e":
                        scripts.append(value)
                    break
                return None  # -i (in place), -f (a script file), anything unknown
            continue
        files.append(word)
    if not scripts:
        if not files:
            return None
        scripts.append(files.pop(0))
    if not all(_sed_read_only(script) for script in scripts):
        return None
    # the script is not a path (`/re/p` is no file): the operands are the files it reads
    return ReadOnly(paths=False, files=tuple(files))


def _sed_read_only(script: str) -> bool:
    i, n = 0, len(script)
    while i < n:
        while i < n and script[i] in " \t\n;":
            i += 1
        if i >= n:
            return True
        i = _sed_address(script, i)
        if i < 0:
            return False
        if i < n and script[i] == ",":
            i = _sed_address(script, i + 1)
            if i < 0:
                return False
        while i < n and script[i] in " \t":
            i += 1
        if i < n and script[i] == "!":
            i += 1
        if i >= n:
            return False
        command = script[i]
        i += 1
        if command in _SED_SIMPLE:
            if command in "qQ":
                while i < n and script[i].isdigit():
                    i += 1
        elif command in "sy":
            if i >= n or script[i] in "\\\n ":
                return False
            delimiter = script[i]
            i = _sed_part(script, i + 1, delimiter)
            i = _sed_part(script, i, delimiter) if i >= 0 else -1
            if i < 0:
                return False
            flags_end = i
            while flags_end < n and script[flags_end] not in ";\n}":
                flags_end += 1
            flags = script[i:flags_end].strip()
            if command == "y" and flags or not _SED_FLAGS.match(flags):
                return False  # `w FILE`, `e` (run the pattern space), anything unknown
            i = flags_end
        else:
            return False  # r R w W e F z a i c { } b t T : v …
        while i < n and script[i] in " \t":
            i += 1
        if i < n and script[i] not in ";\n":
            return False
    return True


def _sed_address(script: str, i: int) -> int:
    """Index after an address at `i` (or `i` when there is none); -1 when it does not parse."""
    match = _ADDRESS.match(script[i:])
    if match:
        return i + match.end()
    if i < len(script) and script[i] == "/":
        end = _sed_part(script, i + 1, "/")
        if end < 0:
            return -1
        return end + 1 if end < len(script) and script[end] in "IM" else end
    return i


def _sed_part(script: str, i: int, delimiter: str) -> int:
    """Index after the closing `delimiter` of a regex or replacement starting at `i`."""
    while i < len(script):
        ch = script[i]
        if ch == "\\":
            i += 2
            continue
        if ch == delimiter:
            return i + 1
        i += 1
    return -1


# -- awk -----------------------------------------------------------------------------------

_AWK_FORBIDDEN = re.compile(r"[>|@]|\b(?:system|getline|close|fflush|ARGV|ARGC|PROCINFO)\b")


def inspect_awk(args: Sequence[str | None]) -> ReadOnly | None:
    if any(a is None for a in args):
        return None
    words = [a for a in args if a is not None]
    i = 0
    while i < len(words):
        word = words[i]
        if word == "--":
            i += 1
            break
        if not word.startswith("-") or word == "-":
            break
        if word in ("-F", "-v"):
            i += 2
            continue
        if word.startswith("-F") or (word.startswith("-v") and "=" in word):
            i += 1
            continue
        return None  # -f (a program file), -E, -i, -l, --exec … load or run other code
    if i >= len(words):
        return None
    program, operands = words[i], words[i + 1 :]
    if _AWK_FORBIDDEN.search(program):
        return None
    files = [w for w in operands if not re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", w)]
    return ReadOnly(paths=False, files=tuple(files))
