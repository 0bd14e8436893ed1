"""What a shell command would run, read with bash's own grammar (tree-sitter-bash).

`analyse(command, cwd, home)` returns every simple command bash could execute — through `;`,
`&&`, `||`, pipes, `&`, newlines, subshells, `$(…)`, backticks, `<(…)`, heredocs, control flow,
`find -exec`, `xargs`, `bash -c 'literal'` — each with its words resolved where they are static,
the wrappers peeled (`timeout 5 rm x` is judged as `rm x`), and the directory it would run in.
What the analysis cannot see into (`eval`, `$cmd` as a command, `bash -c "$x"`, a function
definition, a parse error, a carriage return) is listed in `opaque`; the checker asks for those.

The analysis never executes anything and never looks at the disk.
"""

from __future__ import annotations

import os
import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

Argv = tuple[str | None, ...]  # None: a word whose value is only known at run time

MAX_NESTING = 5  # `bash -c` inside `bash -c` …; deeper is opaque

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
_COMMAND_NAME = re.compile(r"^(?:[A-Za-z0-9_.+@%/-][A-Za-z0-9_.+@%:,/=-]*|\[|\[\[)$")
_GIT_SAFE_GLOBALS = frozenset(
    {"--no-pager", "-P", "--no-optional-locks", "--literal-pathspecs", "--no-replace-objects"}
)


@dataclass(frozen=True, slots=True)
class SimpleCommand:
    argv: Argv  # after peeling transparent wrappers: what allow rules are matched against
    forms: tuple[Argv, ...]  # every spelling seen while peeling: what deny rules are matched against
    cwd: Path | None  # where it runs (None: a `cd` made it unknowable)
    source: str
    role: Literal["command", "wrapper"] = "command"  # wrappers count for deny only
    blocked: str | None = None  # why no allow rule may admit it (sudo, LD_PRELOAD=…, setsid)


@dataclass(frozen=True, slots=True)
class Redirect:
    target: str | None  # None: not static
    write: bool
    cwd: Path | None


@dataclass(frozen=True, slots=True)
class ShellAnalysis:
    commands: tuple[SimpleCommand, ...]
    redirects: tuple[Redirect, ...]
    opaque: tuple[str, ...]  # reasons the analysis could not see everything it would run


class _Opaque(Exception):
    pass


@lru_cache(maxsize=1)
def _parser() -> Any:
    import tree_sitter
    import tree_sitter_bash

    return tree_sitter.Parser(tree_sitter.Language(tree_sitter_bash.language()))


def _suspicious_character(command: str) -> str | None:
    for ch in command:
        if ch in "\t\n ":
            continue
        if ch == "\r":
            return "contains a carriage return, which bash and tether could split differently"
        cat = unicodedata.category(ch)
        if cat in ("Cc", "Cf", "Zl", "Zp") or (cat == "Zs" and ch != " "):
            return f"contains the invisible or control character U+{ord(ch):04X}"
    return None


@lru_cache(maxsize=4096)
def analyse(command: str, cwd: Path, home: Path) -> ShellAnalysis:
    walker = _Walker(home)
    walker.run(command, cwd, depth=0)
    return ShellAnalysis(tuple(walker.commands), tuple(walker.redirects), tuple(walker.opaque))


