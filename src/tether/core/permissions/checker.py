"""`decide()`: the one place a tool call is judged allow, deny or ask.

The order is the reference's (§7.4), first match wins, deny before anything:

    0  guards: paths through /proc/<pid>/root|cwd|fd|environ or /dev/fd are denied
    1  settings deny            2  --disallowedTools
    3  alwaysAsk (settings and session): ask, and no hook may lift it
    4  mode: unrestricted allows, acceptEdits allows edits inside the workspace
    5  --allowedTools
    6  (not strict) read-only shell commands inside the workspace
    7  (not strict) Read / Glob / Grep / LS inside the workspace, and Skill
    8  session allow            9  settings allow           10 settings ask
    11 default: bookkeeping tools, the agent's own `memory` (confined to its repo) and the
       reflection subagents run; everything else asks

A shell call is judged per simple command (see `shell.analyse`): any command matching a deny
rule denies the call; it is allowed only when every command is admitted by step 5, 6, 8 or 9; a
part tether cannot see into makes it ask, even in unrestricted mode when deny rules exist that the
hidden part could be dodging. Path words of shell commands and redirection targets are held to the
file deny rules too (`cat .env` under `deny: Read(.env)`).

Confinement: a shell call allowed only by step 6 (every command read-only, no rule or mode
admitted any part of it, nor a redirection) comes back `Decision(..., confine=True)`: the runner
must run it in the kernel read-only sandbox. When `Policy.can_confine` is False there is no such
sandbox, and the call asks instead. A call that runs no command at all counts as read-only; in
`strict` it asks unless a rule admits every shell command.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from tether.core.permissions.gitconfig import git_hazard
from tether.core.permissions.modes import Decision
from tether.core.permissions.paths import PathRef, magic_link, resolve_path, within
from tether.core.permissions.rules import (
    FILE_FAMILIES,
    READ_FAMILIES,
    SHELL_FAMILY,
    WRITE_FAMILIES,
    Rule,
    canonical_tool_name,
    families_covered,
)

if TYPE_CHECKING:  # the shell analysis (and tree-sitter) loads on the first shell call only
    from tether.core.permissions.shell import ShellAnalysis, SimpleCommand

Argv = tuple[str | None, ...]  # as shell.Argv

# Step 11: tools that only change conversation state, and subagents that only read history.
DEFAULT_ALLOWED = frozenset({"TodoWrite", "TaskOutput", "TaskStop", "update_plan", "memory"})
READ_ONLY_SUBAGENTS = frozenset({"recall", "Recall", "reflection", "Reflection", "history-analyzer"})
_PRIMARY_ARGUMENT = {"Task": "subagent_type", "Skill": "skill", "WebFetch": "url"}


@dataclass(frozen=True, slots=True)
class RuleSet:
    deny: tuple[Rule, ...] = ()  # settings files
    cli_deny: tuple[Rule, ...] = ()  # --disallowedTools
    always_ask: tuple[Rule, ...] = ()  # settings and session
    cli_allow: tuple[Rule, ...] = ()  # --allowedTools
    session_allow: tuple[Rule, ...] = ()
    allow: tuple[Rule, ...] = ()  # settings files
    ask: tuple[Rule, ...] = ()  # settings files

    @property
    def denies(self) -> tuple[Rule, ...]:
        return self.deny + self.cli_deny

    def with_session_allow(self, rule: Rule) -> RuleSet:
        return RuleSet(self.deny, self.cli_deny, self.always_ask, self.cli_allow,
                       (*self.session_allow, rule), self.allow, self.ask)


def _no_hazard(_: Path) -> str | None:
    return None


@dataclass(frozen=True, slots=True)
class Scope:
    """Where the session may work: resolved roots (cwd first), home, and how to read the disk."""

    cwd: Path
    roots: tuple[Path, ...]
    home: Path
    resolve: Callable[[str, Path, Path], PathRef] = resolve_path
    git_hazard: Callable[[Path], str | None] = git_hazard

    @staticmethod
    def of(cwd: Path, home: Path, extra: Iterable[Path] = ()) -> Scope:
        roots = tuple(dict.fromkeys(Path(p).resolve() for p in (cwd, *extra)))
        return Scope(Path(cwd).resolve(), roots, Path(home).resolve())


@dataclass(frozen=True, slots=True)
class Guards:
    """Step 0, before any rule: the roots the kernel sandbox enforces for the shell, held for the
    file tools too, and the other agents' memory trees no file tool may enter."""

    writable_roots: tuple[Path, ...] | None = None  # workspace sandbox on: writes only here
    readonly_names: tuple[str, ...] = (".git", ".tether")  # read-only even inside writable roots
    agents_root: Path | None = None  # cross-agent guard: $TETHER_HOME/agents
    own_agent_dirs: tuple[Path, ...] = ()  # this agent's (and its parent's) trees under it

    def check(self, family: str, refs: Sequence[PathRef]) -> Decision | None:
        for ref in refs:
            path = ref.resolved
            if self.agents_root is not None and _enters_other_agent(path, family, self):
                return Decision("deny", f"Permission denied by cross-agent guard: {path} belongs "
                                        "to another agent's memory")
            if self.writable_roots is not None and family in WRITE_FAMILIES:
                root = next((r for r in self.writable_roots if within(path, (r,))), None)
                if root is None:
                    shown = ", ".join(str(r) for r in self.writable_roots)
                    return Decision("deny", f"Permission denied by workspace sandbox: {path} is "
                                            f"outside {shown}")
                rel = path.relative_to(root).parts
                if rel and rel[0] in self.readonly_names:
                    return Decision("deny", f"Permission denied by workspace sandbox: {path} is "
                                            f"inside {root / rel[0]}, which is read-only")
        return None


