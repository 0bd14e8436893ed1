"""Command wrappers, peeled: what `timeout 5 rm x`, `sudo -u root rm x`, `env X=1 rm x`,
`xargs rm`, `bash -c 'rm x'`, `git -C dir …` and `find -exec rm {} ;` really run.

`peel(argv, …)` returns the command allow rules are matched against (transparent wrappers
removed, each read with its real option grammar — see `launchers`), every spelling seen on the
way (what deny rules are matched against), the directory it runs in, why no allow rule may admit
it (`sudo`, `setsid`, a risky environment variable or git option), or why it is opaque (`eval`, a
shell reading a script file or stdin, a wrapper option tether does not know, a `git` alias).
A launcher whose grammar is not modelled (`strace`, `watch` …) yields `maybe_forms`: every tail of
its argv, which deny rules are matched against as "maybe" (ask).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tether.core.permissions.launchers import RUNNERS, STEPS, Argv, _Wrapper, options
from tether.core.permissions.options import Grammar

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
# `git -c KEY=…` with these keys runs a program (or defines an alias): what runs is unknowable.
_GIT_PROGRAM_KEYS = re.compile(
    r"^(?:alias\.|core\.(?:fsmonitor|pager|editor|sshcommand|hookspath|askpass|gitproxy)|"
    r".*\.(?:command|textconv|process|clean|smudge|program|helper|external|cmd|tool|path)$|"
    r"include|sequence\.editor|pager\.|credential|uploadpack|receivepack|remote\..*\.(?:"
    r"uploadpack|receivepack|vcs))",
    re.I,
)


@dataclass
class Peeled:
    argv: Argv
    forms: tuple[Argv, ...]
    cwd: Path | None
    blocked: str | None = None
    opaque: str | None = None
    nested_script: str | None = None
    maybe_forms: tuple[Argv, ...] = ()


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
        if base in RUNNERS:
            return Peeled(current, tuple(forms), cwd, blocked, maybe_forms=_tails(current))
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
        git = _normalise_git(current, forms, cwd, home, blocked)
        if isinstance(git, str):
            return Peeled(current, tuple(forms), cwd, blocked, git)
        current, forms, cwd, blocked = git
    return Peeled(current, tuple(forms), cwd, blocked)


@dataclass(frozen=True)
class _EnvAssignments:
    argv: Argv
    pairs: tuple[tuple[str, str | None], ...]


_NO_SCRIPT = object()
_Step = tuple[Any, str | None, str | None]


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



_XARGS = _Wrapper("xargs", Grammar("0a@d:E:e?I:i?l?L:n:oprs:txP:",
                                   "null arg-file=@ delimiter= eof[=] replace[=] max-lines[=] "
                                   "max-args= open-tty interactive no-run-if-empty max-chars= "
                                   "show-limits verbose exit max-procs= process-slot-var="))


def _xargs(argv: Argv) -> _Step | None:
    parsed = options(_XARGS, argv)
    if isinstance(parsed, str):
        return (), "opaque:" + parsed, None
    i, seen = parsed
    replace = any(name in ("-I", "-i", "--replace") for name, _ in seen)
    inner: Argv = argv[i:] if i < len(argv) else ("echo",)
    if replace:
        inner = (inner[0], *(None for _ in inner[1:]))
    # Arguments arrive on stdin: the command gets words tether cannot see.
    return (*inner, None), None, None


def _sudo(argv: Argv) -> _Step | None:
    result = STEPS[os.path.basename(argv[0] or "")](argv)
    if result is None:
        return (), "opaque:`sudo` without a command runs a shell", None
    inner, note, moves_to = result
    pairs = []
    while inner and inner[0] is not None and re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", inner[0]):
        name, _, value = inner[0].partition("=")
        pairs.append((name, value))
        inner = inner[1:]
    return _EnvAssignments(tuple(inner), tuple(pairs)), note, moves_to


_WRAPPERS: dict[str, Any] = {**STEPS, "env": _env, "xargs": _xargs, "sudo": _sudo, "doas": _sudo}


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
) -> tuple[Argv, list[Argv], Path | None, str | None] | str:
    """git's global options peeled (`-C dir` moves it); a string says why it is opaque."""
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
        value: str | None = None
        if word in ("-c", "--exec-path", "--git-dir", "--work-tree", "--namespace", "--config-env"):
            value = argv[i + 1] if i + 1 < len(argv) else None
            kept.append(value)
            i += 2
        else:
            if word.startswith(("-c", "--config-env=")):
                value = word[2:] if word.startswith("-c") else word.split("=", 1)[1]
            i += 1
        if word.startswith(("-c", "--config-env")) and (
            value is None or _runs_program(value, env=word.startswith("--config-env"))
        ):
            return f"sets git config `{value or '…'}`, which can make git run any program"
        if word.startswith("--exec-path"):
            return "points git at another directory of programs (--exec-path)"
    sub = argv[i] if i < len(argv) else None
    if sub is None and i < len(argv):
        return "the git subcommand is not static"
    if sub is not None and sub not in _git_commands():
        return f"`git {sub}` is not a git command: it may be an alias or a git-{sub} program"
    normal: Argv = ("git", *argv[i:])
    if normal != argv:
        forms.append(normal)
    if risky:
        return (*kept, *argv[i:]), forms, moved, blocked or risky
    return normal, forms, moved, blocked