@dataclass
class _Walker:
    home: Path
    commands: list[SimpleCommand] = field(default_factory=list)
    redirects: list[Redirect] = field(default_factory=list)
    opaque: list[str] = field(default_factory=list)
    cwd: Path | None = None

    def run(self, command: str, cwd: Path | None, depth: int) -> None:
        why = _suspicious_character(command)
        if why:
            self.opaque.append(f"the command {why}")
            return
        tree = _parser().parse(command.encode())
        root = tree.root_node
        if root.has_error:
            self.opaque.append("bash would parse the command differently than tether can read it")
            return
        saved = self.cwd
        self.cwd = cwd
        self.depth = depth
        try:
            self.statement(root)
        except _Opaque as exc:
            self.opaque.append(str(exc))
        finally:
            if depth:
                self.cwd = saved

    # -- statements ------------------------------------------------------------------------

    def statement(self, node: Any) -> None:
        """One statement; what cannot be seen into is noted and the walk goes on, so a deny in a
        later segment still wins over the ask of an earlier opaque one."""
        try:
            self._statement(node)
        except _Opaque as exc:
            self.opaque.append(str(exc))

    def _statement(self, node: Any) -> None:
        kind = node.type
        handler = _STATEMENTS.get(kind)
        if handler is None:
            if not node.is_named or kind == "comment":
                return
            raise _Opaque(f"uses `{_clip(node)}` ({kind}), which tether does not analyse")
        handler(self, node)

    def sequence(self, node: Any) -> None:
        for child in node.named_children:
            self.statement(child)

    def isolated(self, node: Any) -> None:
        """A subshell: a `cd` inside it does not move the commands after it."""
        saved = self.cwd
        self.sequence(node)
        self.cwd = saved

    def pipeline(self, node: Any) -> None:
        for child in node.named_children:
            saved = self.cwd
            self.statement(child)
            self.cwd = saved

    def conditional(self, node: Any) -> None:
        """Control flow and `||`: if a `cd` may or may not have run, the directory is unknown."""
        saved = self.cwd
        if node.type == "list" and all(c.type == "&&" for c in node.children if not c.is_named):
            self.sequence(node)
            return
        for child in node.children:
            if child.is_named:
                if child.type in _WORDLIKE:
                    self.word(child)
                elif child.type == "variable_name":
                    continue
                else:
                    self.statement(child)
        if self.cwd != saved:
            self.cwd = None

    def redirected(self, node: Any) -> None:
        redirects = [c for i, c in enumerate(node.children)
                     if node.field_name_for_child(i) == "redirect" or c.type.endswith("_redirect")]
        body = node.child_by_field_name("body")
        if body is not None and body.type == "command":
            # `timeout 5 >/dev/null rm -rf x`: bash gives the words after the target to the
            # command; the grammar hangs them on the redirection. Judge them as the command's.
            self.command(body, trailing=redirects)
            return
        for child in redirects:
            if self.redirect(child):
                raise _Opaque(f"gives words after the redirection `{_clip(child)}` to a compound command")
        for child in node.children:
            if child.is_named and child not in redirects:
                self.statement(child)

    def test(self, node: Any) -> None:
        self.substitutions(node)

    def assignment(self, node: Any) -> None:
        self.substitutions(node)
        name = node.child_by_field_name("name")
        label = _clip(node)
        self.commands.append(
            SimpleCommand(
                (label,), ((label,),), self.cwd, label,
                blocked=f"assigns the shell variable {name.text.decode() if name else label}",
            )
        )

    def function(self, node: Any) -> None:
        raise _Opaque("defines a shell function, which could shadow any command")

    def declaration(self, node: Any) -> None:
        argv: list[str | None] = []
        for child in node.children:
            if child.type in ("export", "declare", "local", "readonly", "typeset", "unset", "unsetenv"):
                argv.append(child.type)
            elif child.type == "variable_assignment":
                self.substitutions(child)
                argv.append(_literal_assignment(child, self))
            elif child.is_named:
                argv.append(self.word(child))
        self.add(tuple(argv), node)

    # -- words -----------------------------------------------------------------------------

    def substitutions(self, node: Any) -> None:
        """Analyse every `$(…)`, backtick and `<(…)` under `node`: they run before the command."""
        stack = [node]
        while stack:
            current = stack.pop()
            if current.type in ("command_substitution", "process_substitution"):
                if current.children and current.children[0].type == "`" and "\\`" in current.text.decode():
                    raise _Opaque("nests backticks, which bash expands in a second pass")
                saved = self.cwd
                self.sequence(current)
                self.cwd = saved
                continue
            if current.type == "expansion" and _hides_substitution(current):
                raise _Opaque(f"hides a command inside the expansion `{_clip(current)}`")
            stack.extend(current.children)

    def word(self, node: Any) -> str | None:
        self.substitutions(node)
        return _static(node, self.home)

    # -- commands --------------------------------------------------------------------------

    def command(self, node: Any, trailing: Sequence[Any] = ()) -> None:
        assignments: list[tuple[str, str | None]] = []
        argv: list[str | None] = []
        spelled: str | None = None
        for index, child in enumerate([*node.children, *trailing]):
            if index >= len(node.children):
                argv.extend(self.redirect(child))
                continue
            field_name = node.field_name_for_child(index)
            if child.type == "variable_assignment":
                self.substitutions(child)
                name = child.child_by_field_name("name")
                value = child.child_by_field_name("value")
                assignments.append(
                    (name.text.decode() if name else "?", _static(value, self.home) if value else "")
                )
            elif field_name == "redirect" or child.type.endswith("_redirect"):
                argv.extend(self.redirect(child))
            elif child.type == "command_name":
                word = child.named_children[0] if child.named_children else child
                raw = word.text.decode()
                if word.type == "word" and _COMMAND_NAME.match(raw):
                    argv.append(raw)
                    continue
                # `'rm'`, `\rm`, `r\m`: bash runs rm, so deny rules see rm, but no allow rule
                # is inherited by a spelling it does not literally name.
                name = self.word(word)
                if name is None or not _COMMAND_NAME.match(name):
                    raise _Opaque(f"the command name `{_clip(word)}` is not a plain word")
                argv.append(name)
                spelled = f"spells the command name as `{_clip(word)}`"
            elif child.is_named:
                argv.append(self.word(child))
        if not argv:
            return
        self.add(tuple(argv), node, assignments, blocked=spelled)

    def add(
        self,
        argv: Argv,
        node: Any,
        assignments: list[tuple[str, str | None]] | None = None,
        blocked: str | None = None,
    ) -> None:
        source = node.text.decode()
        peeled = _peel(argv, self.cwd, self.home, assignments or [])
        if blocked and not peeled.blocked:
            peeled.blocked = blocked
        if peeled.nested_script is not None:
            if self.depth >= MAX_NESTING:
                raise _Opaque("nests shells more than five deep")
            self.commands.append(
                SimpleCommand(argv, peeled.forms, peeled.cwd, source, role="wrapper")
            )
            inner = _Walker(self.home)
            inner.run(peeled.nested_script, peeled.cwd, self.depth + 1)
            self.commands.extend(inner.commands)
            self.redirects.extend(inner.redirects)
            self.opaque.extend(inner.opaque)
            return
        if peeled.opaque:
            self.commands.append(
                SimpleCommand(argv, peeled.forms, peeled.cwd, source, role="wrapper")
            )
            raise _Opaque(peeled.opaque)
        self.commands.append(
            SimpleCommand(peeled.argv, peeled.forms, peeled.cwd, source, blocked=peeled.blocked)
        )
        for inner_argv in _find_exec(peeled.argv):
            self.add_argv(inner_argv, source)
        final = peeled.argv
        if final and final[0] == "cd":
            self.cwd = _cd_target(final, self.cwd, self.home)

    def add_argv(self, argv: Argv, source: str) -> None:
        peeled = _peel(argv, self.cwd, self.home, [])
        if peeled.opaque:
            raise _Opaque(peeled.opaque)
        if peeled.nested_script is not None:
            raise _Opaque("runs a shell from `find -exec`")
        self.commands.append(
            SimpleCommand(peeled.argv, peeled.forms, peeled.cwd, source, blocked=peeled.blocked)
        )

    def redirect(self, node: Any) -> list[str | None]:
        """Record what a redirection reads or writes; returns the words after its target, which
        bash passes to the command as arguments."""
        kind = node.type
        if kind == "heredoc_redirect":
            start = next((c for c in node.children if c.type == "heredoc_start"), None)
            quoted = start is not None and any(q in start.text.decode() for q in "'\"\\")
            extra: list[str | None] = []
            for child in node.children:
                if child.type == "heredoc_body":
                    body = child.text.decode()
                    if not quoted and any(m in body for m in ("`", "$(", "<(", ">(")):
                        # The grammar misses substitutions in some bodies (tab-led lines under
                        # `<<-`, backticks): an unquoted body that could run something is opaque.
                        self.substitutions(child)
                        raise _Opaque("has an unquoted heredoc whose body runs commands")
                elif child.type.endswith("_redirect"):
                    extra.extend(self.redirect(child))
                elif child.is_named and child.type not in ("heredoc_start", "heredoc_end"):
                    self.statement(child)
            return extra
        if kind == "herestring_redirect":
            self.substitutions(node)
            return []
        if kind != "file_redirect":
            raise _Opaque(f"uses the redirection `{_clip(node)}`, which tether does not analyse")
        operator = next((c.type for c in node.children if not c.is_named), "")
        words = [c for i, c in enumerate(node.children) if node.field_name_for_child(i) == "destination"]
        extra = [self.word(w) for w in words[1:]]
        if not words:
            return extra
        destination = words[0]
        if operator in (">&", "<&", ">&-", "<&-") and destination.type == "number":
            return extra  # duplicating a descriptor writes no file
        target = self.word(destination)
        if target is not None and operator in (">&", "<&") and target == "-":
            return extra
        write = operator not in ("<", "<&")
        if target in ("/dev/null", "/dev/stdout", "/dev/stderr") and write:
            return extra
        self.redirects.append(Redirect(target, write, self.cwd))
        return extra