def _enters_other_agent(path: Path, family: str, guards: Guards) -> bool:
    root = guards.agents_root
    assert root is not None
    if within(path, guards.own_agent_dirs):
        return False
    if path != root and within(path, (root,)):
        return True
    # A recursive reader started above the tree would walk into it.
    return family in ("Glob", "Grep", "ListDir") and within(root, (path,))


@dataclass(frozen=True, slots=True)
class Policy:
    mode: str
    rules: RuleSet
    scope: Scope
    guards: Guards = field(default_factory=Guards)
    # Whether this run has a kernel backend that can confine a shell command read-only; without
    # one the read-only auto-allow asks instead (the runner sets it from the sandbox probe).
    can_confine: bool = True


@dataclass(frozen=True, slots=True)
class Call:
    """One proposed tool call, as much of it as permissions need."""

    tool: str
    args: Mapping[str, Any] = field(default_factory=dict)
    paths: tuple[str, ...] = ()  # what it touches, as given (relative to cwd)
    command: str | None = None  # shell families
    cwd: Path | None = None  # defaults to the scope's cwd
    external: bool = False  # executed by the client that registered it


def decide(call: Call, policy: Policy) -> Decision:
    family = canonical_tool_name(call.tool)
    if family == SHELL_FAMILY and call.command is not None:
        return _ShellCheck(call, policy).decide()
    return _decide_tool(call, family, policy)


# -- non-shell tools ------------------------------------------------------------------------------


