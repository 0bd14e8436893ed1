"""The shell half of `decide()`: a shell call judged per simple command (see `shell.analyse`).

Deny first: any command (or wrapper spelling of it) matching a deny rule denies the call, and a
path word, a glob's expansion on disk, a brace alternative, a file an option names (`date -f F`)
or a redirection target matching a file deny rule denies it too; tether's state guard covers the
same words. Then ask: a part tether cannot see into (opaque) asks, even in unrestricted mode when
deny rules exist it could be dodging. Then allow: every command must be admitted by a rule or by
the read-only analysis (`readonly.inspect`); what only the read-only analysis admitted comes back
`confine=True` (or asks when `Policy.can_confine` is False). A word only known at run time is
fine for read-only commands whose options are all harmless, unless a file deny rule could cover
the file it names. Redirections into what arms later execution (`.git/`, `.tether/`, `.envrc`,
`.vscode`, scripts hooks run: `checker.armed_target`) need a rule naming them.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Literal

from tether.core.permissions.checker import Call, Policy, armed_target, names_armed
from tether.core.permissions.modes import Decision
from tether.core.permissions.paths import (
    PathRef,
    magic_link,
    within,
)
from tether.core.permissions.readonly import ReadOnly, inspect
from tether.core.permissions.rules import (
    READ_FAMILIES,
    SHELL_FAMILY,
    WRITE_FAMILIES,
    Rule,
    families_covered,
)
from tether.core.permissions.shell import ShellAnalysis, SimpleCommand, analyse
from tether.core.permissions.state_paths import state_cwd, state_unseen
from tether.core.permissions.words import Glob

Argv = tuple[str | None, ...]

_Match = Literal["yes", "maybe", "no"]
_READ_ONLY = "read-only"  # how `_admit` labels the auto-allow, as opposed to a rule


def _shell_rule(rule: Rule, argv: Argv, *, deny: bool) -> _Match:
    if rule.kind in ("any", "family"):
        return "yes" if rule.family in ("*", SHELL_FAMILY) else "no"
    if rule.family != SHELL_FAMILY or rule.kind not in ("shell_exact", "shell_prefix"):
        return "no"
    tokens = rule.tokens
    # an unknown or globbed word may stand for any number of words
    elastic = deny and any(w is None or isinstance(w, Glob) for w in argv)
    if rule.kind == "shell_exact" and len(argv) != len(tokens) and not elastic:
        return "no"
    if len(argv) < len(tokens) and not elastic:
        return "no"
    unknown = elastic and len(argv) != len(tokens) if rule.kind == "shell_exact" else False
    for want, have in zip(tokens, argv, strict=False):
        if have is None:
            unknown = True
        elif isinstance(have, Glob) and deny and have != want:
            if not fnmatch.fnmatchcase(want, have.pattern):
                return "no"
            unknown = True  # `rm *.lock` may be `rm x.lock`
        elif have != want:
            return "no"
    if unknown or len(argv) < len(tokens):
        return "maybe" if deny else "no"
    return "yes"


class _ShellIndex:
    """Shell rules by their first word, so a command meets only the rules that could match it."""

    def __init__(self, rules: Sequence[Rule]) -> None:
        self.rules = tuple(rules)
        self.generic: list[Rule] = []  # `*`, `Bash`, `Bash(:*)`: every command
        self.by_head: dict[str, list[Rule]] = {}
        for rule in rules:
            if rule.kind in ("any", "family") or (rule.kind.startswith("shell") and not rule.tokens):
                self.generic.append(rule)
            elif rule.kind.startswith("shell"):
                self.by_head.setdefault(rule.tokens[0], []).append(rule)

    def candidates(self, argv: Argv) -> Iterable[Rule]:
        head = argv[0] if argv else None
        if head is None:
            return self.rules  # an unknown name could be anything
        return (*self.generic, *self.by_head.get(head, ()))

    def match(self, argv: Argv, *, deny: bool) -> tuple[Rule, _Match] | None:
        maybe: tuple[Rule, _Match] | None = None
        for rule in self.candidates(argv):
            hit = _shell_rule(rule, argv, deny=deny)
            if hit == "yes":
                return rule, hit
            if hit == "maybe" and maybe is None:
                maybe = (rule, hit)
        return maybe


_INDEXES: dict[int, tuple[tuple[Rule, ...], _ShellIndex]] = {}


def _index(rules: tuple[Rule, ...]) -> _ShellIndex:
    cached = _INDEXES.get(id(rules))
    if cached is not None and cached[0] is rules:
        return cached[1]
    if len(_INDEXES) > 256:
        _INDEXES.clear()
    index = _ShellIndex(rules)
    _INDEXES[id(rules)] = (rules, index)
    return index


class ShellCheck:
    def __init__(self, call: Call, policy: Policy) -> None:
        self.call = call
        self.policy = policy
        self.scope = policy.scope
        self.rules = policy.rules
        self.cwd = call.cwd or self.scope.cwd
        assert call.command is not None
        state = policy.guards.state_root
        known = (("TETHER_HOME", str(state)),) if state is not None else ()
        self.analysis: ShellAnalysis = analyse(call.command, self.cwd, self.scope.home, known)
        self.commands = [c for c in self.analysis.commands if c.role == "command"]
        self._words: dict[tuple[int, bool], list[PathRef]] = {}  # path words, resolved once
        self._globs: dict[tuple[str, str], list[str] | None] = {}  # glob matches on disk
        self._unseen: str | None = None  # a read-only command reading files named at run time

    def decide(self) -> Decision:
        rules, mode = self.rules, self.policy.mode
        denied = self._denied()
        if denied is not None:
            return denied
        sticky = _index(rules.always_ask)
        for command in self.analysis.commands:
            for form in command.forms:
                found = sticky.match(form, deny=True)
                if found is not None:
                    return Decision("ask", f"{found[0]} always asks", found[0].text, sticky=True)
        opaque = self.analysis.opaque
        if mode == "unrestricted":
            if opaque and self._has_relevant_denies():
                return Decision("ask", f"The command {opaque[0]}; tether cannot check it against "
                                       "your deny rules")
            launcher = next((c for c in self.commands if c.maybe_forms), None)
            if launcher is not None and self._has_relevant_denies():
                return Decision("ask", f"`{_show(launcher.argv)}` launches a command tether cannot "
                                       "read out of it to check against your deny rules")
            unseen = state_unseen(self)
            if unseen is not None:
                return Decision("ask", unseen)
            for redirect in self.analysis.redirects:
                if redirect.write and redirect.target is not None and redirect.cwd is not None:
                    problem, _ = self._redirect_problem(redirect.target, True, redirect.cwd)
                    ref = self._redirect_ref(redirect.target, redirect.cwd)
                    if problem and armed_target(ref, self.scope):
                        return Decision("ask", problem)
            return Decision("allow", "permission mode unrestricted")
        if opaque:
            return Decision("ask", f"The command {opaque[0]}")
        granted = False  # a rule or the mode admitted a redirection: it must run unconfined
        for redirect in self.analysis.redirects:
            problem, by_grant = self._redirect_problem(redirect.target, redirect.write, redirect.cwd)
            if problem:
                return Decision("ask", problem)
            granted = granted or by_grant
        if not self.commands and mode == "strict":
            rule = self._generic_allow()
            if rule is None:
                return Decision("ask", "permission mode strict asks for every call")
            return Decision("allow", f"allowed by {rule}", rule.text)
        matched: list[str] = []
        for command in self.commands:
            admitted, reason = self._admit(command)
            if not admitted:
                asks = _index(rules.ask)
                for form in command.forms:
                    found = asks.match(form, deny=True)
                    if found is not None:
                        return Decision("ask", f"{found[0]} asks", found[0].text)
                if mode == "strict" and reason is None:
                    reason = "permission mode strict asks for every call"
                return Decision("ask", reason or f"`{_show(command.argv)}` needs approval")
            matched.append(admitted)
        rules_used = [m for m in matched if not m.startswith(_READ_ONLY)]
        summary = ", ".join(dict.fromkeys(matched)) or "the command runs nothing"
        if (rules_used or granted) and self._unseen is not None:
            # what the read-only part reads is only known at run time: safe confined, and a
            # rule or the mode would make the whole command run unconfined
            return Decision("ask", f"`{self._unseen}` reads files named only at run time, and "
                                   "the rest of the command cannot run confined")
        if rules_used or granted:
            from tether.core.permissions.unconfined import unconfined_problem

            unconfined = unconfined_problem(self, matched)
            if unconfined is not None:
                return Decision("ask", unconfined)
        if rules_used or granted:
            return Decision("allow", f"allowed: {summary}", rules_used[0] if rules_used else None)
        # Admitted by nobody but the read-only analysis: the kernel must hold it to that.
        if not self.policy.can_confine:
            return Decision("ask", f"`{_clip(self.call.command or '')}` would run unconfined: no "
                                   "kernel sandbox here can confine auto-allowed commands "
                                   "(install bubblewrap, or a kernel with Landlock)")
        return Decision("allow", f"allowed: {summary}", confine=True)

    def _generic_allow(self) -> Rule | None:
        """An explicit rule admitting every shell command (`Bash`, `Bash(:*)`, `*`)."""
        groups = (self.rules.cli_allow, self.rules.session_allow, self.rules.allow)
        return next((r for g in groups for r in _index(g).generic), None)

    # deny -----------------------------------------------------------------------------------

    def _denied(self) -> Decision | None:
        guards = self.policy.guards
        if guards.active:
            for command in self.commands:
                guarded = guards.state_check("Read", self._path_words(command))
                if guarded is None:
                    guarded = state_cwd(self, command)
                if guarded is not None:
                    return guarded
            for redirect in self.analysis.redirects:
                if redirect.target is not None:
                    ref = self._redirect_ref(redirect.target, redirect.cwd or self.cwd)
                    guarded = guards.state_check("Write" if redirect.write else "Read", [ref])
                    if guarded is not None:
                        return guarded
        maybe: Rule | None = None
        index = _index(self.rules.denies)
        for command in self.analysis.commands:
            for form in command.forms:
                found = index.match(form, deny=True)
                if found is not None and found[1] == "yes":
                    rule = found[0]
                    return Decision("deny", f"Permission denied by rule: {rule}", rule.text)
                if found is not None:
                    maybe = maybe or found[0]
            for form in command.maybe_forms:  # a launcher of unknown grammar may run any tail
                found = index.match(form, deny=True)
                if found is not None:
                    maybe = maybe or found[0]
        file_denies = [r for r in self.rules.denies if r.kind == "path"]
        if file_denies:
            hit_rule = self._file_words_denied(file_denies)
            if hit_rule is not None:
                return Decision("deny", f"Permission denied by rule: {hit_rule}", hit_rule.text)
        if maybe is not None:
            return Decision("ask", f"The command has words tether cannot read statically where "
                                   f"{maybe} would apply", maybe.text)
        return None

    def _file_words_denied(self, denies: Sequence[Rule]) -> Rule | None:
        for command in self.commands:
            reads_only = inspect(command.argv, command.splits) is not None
            refs = self._path_words(command, glued=True)
            if command.argv[0] == "git" and command.cwd is not None:
                refs = [*refs, *self._git_config_files(command.cwd)]
            for ref in refs:
                for rule in denies:
                    if rule.family in WRITE_FAMILIES and reads_only:
                        continue
                    if self._path_rule(rule, ref, deny=True):
                        return rule
        for redirect in self.analysis.redirects:
            if redirect.target is None:
                continue
            ref = self._redirect_ref(redirect.target, redirect.cwd or self.cwd)
            guarded_by = WRITE_FAMILIES if redirect.write else READ_FAMILIES
            for rule in denies:
                if rule.family in guarded_by and self._path_rule(rule, ref, deny=True):
                    return rule
        return None

    def _git_config_files(self, cwd: Path) -> list[PathRef]:
        """The files the repository's config makes git read (`blame.ignoreRevsFile` …): a
        deny rule covers them as if the command named them. Unknown: the whole workspace."""
        run_dir = self.scope.resolve(str(cwd), self.cwd, self.scope.home).resolved
        names = self.scope.git_files(run_dir)
        if "*" in names:
            names = tuple(str(p) for p in run_dir.iterdir()) if run_dir.is_dir() else ()
        return [self.scope.resolve(n, run_dir, self.scope.home) for n in names]

    def _has_relevant_denies(self) -> bool:
        return any(r.family in ("*", SHELL_FAMILY) or r.kind == "path" for r in self.rules.denies)

    # allow ----------------------------------------------------------------------------------

    def _admit(self, command: SimpleCommand) -> tuple[str | None, str | None]:
        """(what admitted it, None) or (None, why not)."""
        if command.blocked:
            return None, f"`{_show(command.argv)}` {command.blocked}"
        if command.cwd is None:
            return None, "a `cd` makes the directory of later commands unknowable"
        run_dir = self.scope.resolve(str(command.cwd), self.cwd, self.scope.home).resolved
        if not within(run_dir, self.scope.roots):
            return None, f"`{_show(command.argv)}` runs in {run_dir}, outside the workspace"
        if command.argv[0] == "git":
            hazard = self.scope.git_hazard(run_dir)
            if hazard:  # no rule meant "and run what this repository's config names"
                return None, f"`{_show(command.argv)}` would run {hazard} from the repository's git config"
        found = _index(self.rules.cli_allow).match(command.argv, deny=False)
        if found is not None:
            return f"--allowedTools {found[0]}", None
        # A rule that names the command admits it as the user meant it: unconfined. So rules are
        # asked before the read-only analysis, whose admission means "run it confined".
        for source, group in (("session rule", self.rules.session_allow), ("rule", self.rules.allow)):
            found = _index(group).match(command.argv, deny=False)
            if found is not None:
                return f"{source} {found[0]}", None
        if self.policy.mode == "strict":
            return None, None
        why_not = self._read_only(command, run_dir)
        if why_not is None:
            return f"{_READ_ONLY} `{command.argv[0]}`", None
        return None, why_not

    def _read_only(self, command: SimpleCommand, run_dir: Path) -> str | None:
        shown = _show(command.argv)
        kind = inspect(command.argv, command.splits)
        if kind is None:
            return f"`{shown}` needs approval"
        read_denies = any(r.kind == "path" and r.family in ("Read", *READ_FAMILIES)
                          for r in self.rules.denies)
        if kind.recursive and read_denies:
            return f"`{shown}` reads whole trees, which may hold files your deny rules protect"
        if command.argv[0] == "git":
            hazard = self.scope.git_hazard(run_dir)
            if hazard:
                return f"`{shown}` would run {hazard} from the repository's git config"
        if read_denies and "-" in kind.files:
            return (f"`{shown}` reads the files its input names, which may be files your deny "
                    "rules protect")
        unknown = command.splits or any(w is None for w in command.argv[1:])
        if unknown and (kind.paths or kind.files):
            self._unseen = self._unseen or shown
        if unknown and read_denies and (kind.paths or kind.files):
            return (f"`{shown}` reads a file named only at run time, which your deny rules could "
                    "cover")
        for word in command.argv[1:]:
            if isinstance(word, Glob):
                matches = self._glob(word, command)
                if matches is None and read_denies:
                    return f"`{shown}` globs `{word}` over more files than tether checks"
                if any(match.startswith("-") for match in matches or ()):
                    return (f"`{shown}`: the glob `{word}` matches a file whose name starts with "
                            "`-`, which the command would read as an option")
        # a wrapper's own words may name files (`xargs -a FILE echo`): then every word counts
        wrapped = any(form[0] != command.argv[0] for form in command.forms)
        refs = self._path_words(command) if kind.paths or wrapped else []
        refs += self._option_files(command, kind)
        for ref in refs:
            if magic_link(ref) or not within(ref.resolved, self.scope.roots):
                return f"`{shown}` reads {ref.spelled}, outside the workspace"
            if self.scope.hard_linked(ref.resolved):
                return (f"`{shown}` reads {ref.spelled}, a file with other names (hard links) "
                        "that may be outside the workspace, hidden or under a deny rule")
        return None

    def _option_files(self, command: SimpleCommand, kind: ReadOnly) -> list[PathRef]:
        """The files the command's grammar says it reads (`date -f F`, sed's and awk's inputs);
        a glob among them stands for what it matches on disk."""
        base = command.cwd or self.cwd
        names: list[str] = []
        for name in kind.files:
            if isinstance(name, Glob) and not name.startswith("-"):
                names.extend(self._glob(name, command) or [str(name)])
            elif name:
                names.append(name)
        return [self.scope.resolve(f, base, self.scope.home) for f in names]

    def _glob(self, word: Glob, command: SimpleCommand) -> list[str] | None:
        key = (word.pattern, str(command.cwd or self.cwd))
        if key not in self._globs:
            self._globs[key] = self.scope.expand(word.pattern, command.cwd or self.cwd)
        return self._globs[key]

    def _redirect_problem(
        self, target: str | None, write: bool, cwd: Path | None
    ) -> tuple[str | None, bool]:
        """(why it asks, None) or (None, whether a rule or the mode rather than the read-only
        default admitted it)."""
        if target is None or cwd is None:
            return "The command redirects to a file whose name is only known at run time", False
        ref = self._redirect_ref(target, cwd)
        inside = within(ref.resolved, self.scope.roots) and not magic_link(ref)
        armed = armed_target(ref, self.scope) if write else None
        if armed is not None:
            for rule in (*self.rules.cli_allow, *self.rules.session_allow, *self.rules.allow):
                if (rule.kind == "path" and rule.pattern is not None
                        and "Write" in families_covered(rule.family)
                        and names_armed(rule.pattern, self.scope)
                        and self._path_rule(rule, ref, deny=False)):
                    return None, True
            return (f"The command writes {ref.spelled} inside {armed}, whose contents run later "
                    "without asking; only a rule naming it, or you, may allow it"), False
        if inside and self.scope.hard_linked(ref.resolved):
            # another name of the file may be outside the workspace: a read or an in-place write
            # through this one reaches it, and only a rule naming it or a human may say yes
            inside = False
        if not write:
            if inside and self.policy.mode != "strict":
                return None, False
            family = "Read"
        else:
            if self.policy.mode == "acceptEdits" and inside:
                return None, True
            family = "Write"
        for rule in (*self.rules.cli_allow, *self.rules.session_allow, *self.rules.allow):
            covers = rule.kind == "path" and family in families_covered(rule.family)
            if covers and self._path_rule(rule, ref, deny=False):
                return None, True
        verb = "writes" if write else "reads"
        return f"The command {verb} {ref.spelled} through a redirection", False

    def _redirect_ref(self, target: str, cwd: Path) -> PathRef:
        """The file a redirection opens: bash globs its word when that yields exactly one file."""
        if isinstance(target, Glob):
            matches = self.scope.expand(target.pattern, cwd)
            if matches and len(matches) == 1:
                target = matches[0]
        return self.scope.resolve(target, cwd, self.scope.home)

    # words --------------------------------------------------------------------------------

    def _path_words(self, command: SimpleCommand, *, glued: bool = False) -> list[PathRef]:
        """The files a command's words may name: each word, `--opt=VALUE`, git's `REV:PATH`, what
        a glob matches on disk; with `glued`, also the value glued to a short option (`-f.env`),
        and the files its options name (`date -f F`), for deny rules."""
        key = (id(command), glued)
        cached = self._words.get(key)
        if cached is not None:
            return cached
        base = command.cwd or self.cwd
        out = []
        # the wrappers' words too: `xargs -a FILE echo` reads FILE, `env -C DIR` moves to DIR
        words = dict.fromkeys(w for form in (command.argv, *command.forms) for w in form[1:])
        for word in words:
            if word is None or word in ("-", "--"):
                continue
            if isinstance(word, Glob) and not word.startswith("-"):
                matches = self._glob(word, command)
                candidates = matches if matches else [str(word)]
            else:
                candidates = _path_candidates(word, glued=glued)
            for candidate in candidates:
                out.append(self.scope.resolve(candidate, base, self.scope.home))
        if glued:
            kind = inspect(command.argv, command.splits)
            if kind is not None:
                out += self._option_files(command, kind)
        self._words[key] = out
        return out

    def _path_rule(self, rule: Rule, ref: PathRef, *, deny: bool) -> bool:
        assert rule.pattern is not None
        forms = ref.forms if deny else (ref.resolved,)
        return any(
            rule.pattern.matches(p, cwd=self.scope.cwd, home=self.scope.home, deny=deny)
            for p in forms
        )


def _path_candidates(word: str, *, glued: bool = False) -> list[str]:
    """The parts of a word that may name a file: the word, `--opt=VALUE`, git's `REV:PATH`, and
    with `glued` every tail of a short-option cluster (`-xf.env` may be `-x -f .env`)."""
    out = []
    if word.startswith("-"):
        if "=" in word:
            out.append(word.split("=", 1)[1])
        if glued and not word.startswith("--") and len(word) <= 64:
            out.extend(word[k:] for k in range(2, len(word)))
        return [w for w in out if w]
    out.append(word)
    if ":" in word and not word.startswith(("/", "./", "~")):
        tail = word.split(":", 1)[1]
        if tail:
            out.append(tail)
    return out


def _show(argv: Argv) -> str:
    return " ".join("…" if w is None else w for w in argv)


def _clip(text: str, limit: int = 60) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"