_WORDLIKE = frozenset(
    {
        "word", "string", "raw_string", "concatenation", "simple_expansion", "expansion",
        "number", "command_substitution", "process_substitution", "arithmetic_expansion",
        "ansi_c_string", "translated_string",
    }
)

_STATEMENTS: dict[str, Any] = {
    "program": _Walker.sequence,
    "list": _Walker.conditional,
    "compound_statement": _Walker.sequence,
    "do_group": _Walker.sequence,
    "subshell": _Walker.isolated,
    "pipeline": _Walker.pipeline,
    "negated_command": _Walker.sequence,
    "redirected_statement": _Walker.redirected,
    "if_statement": _Walker.conditional,
    "elif_clause": _Walker.conditional,
    "else_clause": _Walker.conditional,
    "while_statement": _Walker.conditional,
    "for_statement": _Walker.conditional,
    "c_style_for_statement": _Walker.conditional,
    "case_statement": _Walker.conditional,
    "case_item": _Walker.conditional,
    "command": _Walker.command,
    "declaration_command": _Walker.declaration,
    "unset_command": _Walker.declaration,
    "variable_assignment": _Walker.assignment,
    "variable_assignments": _Walker.sequence,
    "test_command": _Walker.test,
    "function_definition": _Walker.function,
}


def _hides_substitution(node: Any) -> bool:
    """`${x#$(cmd)}`: the grammar reads the pattern as text, but bash runs the command."""
    text: str = node.text.decode()
    if not any(m in text for m in ("$(", "`", "<(", ">(")):
        return False
    stack = list(node.children)
    while stack:
        child = stack.pop()
        if child.type in ("command_substitution", "process_substitution"):
            return False  # seen properly: the walk analyses it
        stack.extend(child.children)
    return True