def _decide_tool(call: Call, family: str, policy: Policy) -> Decision:
    scope, rules, mode = policy.scope, policy.rules, policy.mode
    cwd = call.cwd or scope.cwd
    refs = [scope.resolve(p, cwd, scope.home) for p in call.paths]
    for ref in refs:
        if magic_link(ref):
            return Decision("deny", f"Permission denied: {ref.spelled} goes through a /proc or "
                                    "/dev/fd link that can reach any file")
    if family in FILE_FAMILIES:
        guarded = policy.guards.check(family, refs)
        if guarded is not None:
            return guarded
    for rule in rules.denies:
        if _tool_rule(rule, family, call, refs, scope, deny=True):
            return Decision("deny", f"Permission denied by rule: {rule}", rule.text)
    for rule in rules.always_ask:
        if _tool_rule(rule, family, call, refs, scope, deny=True):
            return Decision("ask", f"{rule} always asks", rule.text, sticky=True)
    inside = all(within(r.resolved, scope.roots) for r in refs)
    if mode == "unrestricted":
        return Decision("allow", "permission mode unrestricted")
    if mode == "acceptEdits" and family in WRITE_FAMILIES and refs and inside:
        return Decision("allow", "permission mode acceptEdits allows edits inside the workspace")
    for rule in rules.cli_allow:
        if _tool_rule(rule, family, call, refs, scope, deny=False):
            return Decision("allow", f"allowed by --allowedTools {rule}", rule.text)
    if mode != "strict" and family in READ_FAMILIES and inside:
        return Decision("allow", "read-only tool inside the workspace")
    if mode != "strict" and family == "Skill":
        return Decision("allow", "loading a skill only reads its instructions")
    for source, group in (("session rule", rules.session_allow), ("rule", rules.allow)):
        for rule in group:
            if _tool_rule(rule, family, call, refs, scope, deny=False):
                return Decision("allow", f"allowed by {source} {rule}", rule.text)
    for rule in rules.ask:
        if _tool_rule(rule, family, call, refs, scope, deny=True):
            return Decision("ask", f"{rule} asks", rule.text)
    if mode == "strict":
        return Decision("ask", "permission mode strict asks for every call")
    if call.external:
        return Decision("allow", "external tool: the client that registered it executes it")
    if family in DEFAULT_ALLOWED:
        return Decision("allow", f"{call.tool} only changes conversation state")
    if family == "Task" and call.args.get("subagent_type") in READ_ONLY_SUBAGENTS:
        return Decision("allow", "the subagent only reads conversation history")
    if refs and not inside:
        outside = next(r.resolved for r in refs if not within(r.resolved, scope.roots))
        return Decision("ask", f"{call.tool} touches {outside}, outside the workspace")
    return Decision("ask", f"{call.tool} needs approval in permission mode {mode}")


def _tool_rule(
    rule: Rule, family: str, call: Call, refs: Sequence[PathRef], scope: Scope, *, deny: bool
) -> bool:
    if rule.kind == "any":
        return True
    if rule.family != family and family not in families_covered(rule.family):
        return False
    if rule.kind == "family":
        return True
    if rule.kind == "path":
        assert rule.pattern is not None
        if family not in FILE_FAMILIES or not refs:
            return deny
        cwd = scope.cwd
        if deny:
            return any(
                rule.pattern.matches(p, cwd=cwd, home=scope.home, deny=True)
                for r in refs for p in r.forms
            )
        return all(rule.pattern.matches(r.resolved, cwd=cwd, home=scope.home, deny=False) for r in refs)
    if rule.kind == "argument":
        key = _PRIMARY_ARGUMENT.get(family)
        value = call.args.get(key) if key else None
        if not isinstance(value, str):
            return deny  # cannot tell: a deny or ask covers it, an allow does not
        return value == rule.argument
    return False  # shell rules never match other tools


# -- shell ------------------------------------------------------------------------------------------

_Match = Literal["yes", "maybe", "no"]
_READ_ONLY = "read-only"  # how `_admit` labels the auto-allow, as opposed to a rule


def _shell_rule(rule: Rule, argv: Argv, *, deny: bool) -> _Match:
    if rule.kind in ("any", "family"):
        return "yes" if rule.family in ("*", SHELL_FAMILY) else "no"
    if rule.family != SHELL_FAMILY or rule.kind not in ("shell_exact", "shell_prefix"):
        return "no"
    tokens = rule.tokens
    if rule.kind == "shell_exact" and len(argv) != len(tokens):
        return "no"
    if len(argv) < len(tokens):
        return "no"
    unknown = False
    for want, have in zip(tokens, argv, strict=False):
        if have is None:
            unknown = True
        elif have != want:
            return "no"
    if unknown:
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