def _runs_program(setting: str, *, env: bool) -> bool:
    """Whether `git -c KEY=VALUE` (or `--config-env=KEY=VAR`: the value is unknown) makes git run
    a program, defines an alias, includes config or moves hooks."""
    from tether.core.permissions.gitconfig import program_key

    key, _, value = setting.partition("=")
    key = key.strip()
    if _GIT_PROGRAM_KEYS.match(key):
        return True
    return program_key(key, "x" if env else value)


def _tails(argv: Argv) -> tuple[Argv, ...]:
    """Every command a launcher of unknown grammar might run: each tail of its argv, and each
    word that is itself a command line (`su -c 'rm x'`, `watch 'rm x'`), split as sh would."""
    import shlex

    out: list[Argv] = []
    for k in range(1, len(argv)):
        if argv[k] is None:
            continue
        out.append(argv[k:])
        word = argv[k] or ""
        if any(c.isspace() for c in word):
            try:
                inner = tuple(shlex.split(word))
            except ValueError:
                inner = tuple(word.split())
            out.extend(inner[j:] for j in range(len(inner)))
    return tuple(out)


def _git_commands() -> frozenset[str]:
    from tether.core.permissions.readonly_git import GIT_COMMANDS

    return GIT_COMMANDS


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
    if cwd is None or target is None or _is_glob(target):
        return None
    if target == "~" or target.startswith("~/"):
        target = str(home) + target[1:]
    return Path(os.path.normpath(os.path.join(cwd, target)))


def cd_target(argv: Argv, cwd: Path | None, home: Path) -> Path | None:
    operands = [w for w in argv[1:] if w is None or not w.startswith("-") or w == "-"]
    if not operands:
        return home
    target = operands[0]
    if target is None or target == "-" or _is_glob(target):
        return None  # a glob picks its directory on disk at run time (a link to anywhere)
    return _join(cwd, target, home)


def moved_to(argv: Argv, cwd: Path | None, home: Path, *, cdpath: bool) -> Path | None:
    """Where `cd`/`pushd`/`popd` leave the shell; None when only the run can say (the directory
    stack, `-`, a glob, or a relative name while the command has set CDPATH)."""
    operands = [w for w in argv[1:] if w is None or not w.startswith("-") or w == "-"]
    if argv[0] == "popd" or (argv[0] == "pushd" and (
            not operands or any(w is None or w[:1] in "+-" for w in argv[1:]))):
        return None
    target = operands[0] if operands else None
    if cdpath and target is not None and target not in (".", "..") and not target.startswith(
            ("/", "./", "../", "~")):
        return None
    return cd_target(argv, cwd, home)


def _is_glob(word: str) -> bool:
    from tether.core.permissions.words import Glob

    return isinstance(word, Glob)