def _clip(node: Any, limit: int = 40) -> str:
    text: str = node.text.decode()
    return text if len(text) <= limit else text[: limit - 1] + "…"


# -- static word values ------------------------------------------------------------------------


def _static(node: Any, home: Path) -> str | None:
    kind = node.type
    text = node.text.decode()
    if kind == "word":
        if _has_brace_expansion(text):
            return None
        if text == "~" or text.startswith("~/"):
            text = str(home) + text[1:]
        elif text.startswith("~"):
            return None
        return _unescape_unquoted(text)
    if kind == "number":
        return text
    if kind == "raw_string":
        return text[1:-1]
    if kind == "string":
        parts: list[str] = []
        for child in node.named_children:
            if child.type == "string_content":
                parts.append(_unescape_double(child.text.decode()))
            elif child.type in ("simple_expansion", "expansion"):
                value = _expansion(child, home)
                if value is None:
                    return None
                parts.append(value)
            else:
                return None
        return "".join(parts)
    if kind == "concatenation":
        out: list[str] = []
        for index, child in enumerate(node.children):
            piece = _static(child, home) if index == 0 or child.type != "word" else _static_tail(child)
            if piece is None:
                return None
            out.append(piece)
        return "".join(out)
    if kind in ("simple_expansion", "expansion"):
        return _expansion(node, home)
    return None