class _ShellCheck:
    def __init__(self, call: Call, policy: Policy) -> None:
        self.call = call
        self.policy = policy
        self.scope = policy.scope
        self.rules = policy.rules
        self.cwd = call.cwd or self.scope.cwd
        assert call.command is not None
        from tether.core.permissions.shell import analyse

        self.analysis: ShellAnalysis = analyse(call.command, self.cwd, self.scope.home)
        self.commands = [c for c in self.analysis.commands if c.role == "command"]
        self._words: dict[int, list[PathRef]] = {}  # path words per command, resolved once

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
        if self.policy.guards.agents_root is not None:
            for command in self.commands:
                guarded = self.policy.guards.check("Read", self._path_words(command))
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
            reads_only = _inspect(command.argv) is not None
            for ref in self._path_words(command):
                for rule in denies:
                    if rule.family in WRITE_FAMILIES and reads_only:
                        continue
                    if self._path_rule(rule, ref, deny=True):
                        return rule
        for redirect in self.analysis.redirects:
            if redirect.target is None:
                continue
            ref = self.scope.resolve(redirect.target, redirect.cwd or self.cwd, self.scope.home)
            guarded_by = WRITE_FAMILIES if redirect.write else READ_FAMILIES
            for rule in denies:
                if rule.family in guarded_by and self._path_rule(rule, ref, deny=True):
                    return rule
        return None

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
        kind = _inspect(command.argv)
        if kind is None:
            return f"`{shown}` needs approval"
        if kind.recursive and any(r.kind == "path" and r.family in ("Read", *READ_FAMILIES)
                                  for r in self.rules.denies):
            return f"`{shown}` reads whole trees, which may hold files your deny rules protect"
        if command.argv[0] == "git":
            hazard = self.scope.git_hazard(run_dir)
            if hazard:
                return f"`{shown}` would run {hazard} from the repository's git config"
        if kind.paths:
            for ref in self._path_words(command):
                if magic_link(ref) or not within(ref.resolved, self.scope.roots):
                    return f"`{shown}` reads {ref.spelled}, outside the workspace"
        return None

    def _redirect_problem(
        self, target: str | None, write: bool, cwd: Path | None
    ) -> tuple[str | None, bool]:
        """(why it asks, None) or (None, whether a rule or the mode rather than the read-only
        default admitted it)."""
        if target is None or cwd is None:
            return "The command redirects to a file whose name is only known at run time", False
        ref = self.scope.resolve(target, cwd, self.scope.home)
        inside = within(ref.resolved, self.scope.roots) and not magic_link(ref)
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

    # words --------------------------------------------------------------------------------

    def _path_words(self, command: SimpleCommand) -> list[PathRef]:
        cached = self._words.get(id(command))
        if cached is not None:
            return cached
        base = command.cwd or self.cwd
        out = []
        for word in command.argv[1:]:
            if word is None or word in ("-", "--"):
                continue
            for candidate in _path_candidates(word):
                out.append(self.scope.resolve(candidate, base, self.scope.home))
        self._words[id(command)] = out
        return out

    def _path_rule(self, rule: Rule, ref: PathRef, *, deny: bool) -> bool:
        assert rule.pattern is not None
        forms = ref.forms if deny else (ref.resolved,)
        return any(
            rule.pattern.matches(p, cwd=self.scope.cwd, home=self.scope.home, deny=deny)
            for p in forms
        )


def _path_candidates(word: str) -> list[str]:
    """The parts of a word that may name a file: the word, `--opt=VALUE`, git's `REV:PATH`."""
    out = []
    if word.startswith("-"):
        if "=" in word:
            out.append(word.split("=", 1)[1])
        return [w for w in out if w]
    out.append(word)
    if ":" in word and not word.startswith(("/", "./", "~")):
        tail = word.split(":", 1)[1]
        if tail:
            out.append(tail)
    return out


def _inspect(argv: Argv) -> Any:
    from tether.core.permissions.readonly import inspect

    return inspect(argv)


def _show(argv: Argv) -> str:
    return " ".join("…" if w is None else w for w in argv)


def _clip(text: str, limit: int = 60) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"
