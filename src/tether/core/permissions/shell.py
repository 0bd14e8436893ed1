"""What a shell command would run, read with bash's own grammar (tree-sitter-bash).

`analyse(command, cwd, home)` returns every simple command bash could execute — through `;`,
`&&`, `||`, pipes, `&`, newlines, subshells, `$(…)`, backticks, `<(…)`, heredocs, control flow,
`find -exec`, `xargs`, `bash -c 'literal'` — each with its words resolved where they are static,
the wrappers peeled (`timeout 5 rm x` is judged as `rm x`), and the directory it would run in.
What the analysis cannot see into (`eval`, `$cmd` as a command, `bash -c "$x"`, a function
definition, a parse error, a carriage return) is listed in `opaque`; the checker asks for those.
So is code hidden in data (see `words.code_hazard`): arithmetic on anything but literal numbers
(`$((x))`, `(( ))`, `[[ $x -eq 1 ]]`, `${x:$n}`, `${a[i]}`), `-v NAME[…]`, `${!x}`, `${x@P}`,
builtin operands bash evaluates (`test -v`, `printf -v`, `read`, `let`, `declare -i`: see
`evaluated`),
and, in `[ … ]`, a word only known at run time where the test builtin could read it as an
operator. Plain `$x`, `"$x"` and `$(read-only …)` stay data: their words are `None` (unknown),
and `SimpleCommand.splits` says an unquoted one may become any number of words. Unquoted globs
are `words.Glob` (the checker matches them on disk); brace expansions become their words.

The analysis never executes anything and never looks at the disk.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Literal

from tether.core.permissions.evaluated import NAME_SETTERS, UNKNOWN_VALUE, evaluated_problem
from tether.core.permissions.readonly import (
    ARITHMETIC_TESTS,
    NAME_TESTS,
    is_plain_name,
    test_problem,
)
from tether.core.permissions.shell_vars import Variables
from tether.core.permissions.words import (
    brace_words,
    code_hazard,
    literal_assignment,
    literal_number,
    splits,
    static,
)
from tether.core.permissions.wrappers import Argv, find_exec, moved_to, peel

MAX_NESTING = 5  # `bash -c` inside `bash -c` …; deeper is opaque

_COMMAND_NAME = re.compile(r"^(?:[A-Za-z0-9_.+@%/-][A-Za-z0-9_.+@%:,/=-]*|\[|\[\[)$")
@dataclass(frozen=True, slots=True)
class SimpleCommand:
    argv: Argv  # after peeling transparent wrappers: what allow rules are matched against
    forms: tuple[Argv, ...]  # every spelling seen while peeling: what deny rules are matched against
    cwd: Path | None  # where it runs (None: a `cd` made it unknowable)
    source: str
    role: Literal["command", "wrapper"] = "command"  # wrappers count for deny only
    blocked: str | None = None  # why no allow rule may admit it (sudo, LD_PRELOAD=…, setsid)
    splits: bool = False  # an unquoted expansion: its words' number and positions are unknown
    maybe_forms: tuple[Argv, ...] = ()  # what a runner of unknown grammar might run: deny → ask
    # An unknown word the command computes itself (`$(…)`, a variable it assigns, `$1`), not
    # one the run's environment sets; likewise for an unknown `cwd` (see `state_paths`).
    computed: bool = False
    cwd_computed: bool = False


@dataclass(frozen=True, slots=True)
class Redirect:
    target: str | None  # None: not static
    write: bool
    cwd: Path | None
    computed: bool = False  # as SimpleCommand's
    cwd_computed: bool = False


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
def analyse(
    command: str, cwd: Path, home: Path, known: tuple[tuple[str, str], ...] = ()
) -> ShellAnalysis:
    """`known`: variables whose values the run sets (`TETHER_HOME`), read as static words until
    the command assigns them; `$PWD` is the directory the walk has tracked."""
    walker = _Walker(home, Variables(dict(known)))
    walker.run(command, cwd, depth=0)
    return ShellAnalysis(tuple(walker.commands), tuple(walker.redirects), tuple(walker.opaque))


@dataclass
class _Walker:
    home: Path
    variables: Variables = field(default_factory=Variables)
    commands: list[SimpleCommand] = field(default_factory=list)
    redirects: list[Redirect] = field(default_factory=list)
    opaque: list[str] = field(default_factory=list)
    cwd: Path | None = None
    cwd_computed: bool = False  # the directory became unknown through something computed

    @property
    def vars(self) -> dict[str, str]:
        return self.variables.values(self.cwd)

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
        except RecursionError:  # `$($($(…)))` thousands deep: unreadable, so it asks
            self.opaque.append("nests substitutions too deeply for tether to read")
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
        saved, computed = self.cwd, self.cwd_computed
        self.sequence(node)
        self.cwd, self.cwd_computed = saved, computed

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
                elif child.type == "variable_name":  # `for NAME in …`
                    self.variables.forget(child.text.decode())
                    self.variables.bind_loop(node, child.text.decode(), self.home, self.cwd)
                else:
                    self.statement(child)
        if self.cwd != saved:
            self.cwd, self.cwd_computed = None, True

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
        """`[[ … ]]` and `[ … ]`: they run nothing, but bash evaluates the operands of `-eq` and
        friends as arithmetic and the name after `-v` as a subscripted name — code, if data."""
        self.substitutions(node)
        opener = node.children[0].type if node.children else ""
        if opener == "[[":
            stack = list(node.named_children)
            while stack:
                current = stack.pop()
                operator = next((c.text.decode() for c in current.children
                                 if c.type == "test_operator"), None)
                operands = [c for c in current.named_children if c.type != "test_operator"]
                if current.type == "binary_expression" and operator in ARITHMETIC_TESTS:
                    for operand in operands:
                        if not literal_number(operand, self.home, self.vars):
                            raise _Opaque(f"compares `{_clip(operand)}` arithmetically, which "
                                          "evaluates names and subscripts in it as code")
                elif current.type == "unary_expression" and operator in NAME_TESTS:
                    name = static(operands[0], self.home, self.vars) if operands else None
                    if not is_plain_name(name):
                        raise _Opaque(f"tests the variable named by `{_clip(node)}`, whose "
                                      "subscript bash evaluates as code")
                if current.type in ("binary_expression", "unary_expression",
                                    "parenthesized_expression"):
                    stack.extend(current.named_children)
            return
        args: list[str | None] = []
        split = False
        for leaf in _test_leaves(node):
            if leaf.type in _WORDLIKE:
                split = split or splits(leaf)
                args.append(static(leaf, self.home, self.vars))
            else:
                args.append(leaf.text.decode())
        problem = test_problem(args, split)
        if problem:
            raise _Opaque(problem)

    def assignment(self, node: Any) -> None:
        self.substitutions(node)
        name = node.child_by_field_name("name")
        self.variables.forget(name.text.decode() if name is not None else None)
        self.attributed_value(node)
        label = _clip(node)
        self.commands.append(
            SimpleCommand(
                (label,), ((label,),), self.cwd, label,
                blocked=f"assigns the shell variable {name.text.decode() if name else label}",
            )
        )

    def attributed_value(self, node: Any) -> None:
        problem = self.variables.assigned_problem(node, self.home, self.cwd)
        if problem:
            raise _Opaque(problem)

    def function(self, node: Any) -> None:
        raise _Opaque("defines a shell function, which could shadow any command")

    def declaration(self, node: Any) -> None:
        argv: list[str | None] = []
        checked: list[str | None] = []  # what `evaluated_problem` judges: names kept apart from values
        for child in node.children:
            if child.type in ("export", "declare", "local", "readonly", "typeset", "unset", "unsetenv"):
                argv.append(child.type)
                checked.append(child.type)
            elif child.type == "variable_assignment":
                self.substitutions(child)
                argv.append(literal_assignment(child, self.home, self.vars))
                name = child.child_by_field_name("name")
                value = child.child_by_field_name("value")
                known = static(value, self.home, self.vars) if value is not None else ""
                if value is not None and value.type == "array":  # `(1 2)`; `([k]=v)` evaluates k
                    known = "([" if "[" in value.text.decode() else ""
                checked.append(f"{name.text.decode() if name else ''}="
                               f"{UNKNOWN_VALUE if known is None else known}")
            elif child.type == "variable_name":  # `unset x`, `readonly X`: a literal name
                argv.append(child.text.decode())
                checked.append(argv[-1])
            elif child.is_named:
                argv.append(self.word(child))
                checked.append(argv[-1])
        self.add(tuple(argv), node, evaluated=tuple(checked))

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
            hazard = code_hazard(current)
            if hazard:
                raise _Opaque(hazard)
            stack.extend(current.children)

    def computed(self, node: Any) -> bool:
        return self.variables.computed(node)

    def word(self, node: Any) -> str | None:
        self.substitutions(node)
        return static(node, self.home, self.vars)

    # -- commands --------------------------------------------------------------------------

    def command(self, node: Any, trailing: Sequence[Any] = ()) -> None:
        assignments: list[tuple[str, str | None]] = []
        argv: list[str | None] = []
        spelled: str | None = None
        split = False
        for index, child in enumerate([*node.children, *trailing]):
            if index >= len(node.children):
                argv.extend(self.redirect(child))
                continue
            field_name = node.field_name_for_child(index)
            if child.type == "variable_assignment":
                self.substitutions(child)
                self.attributed_value(child)
                name = child.child_by_field_name("name")
                value = child.child_by_field_name("value")
                assignments.append(
                    (name.text.decode() if name else "?", static(value, self.home, self.vars) if value else "")
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
                self.substitutions(child)
                split = split or splits(child)
                if re.match(r"~[^/]", child.text.decode()):
                    # `~user`, `~+`, `~-`: another home or directory, known only at run time
                    raise _Opaque(f"names the directory `{_clip(child)}`, known only at run time")
                argv.extend(brace_words(child, self.home, self.vars))
        if not argv:
            return
        computed = any(self.computed(c) for c in node.named_children if c.type != "command_name")
        self.add(tuple(argv), node, assignments, blocked=spelled, split=split, computed=computed)

    def add(
        self,
        argv: Argv,
        node: Any,
        assignments: list[tuple[str, str | None]] | None = None,
        blocked: str | None = None,
        split: bool = False,
        evaluated: Argv | None = None,
        computed: bool = False,
    ) -> None:
        source = node.text.decode()
        peeled = peel(argv, self.cwd, self.home, assignments or [])
        if blocked and not peeled.blocked:
            peeled.blocked = blocked
        if peeled.nested_script is not None:
            if self.depth >= MAX_NESTING:
                raise _Opaque("nests shells more than five deep")
            self.commands.append(
                SimpleCommand(argv, peeled.forms, peeled.cwd, source, role="wrapper")
            )
            inner = _Walker(self.home, self.variables.for_child_shell())
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
        cwd_computed = self.cwd_computed if peeled.cwd == self.cwd else computed
        self.commands.append(
            SimpleCommand(peeled.argv, peeled.forms, peeled.cwd, source, blocked=peeled.blocked,
                          splits=split, maybe_forms=peeled.maybe_forms, computed=computed,
                          cwd_computed=cwd_computed)
        )
        # `test -v 'a[$(rm x)]'`, `printf -v`, `let`, `declare -i` …: words bash evaluates as code
        judged = evaluated if evaluated is not None else peeled.argv
        problem = evaluated_problem(judged, split, self.variables.attributed)
        if problem:
            raise _Opaque(problem)
        self.variables.note_attributes(judged)
        for inner_argv in find_exec(peeled.argv):
            self.add_argv(inner_argv, source)
        final = peeled.argv
        head = final[0] if final else None
        if head in NAME_SETTERS:
            for word in final[1:]:
                if word is None or not word.startswith("-"):
                    self.variables.forget(word)
        if head in ("cd", "pushd", "popd"):
            cdpath = self.variables.cdpath or any(name == "CDPATH" for name, _ in assignments or [])
            self.cwd = moved_to(final, self.cwd, self.home, cdpath=cdpath)
            operands = [w for w in final[1:] if w is None or not w.startswith("-")]
            # `cd "$DIR"` with DIR from the run's environment: the user's directory
            from_environment = head == "cd" and operands[:1] == [None] and not (
                computed or cdpath or self.cwd_computed)
            self.cwd_computed = self.cwd is None and not from_environment

    def add_argv(self, argv: Argv, source: str) -> None:
        peeled = peel(argv, self.cwd, self.home, [])
        if peeled.opaque:
            raise _Opaque(peeled.opaque)
        if peeled.nested_script is not None:
            raise _Opaque("runs a shell from `find -exec`")
        self.commands.append(
            SimpleCommand(peeled.argv, peeled.forms, peeled.cwd, source, blocked=peeled.blocked,
                          maybe_forms=peeled.maybe_forms)
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
                    if not quoted and _BODY_HAZARD.search(body):
                        raise _Opaque("has an unquoted heredoc whose body expands a name, a "
                                      "transform or arithmetic that can run code")
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
        self.redirects.append(Redirect(target, write, self.cwd, self.computed(destination),
                                       self.cwd_computed))
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


# In an unquoted heredoc body: `${!x}`, `${x@P}`, `${x:$n}`, `${a[i]}`, `$[…]`, `$((…))`.
_BODY_HAZARD = re.compile(r"\$\{[#!]?[^}]*[!@\[:]|\$\[|\$\(\(")


def _test_leaves(node: Any) -> list[Any]:
    """The words of `[ … ]` in order, as the `test` builtin receives them (brackets dropped)."""
    out: list[Any] = []
    stack = list(reversed(node.children))
    while stack:
        current = stack.pop()
        if current.type in _WORDLIKE or not current.children:
            if current.type not in ("[", "]"):
                out.append(current)
            continue
        stack.extend(reversed(current.children))
    return out


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