def _static_tail(node: Any) -> str | None:
    text = node.text.decode()
    if _has_brace_expansion(text):
        return None
    return _unescape_unquoted(text)


def _expansion(node: Any, home: Path) -> str | None:
    names = [c for c in node.named_children]
    if len(names) == 1 and names[0].type == "variable_name" and names[0].text == b"HOME":
        return str(home)
    return None


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


def _unescape_unquoted(text: str) -> str:
    if "\\" not in text:
        return text
    out: list[str] = []
    chars = iter(text)
    for ch in chars:
        if ch == "\\":
            nxt = next(chars, "")
            if nxt != "\n":
                out.append(nxt)
        else:
            out.append(ch)
    return "".join(out)


def _unescape_double(text: str) -> str:
    return re.sub(r"\\([$`\"\\\n])", lambda m: "" if m.group(1) == "\n" else m.group(1), text)


def _literal_assignment(node: Any, walker: _Walker) -> str | None:
    name = node.child_by_field_name("name")
    value = node.child_by_field_name("value")
    static = _static(value, walker.home) if value is not None else ""
    if name is None or static is None:
        return None
    return f"{name.text.decode()}={static}"


# -- wrappers ------------------------------------------------------------------------------------


@dataclass
class _Peeled:
    argv: Argv
    forms: tuple[Argv, ...]
    cwd: Path | None
    blocked: str | None = None
    opaque: str | None = None
    nested_script: str | None = None


def _peel(
    argv: Argv, cwd: Path | None, home: Path, assignments: list[tuple[str, str | None]]
) -> _Peeled:
    forms: list[Argv] = [argv]
    blocked: str | None = None
    for name, value in assignments:
        if not _HARMLESS_ENV.match(name) or value is None:
            blocked = f"sets {name} for the command it runs"
    current = argv
    for _ in range(12):
        head = current[0] if current else None
        if head is None:
            return _Peeled(current, tuple(forms), cwd, blocked, "the command name is not static")
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
            return _Peeled(current, tuple(forms), cwd, blocked, note[7:])
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
        return _Peeled(current, tuple(forms), cwd, blocked, "the command name is not static")
    base = os.path.basename(head)
    if base in OPAQUE_COMMANDS:
        return _Peeled(current, tuple(forms), cwd, blocked, f"`{base}` {OPAQUE_COMMANDS[base]}")
    if base in SHELLS:
        script = _shell_script(current)
        if script is _NO_SCRIPT:
            return _Peeled(
                current, tuple(forms), cwd, blocked,
                f"`{base}` runs a script file or commands from its input",
            )
        if script is None:
            return _Peeled(current, tuple(forms), cwd, blocked, f"`{base} -c` is given a script that is not static")
        return _Peeled(current, tuple(forms), cwd, blocked, nested_script=str(script))
    if base == "git":
        current, forms, cwd, blocked = _normalise_git(current, forms, cwd, home, blocked)
    return _Peeled(current, tuple(forms), cwd, blocked)


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


def _find_exec(argv: Argv) -> list[Argv]:
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


def _cd_target(argv: Argv, cwd: Path | None, home: Path) -> Path | None:
    operands = [w for w in argv[1:] if w is None or not w.startswith("-") or w == "-"]
    if not operands:
        return home
    target = operands[0]
    if target is None or target == "-":
        return None
    return _join(cwd, target, home)
