"""The workspace files the user's command hooks run, which therefore arm later execution.

A PostToolUse hook `sh scripts/fmt.sh` runs `scripts/fmt.sh` unsandboxed after every matching
call: a sandboxed or auto-allowed command, or an edit, that rewrites that file would have its
text run outside the sandbox without anyone being asked. So those files are treated like
`.envrc` or `.git/hooks`: file-tool writes to them ask (`Scope.armed_files`) and the workspace
sandbox mounts them read-only (`ShellSandbox.readonly_files`).

Found from each hook command's simple commands (split on `;`, `&&`, `||`, `|`, newlines): a
program named by a path (`./scripts/x`, `scripts/x`, `"$CLAUDE_PROJECT_DIR"/hooks/x.sh`); the
script an interpreter runs (`sh x`, `python3 tools/y.py`, `node x.js`; not `-c`/`-m`); what
`source`/`.` reads; after a `cd DIR`, from there; through `uv run`/`poetry run` …; and the
files `make`, `just`, `npm`/`pnpm`/`yarn`, `pre-commit`, `tox` and `nox` read their recipes
from. Variables naming the project folder expand to it.
Only files inside the workspace roots count: one outside is not writable by the sandbox, and
file tools ask for it anyway. A script that does not exist yet cannot be mounted; one that
appears during the session (`ScriptWatch`) is not run by its hook, which fails with a message
saying so, until a new session starts with the file there to be reviewed.
"""

from __future__ import annotations

import os
import re
import shlex
from collections.abc import Iterable, Sequence
from pathlib import Path

from tether.runtime.extensions.hooks import HookCommand, HookConfig

_INTERPRETERS = re.compile(
    r"(?:ba|da|k|z|fi)?sh|python[0-9.]*|pypy[0-9.]*|node|nodejs|deno|bun|tsx|ts-node|ruby|perl|"
    r"php|lua|Rscript"
)
_NOT_A_SCRIPT = ("-c", "-m", "-e", "--eval", "-E", "-p", "--print")
_RECIPES = {
    "make": ("Makefile", "makefile", "GNUmakefile"),
    "just": ("justfile", "Justfile", ".justfile"),
    "npm": ("package.json",), "pnpm": ("package.json",), "yarn": ("package.json",),
    "pre-commit": (".pre-commit-config.yaml",), "tox": ("tox.ini",), "nox": ("noxfile.py",),
}
_RUNNERS = ("uv", "poetry", "pipenv", "pdm", "hatch", "rye")  # `uv run X …` runs X
_SEPARATORS = {";", "&&", "||", "|", "&", "\n"}
_PROJECT_VARS = ("CLAUDE_PROJECT_DIR", "TETHER_PROJECT_DIR", "PWD")


def hook_scripts(config: HookConfig, cwd: Path, roots: Sequence[Path] = ()) -> tuple[Path, ...]:
    """Resolved paths of the workspace files the configured command hooks run."""
    if config.disabled:
        return ()
    inside = tuple(Path(r).resolve() for r in (cwd, *roots))
    found: dict[Path, None] = {}
    for groups in config.events.values():
        for group in groups:
            for hook in group.hooks:
                if isinstance(hook, HookCommand):
                    for path in scripts_of(hook.command, cwd):
                        real = Path(os.path.realpath(path))
                        if any(real == r or r in real.parents for r in inside):
                            found[real] = None
    return tuple(found)


def scripts_of(command: str, cwd: Path) -> list[Path]:
    """The files one hook command runs or reads its program from (see the module docstring)."""
    text = command
    for var in _PROJECT_VARS:
        text = text.replace("${" + var + "}", str(cwd)).replace("$" + var, str(cwd))
    try:
        lexer = shlex.shlex(text, posix=True, punctuation_chars=";&|")
        lexer.whitespace_split = True
        words = list(lexer)
    except ValueError:
        return []
    out: list[Path] = []
    for argv in _simple_commands(words):
        if argv[0] == "cd" and len(argv) == 2:
            cwd = _at(argv[1], cwd)  # `cd scripts && sh fmt.sh`
            continue
        out.extend(_scripts_of_argv(argv, cwd))
    return out


def _simple_commands(words: Iterable[str]) -> list[list[str]]:
    commands: list[list[str]] = [[]]
    for word in words:
        if word in _SEPARATORS or set(word) <= set(";&|"):
            commands.append([])
        else:
            commands[-1].append(word)
    return [c for c in commands if c]


def _scripts_of_argv(argv: list[str], cwd: Path) -> list[Path]:
    while argv and re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", argv[0]):
        argv = argv[1:]  # VAR=value prefixes
    while argv and argv[0] in ("exec", "command", "nohup", "time", "env"):
        argv = argv[1:]
        while argv and (argv[0].startswith("-") or re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", argv[0])):
            argv = argv[1:]  # env's options and assignments
    if len(argv) > 2 and argv[0] in _RUNNERS and argv[1] == "run":
        argv = argv[2:]
        while argv and argv[0].startswith("-"):
            argv = argv[1:]  # the runner's own options
    if not argv:
        return []
    head, name = argv[0], os.path.basename(argv[0])
    found: list[Path] = []
    if "/" in head:
        found.append(_at(head, cwd))
    if name in ("source", ".") and len(argv) > 1:
        found.append(_at(argv[1], cwd))
    elif _INTERPRETERS.fullmatch(name):
        shell = name.endswith("sh")  # for a shell, `-e` is errexit, not inline code
        script = _first_operand(argv[1:], ("-c", "-s") if shell else _NOT_A_SCRIPT)
        if script is not None:
            found.append(_at(script, cwd))
    elif name in _RECIPES:
        folder = _option_value(argv, "-C") or _option_value(argv, "--prefix")
        base = _at(folder, cwd) if folder else cwd
        found.extend(base / recipe for recipe in _RECIPES[name])
    return found


def _first_operand(args: list[str], inline: Sequence[str]) -> str | None:
    for arg in args:
        if arg in inline:
            return None  # inline code or a module: no file of the workspace by name
        if arg == "--":
            continue
        if not arg.startswith("-") and "=" not in arg:
            return arg
    return None


def _option_value(argv: list[str], option: str) -> str | None:
    for i, arg in enumerate(argv[:-1]):
        if arg == option:
            return argv[i + 1]
    return None


def _at(spelled: str, cwd: Path) -> Path:
    path = Path(os.path.expanduser(spelled))
    return path if path.is_absolute() else cwd / path


class ScriptWatch:
    """The scripts of each command hook that were missing when the session started: one that
    appears later (written by the agent, perhaps from inside the sandbox, which could not mount
    it read-only while it did not exist) must not run unreviewed. `make` prefers GNUmakefile to
    Makefile, so a recipe file appearing beside an existing one counts too."""

    def __init__(self, config: HookConfig, cwd: Path) -> None:
        self.missing: dict[str, tuple[Path, ...]] = {}
        for groups in config.events.values():
            for group in groups:
                for hook in group.hooks:
                    if isinstance(hook, HookCommand) and hook.command not in self.missing:
                        absent = tuple(p for p in scripts_of(hook.command, cwd) if not os.path.lexists(p))
                        if absent:
                            self.missing[hook.command] = absent

    def appeared(self, command: str) -> Path | None:
        """A script `command` runs that did not exist at the start and does now, or None."""
        return next((p for p in self.missing.get(command, ()) if os.path.lexists(p)), None)
