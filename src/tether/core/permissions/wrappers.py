"""Command wrappers, peeled: what `timeout 5 rm x`, `sudo -u root rm x`, `env X=1 rm x`,
`xargs rm`, `bash -c 'rm x'`, `git -C dir …` and `find -exec rm {} ;` really run.

`peel(argv, …)` returns the command allow rules are matched against (transparent wrappers
removed), every spelling seen on the way (what deny rules are matched against), the directory
it runs in, why no allow rule may admit it (`sudo`, `setsid`, a risky environment variable or
git option), or why it is opaque (`eval`, a shell reading a script file or stdin).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

Argv = tuple[str | None, ...]  # None: a word whose value is only known at run time

SHELLS = frozenset({"bash", "sh", "dash", "zsh", "ksh", "mksh", "ash", "busybox"})
OPAQUE_COMMANDS = {
    "eval": "evaluates a string as shell code",
    "source": "runs a script file in the current shell",
    ".": "runs a script file in the current shell",
    "alias": "defines an alias",
    "trap": "installs shell code to run on a signal",
    "coproc": "starts a coprocess",
    "enable": "changes the shell's builtins",
    "fc": "re-runs commands from history",
}
# Variables a command prefix may set without changing what runs (locale, colour, terminal size).
_HARMLESS_ENV = re.compile(r"^(?:LANG|LANGUAGE|LC_[A-Z]+|TZ|NO_COLOR|FORCE_COLOR|CLICOLOR|TERM|COLUMNS|LINES|CI)$")
_GIT_SAFE_GLOBALS = frozenset(
    {"--no-pager", "-P", "--no-optional-locks", "--literal-pathspecs", "--no-replace-objects"}
)


@dataclass
class Peeled:
    argv: Argv
    forms: tuple[Argv, ...]
    cwd: Path | None
    blocked: str | None = None
    opaque: str | None = None
    nested_script: str | None = None


def peel(
    argv: Argv, cwd: Path | None, home: Path, assignments: list[tuple[str, str | None]]
) -> Peeled:
    forms: list[Argv] = [argv]
    blocked: str | None = None
    for name, value in assignments:
        if not _HARMLESS_ENV.match(name) or value is None:
            blocked = f"sets {name} for the command it runs"
    current = argv
    for _ in range(12):
        head = current[0] if current else None
        if head is None:
            return Peeled(current, tuple(forms), cwd, blocked, "the command name is not static")
        base = os.path.basename(head)
        if base != head:
            forms.append((base, *current[1:]))
        step = _WRAPPERS.get(base)
        if step is None:
            break
        result = step(current)
        if result is None:
            break
        inner, note, moves_to = result
        if note is not None and note.startswith("opaque:"):
            return Peeled(current, tuple(forms), cwd, blocked, note[7:])
        if note is not None:
            blocked = blocked or note
        if moves_to is not None:
            cwd = _join(cwd, moves_to, home)
        if isinstance(inner, _EnvAssignments):
            for name, value in inner.pairs:
                if not _HARMLESS_ENV.match(name) or value is None:
                    blocked = blocked or f"sets {name} for the command it runs"
            inner = inner.argv
        if not inner:
            break
        current = inner
        forms.append(current)
    head = current[0] if current else None
    if head is None:
        return Peeled(current, tuple(forms), cwd, blocked, "the command name is not static")
    base = os.path.basename(head)
    if base in OPAQUE_COMMANDS:
        return Peeled(current, tuple(forms), cwd, blocked, f"`{base}` {OPAQUE_COMMANDS[base]}")
    if base in SHELLS:
        script = _shell_script(current)
        if script is _NO_SCRIPT:
            return Peeled(
                current, tuple(forms), cwd, blocked,
                f"`{base}` runs a script file or commands from its input",
            )
        if script is None:
            return Peeled(current, tuple(forms), cwd, blocked, f"`{base} -c` is given a script that is not static")
        return Peeled(current, tuple(forms), cwd, blocked, nested_script=str(script))
    if base == "git":
        current, forms, cwd, blocked = _normalise_git(current, forms, cwd, home, blocked)
    return Peeled(current, tuple(forms), cwd, blocked)


@dataclass(frozen=True)
class _EnvAssignments:
    argv: Argv
    pairs: tuple[tuple[str, str | None], ...]


_NO_SCRIPT = object()
_Step = tuple[Argv | _EnvAssignments, str | None, str | None]


def _skip_options(
    argv: Argv, with_value: frozenset[str], start: int = 1, *, optional_value: bool = False
) -> int | None:
    """Index of the first operand after the options; None when an option is not static."""
    i = start
    while i < len(argv):
        word = argv[i]
        if word is None:
            return None
        if word == "--":
            return i + 1
        if not word.startswith("-") or word == "-":
            return i
        if word in with_value:
            i += 2
            continue
        i += 1
    return i


def _timeout(argv: Argv) -> _Step | None:
    i = _skip_options(argv, frozenset({"-s", "--signal", "-k", "--kill-after"}))
    if i is None or i >= len(argv):
        return None
    return argv[i + 1 :], None, None


def _nice(argv: Argv) -> _Step | None:
    i = 1
    if i < len(argv) and argv[i] == "-n":
        i += 2
    elif i < len(argv) and argv[i] is not None and re.match(r"^-(?:-adjustment=)?-?\d+$", argv[i] or ""):
        i += 1
    return (argv[i:], None, None) if i < len(argv) else None


def _plain(argv: Argv) -> _Step | None:
    i = _skip_options(argv, frozenset())
    return (argv[i:], None, None) if i is not None and i < len(argv) else None


def _stdbuf(argv: Argv) -> _Step | None:
    i = _skip_options(argv, frozenset({"-i", "-o", "-e"}))
    return (argv[i:], None, None) if i is not None and i < len(argv) else None


def _command(argv: Argv) -> _Step | None:
    if any(w in ("-v", "-V") for w in argv[1:2]):
        return None  # `command -v x` looks a name up; it runs nothing
    return _plain(argv)


def _exec(argv: Argv) -> _Step | None:
    i = _skip_options(argv, frozenset({"-a"}))
    return (argv[i:], None, None) if i is not None and i < len(argv) else None


def _sudo(argv: Argv) -> _Step | None:
    values = frozenset({"-u", "-g", "-C", "-D", "-h", "-p", "-r", "-t", "-U", "-T", "-R"})
    i = _skip_options(argv, values)
    if i is None:
        return (), "opaque:`sudo` is given options that are not static", None
    inner = argv[i:]
    while inner and inner[0] is not None and re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", inner[0] or ""):
        inner = inner[1:]
    return inner, f"runs as another user through `{argv[0]}`", None


def _setsid(argv: Argv) -> _Step | None:
    i = _skip_options(argv, frozenset())
    if i is None or i >= len(argv):
        return None
    return argv[i:], "runs outside the session's process group (setsid)", None


def _env(argv: Argv) -> _Step | None:
    i = 1
    pairs: list[tuple[str, str | None]] = []
    moves_to: str | None = None
    cleared = False
    while i < len(argv):
        word = argv[i]
        if word is None:
            return (), "opaque:`env` is given words that are not static", None
        if word in ("-i", "--ignore-environment", "-"):
            cleared = True
            i += 1
        elif word in ("-u", "--unset"):
            i += 2
        elif word.startswith("--unset=") or word in ("-0", "--null", "-v", "--debug"):
            i += 1
        elif word in ("-C", "--chdir"):
            if i + 1 >= len(argv) or argv[i + 1] is None:
                return (), "opaque:`env -C` is given a directory that is not static", None
            moves_to = argv[i + 1]
            i += 2
        elif word.startswith("-S") or word.startswith("--split-string"):
            return (), "opaque:`env -S` splits a string into a command", None
        elif word == "--":
            i += 1
            break
        elif word.startswith("-"):
            return (), f"opaque:`env {word}` is an option tether does not know", None
        else:
            break
    while i < len(argv):
        word = argv[i]
        match = re.match(r"^([A-Za-z_][A-Za-z0-9_]*)=(.*)$", word or "")
        if not match:
            break
        pairs.append((match.group(1), match.group(2)))
        i += 1
    if i >= len(argv):
        return None
    note = "runs with an emptied environment (env -i)" if cleared else None
    return _EnvAssignments(argv[i:], tuple(pairs)), note, moves_to


def _xargs(argv: Argv) -> _Step | None:
    values = frozenset(
        {"-n", "-L", "-P", "-d", "-E", "-s", "-a", "--max-args", "--max-procs", "--delimiter",
         "--arg-file", "--max-chars", "--max-lines"}
    )
    i = 1
    replace = False
    while i < len(argv):
        word = argv[i]
        if word is None:
            return (), "opaque:`xargs` is given options that are not static", None
        if word == "--":
            i += 1
            break
        if not word.startswith("-"):
            break
        if word in ("-I", "-J"):
            replace = True
            i += 2
            continue
        if word.startswith(("-I", "--replace")):
            replace = True
        elif word in values:
            i += 2
            continue
        i += 1
    inner: Argv = argv[i:] if i < len(argv) else ("echo",)
    if replace:
        inner = (inner[0], *(None for _ in inner[1:]))
    # Arguments arrive on stdin: the command gets words tether cannot see.
    return (*inner, None), None, None


_WRAPPERS: dict[str, Any] = {
    "timeout": _timeout,
    "nice": _nice,
    "nohup": _plain,
    "time": _plain,
    "builtin": _plain,
    "stdbuf": _stdbuf,
    "ionice": lambda argv: _skip_then(argv, frozenset({"-c", "-n", "-p", "-P", "-u"})),
    "command": _command,
    "exec": _exec,
    "sudo": _sudo,
    "doas": _sudo,
    "setsid": _setsid,
    "env": _env,
    "xargs": _xargs,
}


def _skip_then(argv: Argv, values: frozenset[str]) -> _Step | None:
    i = _skip_options(argv, values)
    return (argv[i:], None, None) if i is not None and i < len(argv) else None


def _shell_script(argv: Argv) -> object:
    if os.path.basename(argv[0] or "") == "busybox":
        return _NO_SCRIPT
    i = 1
    while i < len(argv):
        word = argv[i]
        if word is None:
            return None if i > 1 and argv[i - 1] == "-c" else _NO_SCRIPT
        if word in ("-o", "+o", "-O", "+O"):
            i += 2
            continue
        if word.startswith("-") and not word.startswith("--") and "c" in word[1:]:
            return argv[i + 1] if i + 1 < len(argv) else _NO_SCRIPT
        if not word.startswith(("-", "+")):
            return _NO_SCRIPT
        i += 1
    return _NO_SCRIPT


def _normalise_git(
    argv: Argv, forms: list[Argv], cwd: Path | None, home: Path, blocked: str | None
) -> tuple[Argv, list[Argv], Path | None, str | None]:
    i = 1
    moved = cwd
    risky: str | None = None
    kept: list[str | None] = ["git"]
    while i < len(argv):
        word = argv[i]
        if word is None or not word.startswith("-"):
            break
        if word == "-C":
            target = argv[i + 1] if i + 1 < len(argv) else None
            moved = _join(moved, target, home) if target is not None else None
            i += 2
            continue
        if word in _GIT_SAFE_GLOBALS:
            i += 1
            continue
        risky = risky or f"passes git the option {word}, which can change what git runs"
        kept.append(word)
        if word in ("-c", "--exec-path", "--git-dir", "--work-tree", "--namespace", "--config-env"):
            kept.append(argv[i + 1] if i + 1 < len(argv) else None)
            i += 2
        else:
            i += 1
    normal: Argv = ("git", *argv[i:])
    if normal != argv:
        forms.append(normal)
    if risky:
        return (*kept, *argv[i:]), forms, moved, blocked or risky
    return normal, forms, moved, blocked


def find_exec(argv: Argv) -> list[Argv]:
    if not argv or os.path.basename(argv[0] or "") != "find":
        return []
    out: list[Argv] = []
    i = 1
    while i < len(argv):
        if argv[i] in ("-exec", "-execdir", "-ok", "-okdir"):
            j = i + 1
            inner: list[str | None] = []
            while j < len(argv) and argv[j] not in (";", "+"):
                inner.append(None if argv[j] == "{}" else argv[j])
                j += 1
            if inner:
                out.append(tuple(inner))
            i = j
        i += 1
    return out


def _join(cwd: Path | None, target: str | None, home: Path) -> Path | None:
    if cwd is None or target is None:
        return None
    if target == "~" or target.startswith("~/"):
        target = str(home) + target[1:]
    return Path(os.path.normpath(os.path.join(cwd, target)))


def cd_target(argv: Argv, cwd: Path | None, home: Path) -> Path | None:
    operands = [w for w in argv[1:] if w is None or not w.startswith("-") or w == "-"]
    if not operands:
        return home
    target = operands[0]
    if target is None or target == "-":
        return None
    return _join(cwd, target, home)
