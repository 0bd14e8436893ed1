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

Step 0 also holds tether's own state (`Guards.state_root`) out of reach, and writes into
`.git/` or `.tether/` (any depth) ask in every mode unless an allow rule names that directory.

A shell call (`shellcheck.py`) is judged per simple command (see `shell.analyse`): any command
matching a deny
rule denies the call; it is allowed only when every command is admitted by step 5, 6, 8 or 9; a
part tether cannot see into makes it ask, even in unrestricted mode when deny rules exist that the
hidden part could be dodging. Path words of shell commands and redirection targets are held to the
file deny rules too (`cat .env` under `deny: Read(.env)`).

A write to a running exec_command session (`write_stdin`, `Call.session`) is input to whatever
program runs there: a confined session stays confined, otherwise the input is decided as a new
command against what admitted the session's first command (see `sessions.py`); an
unknown session is denied.

Confinement: a shell call allowed only by step 6 (every command read-only, no rule or mode
admitted any part of it, nor a redirection) comes back `Decision(..., confine=True)`: the runner
must run it in the kernel read-only sandbox. When `Policy.can_confine` is False there is no such
sandbox, and the call asks instead. A call that runs no command at all counts as read-only; in
`strict` it asks unless a rule admits every shell command.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from tether.core.permissions.gitconfig import config_files, git_hazard, lazy_fetch
from tether.core.permissions.modes import Decision
from tether.core.permissions.paths import (
    PathPattern,
    PathRef,
    arms_later,
    expand_glob,
    fold,
    hard_linked,
    magic_link,
    names_arming_dir,
    resolve_path,
    within,
)
from tether.core.permissions.rules import (
    FILE_FAMILIES,
    READ_FAMILIES,
    SHELL_FAMILY,
    WRITE_FAMILIES,
    Rule,
    canonical_tool_name,
    families_covered,
    is_mcp_name,
    mcp_rule_matches,
)

# Step 11: tools that only change conversation state, and subagents that only read history.
DEFAULT_ALLOWED = frozenset({
    "TodoWrite", "TaskOutput", "TaskStop", "update_plan", "UpdatePlan", "memory", "memory_apply_patch",
    "TaskCreate", "TaskGet", "TaskList", "TaskUpdate",
})
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


@dataclass(frozen=True, slots=True)
class Scope:
    """Where the session may work: resolved roots (cwd first), home, and how to read the disk."""

    cwd: Path
    roots: tuple[Path, ...]
    home: Path
    resolve: Callable[[str, Path, Path], PathRef] = resolve_path
    git_hazard: Callable[[Path], str | None] = git_hazard
    # where a read fetches from a partial clone's promisor remote (see gitconfig.lazy_fetch)
    lazy_fetch: Callable[[Path], str | None] = lazy_fetch
    hard_linked: Callable[[Path], bool] = hard_linked  # a file with other names (st_nlink > 1)
    git_files: Callable[[Path], tuple[str, ...]] = config_files  # files a repo's config reads
    expand: Callable[[str, Path], list[str] | None] = expand_glob  # a shell glob, on disk
    # What else a write arms for later (beyond `.git`/`.tether`, which core knows): names the
    # runtime takes from `sandbox/armed.py` (`.envrc`, `.vscode` …), read on first use, and the
    # workspace files the user's hooks run (`runtime/extensions/hooks.hook_scripts`).
    armed_names: Callable[[], frozenset[str]] = frozenset
    armed_files: tuple[Path, ...] = ()

    @staticmethod
    def of(cwd: Path, home: Path, extra: Iterable[Path] = ()) -> Scope:
        roots = tuple(dict.fromkeys(Path(p).resolve() for p in (cwd, *extra)))
        return Scope(Path(cwd).resolve(), roots, Path(home).resolve())


@dataclass(frozen=True, slots=True)
class Guards:
    """Step 0, before any rule: the roots the kernel sandbox enforces for the shell, held for the
    file tools too; tether's own state (`state_root`, i.e. `$TETHER_HOME`), which no file tool and
    no shell path word may read or write outside the run's own dirs; and the older, narrower
    cross-agent guard (`agents_root`), kept for callers that set only it."""

    writable_roots: tuple[Path, ...] | None = None  # workspace sandbox on: writes only here
    readonly_names: tuple[str, ...] = (".git", ".tether")  # read-only even inside writable roots
    agents_root: Path | None = None  # cross-agent guard: $TETHER_HOME/agents
    own_agent_dirs: tuple[Path, ...] = ()  # this agent's (and its parent's) trees under it
    state_root: Path | None = None  # $TETHER_HOME: credentials, conversations, checkpoints
    own_state_dirs: tuple[Path, ...] = ()  # the run's own: memory tree(s), conversation scratch

    def state_check(self, family: str, refs: Sequence[PathRef]) -> Decision | None:
        """The cross-agent and state guards alone (shell words: the kernel enforces the rest)."""
        own = (*self.own_agent_dirs, *self.own_state_dirs)
        for ref in refs:
            path = ref.resolved
            if self.agents_root is not None and _enters(path, family, self.agents_root, own):
                return Decision("deny", f"Permission denied by cross-agent guard: {path} belongs "
                                        "to another agent's memory")
            if self.state_root is not None and any(
                _enters(p, family, self.state_root, own) for p in ref.forms
            ):
                return Decision("deny", f"Permission denied by tether state guard: {path} is "
                                        "tether's own state (credentials, other conversations)")
        return None

    def check(self, family: str, refs: Sequence[PathRef]) -> Decision | None:
        guarded = self.state_check(family, refs)
        if guarded is not None:
            return guarded
        for ref in refs:
            path = ref.resolved
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

    @property
    def active(self) -> bool:
        return self.agents_root is not None or self.state_root is not None


def _enters(path: Path, family: str, root: Path, own: Sequence[Path]) -> bool:
    if within(path, own):
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
    read_only_hint: bool = False  # an MCP tool its server marks read-only, opted in by a setting
    # A write to a running exec_command session (write_stdin): how that session's start was
    # admitted, SESSION_ALLOWED or SESSION_CONFINED, or SESSION_UNKNOWN for no such session.
    # None for every other call.
    session: str | None = None
    mcp_server: str | None = None  # an MCP tool: its server's configured name (rules match it)
    # Tools that touch paths in different ways (ApplyPatch): (family, path) for every path the
    # call reads, writes, deletes or moves from/to; each is judged under its family's rules.
    accesses: tuple[tuple[str, str], ...] = ()
    # write_stdin: the command that started the session, and its folder (None: not known)
    session_start: tuple[str, Path | None] | None = None


SESSION_ALLOWED = "allowed"  # by a rule, the mode, a hook or a human
SESSION_CONFINED = "confined"  # by the read-only auto-allow: it runs in the read-only sandbox
SESSION_UNKNOWN = "unknown"


def decide(call: Call, policy: Policy) -> Decision:
    if policy.mode == "plan":  # reads only, until the user approves a plan
        from tether.core.permissions.plan import decide_in_plan_mode

        return decide_in_plan_mode(call, policy)
    family = canonical_tool_name(call.tool)
    if call.session is not None and family == SHELL_FAMILY and call.command is None:
        from tether.core.permissions.sessions import decide_session_write

        return decide_session_write(call, family, policy)
    if family == SHELL_FAMILY and call.command is not None:
        # the shell analysis (and tree-sitter) loads on the first shell call only
        from tether.core.permissions.shellcheck import ShellCheck

        return ShellCheck(call, policy).decide()
    if call.accesses:
        return _decide_accesses(call, policy)
    scope = policy.scope
    refs = [scope.resolve(p, call.cwd or scope.cwd, scope.home) for p in call.paths]
    decision = _decide_tool(call, family, policy, refs)
    if not refs or decision.verdict == "deny":
        return decision
    # What was judged is what the tool may open: a name swapped for a link later leads nowhere.
    return replace(decision, judged=tuple(str(r.resolved) for r in refs))


def _decide_accesses(call: Call, policy: Policy) -> Decision:
    """Each path under the rules of what the call does to it (a patch's move reads and deletes
    its source and writes its destination): a deny of any denies, else an ask of any asks, and
    only when every one is allowed is the call; it may then open what every one judged."""
    asked: Decision | None = None
    judged: list[str] = []
    for family, path in call.accesses:
        one = decide(replace(call, tool=family, paths=(path,), accesses=()), policy)
        if one.verdict == "deny":
            return replace(one, reason=f"{one.reason} ({call.tool} {_VERBS.get(family, 'touches')} {path})")
        if one.verdict == "ask" and (asked is None or (one.sticky and not asked.sticky)):
            asked = replace(one, reason=f"{call.tool} {_VERBS.get(family, 'touches')} {path}: {one.reason}")
        judged.extend(one.judged)
    if asked is not None:
        return asked
    return Decision("allow", f"every path {call.tool} touches is allowed",
                    judged=tuple(dict.fromkeys(judged)))


_VERBS = {"Read": "reads", "Edit": "changes or deletes", "Write": "writes"}


# -- non-shell tools ------------------------------------------------------------------------------


def _decide_tool(call: Call, family: str, policy: Policy, refs: list[PathRef]) -> Decision:
    scope, rules, mode = policy.scope, policy.rules, policy.mode
    for ref in refs:
        if magic_link(ref):
            return Decision("deny", f"Permission denied: {ref.spelled} goes through a /proc or "
                                    "/dev/fd link that can reach any file")
    if family in FILE_FAMILIES:
        guarded = policy.guards.check(family, refs)
        if guarded is not None:
            return guarded
    # An edit reads the file it changes (its match is an oracle, its result shows the lines
    # around the change): Read path denies bind it too. A Write replaces without reading.
    reads = family == "Edit"
    for rule in rules.denies:
        if _tool_rule(rule, family, call, refs, scope, deny=True) or (
                reads and rule.kind == "path" and _tool_rule(rule, "Read", call, refs, scope, deny=True)):
            return Decision("deny", f"Permission denied by rule: {rule}", rule.text)
    for rule in rules.always_ask:
        if _tool_rule(rule, family, call, refs, scope, deny=True):
            return Decision("ask", f"{rule} always asks", rule.text, sticky=True)
    if family in WRITE_FAMILIES:
        armed = _arming_write(refs, family, rules, scope)
        if armed is not None:
            return armed
    inside = all(within(r.resolved, scope.roots) for r in refs)
    if mode == "unrestricted":
        return Decision("allow", "permission mode unrestricted")
    if inside and family in FILE_FAMILIES and any(scope.hard_linked(r.resolved) for r in refs):
        # Its other names may be outside the workspace or under a deny rule: the mode's and the
        # workspace's auto-allows do not cover it (an explicit rule or a human still may).
        inside = False
    if mode == "acceptEdits" and family in WRITE_FAMILIES and refs and inside:
        return Decision("allow", "permission mode acceptEdits allows edits inside the workspace")
    for rule in rules.cli_allow:
        if _tool_rule(rule, family, call, refs, scope, deny=False):
            return Decision("allow", f"allowed by --allowedTools {rule}", rule.text)
    if mode != "strict" and family in READ_FAMILIES and inside:
        return Decision("allow", "read-only tool inside the workspace")
    if mode != "strict" and family == "Skill":
        return Decision("allow", "loading a skill only reads its instructions")
    if mode != "strict" and call.read_only_hint and not refs:
        return Decision("allow", "the MCP server marks the tool read-only (autoAllowReadOnly)")
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
        outside = next((r.resolved for r in refs if not within(r.resolved, scope.roots)), None)
        if outside is None:
            linked = next(r.spelled for r in refs if scope.hard_linked(r.resolved))
            return Decision("ask", f"{call.tool} touches {linked}, a file with other names (hard "
                                   "links) that may be outside the workspace or under a deny rule")
        return Decision("ask", f"{call.tool} touches {outside}, outside the workspace")
    return Decision("ask", f"{call.tool} needs approval in permission mode {mode}")


def _arming_write(
    refs: Sequence[PathRef], family: str, rules: RuleSet, scope: Scope
) -> Decision | None:
    """A write into `.git/` or `.tether/` (any depth, any mode): git hooks and config, tether's
    settings run later without asking; so do `.envrc`, editor tasks (`.vscode`, `.idea`) and
    the scripts the user's hooks run (`Scope.armed_names`, `Scope.armed_files`). Only an allow
    rule that names such a path, or a human, may admit it; the mode and broad rules (`Edit(**)`)
    do not."""
    for ref in refs:
        armed = armed_target(ref, scope)
        if armed is None:
            continue
        for rule in (*rules.cli_allow, *rules.session_allow, *rules.allow):
            if (rule.kind == "path" and rule.pattern is not None
                    and family in families_covered(rule.family)
                    and names_armed(rule.pattern, scope)
                    and rule.pattern.matches(ref.resolved, cwd=scope.cwd, home=scope.home,
                                             deny=False)):
                return Decision("allow", f"allowed by rule {rule}, which names {armed}", rule.text)
        return Decision("ask", f"Writing {ref.spelled} changes {armed}, whose contents run later "
                               "without asking (git hooks and config, tether settings, .envrc, "
                               "editor tasks, scripts your hooks run); only a rule naming it, or "
                               "you, may allow it")
    return None


def armed_target(ref: PathRef, scope: Scope) -> str | None:
    """What a write to `ref` would arm for later unasked execution (the `.git`/`.tether`
    directory, the `.envrc`/`.vscode`… path, the hook script), or None."""
    armed = arms_later(ref, scope.roots)
    if armed is None:
        armed = _armed_name(ref, scope.roots, scope.armed_names())
    return armed or _armed_file(ref, scope.armed_files)


def _armed_name(ref: PathRef, roots: Sequence[Path], names: frozenset[str]) -> str | None:
    for form in ref.forms if names else ():
        root = next((r for r in roots if within(form, (r,))), None)
        if root is None:
            continue
        parts = form.relative_to(root).parts
        for index, part in enumerate(parts):
            if fold(part) in names:
                return str(root.joinpath(*parts[: index + 1]))
    return None


def _armed_file(ref: PathRef, files: Sequence[Path]) -> str | None:
    hit = next((f for f in ref.forms if f in files), None)
    return f"{hit} (a script your hooks run)" if hit is not None else None


def names_armed(pattern: PathPattern, scope: Scope) -> bool:
    """An allow rule's pattern spells out an armed directory, name or (globless) file."""
    if names_arming_dir(pattern):
        return True
    names = scope.armed_names()
    if any(fold(p) in names for p in pattern.body.split("/")):
        return True
    return bool(scope.armed_files) and not any(c in pattern.body for c in "*?[")


def _tool_rule(
    rule: Rule, family: str, call: Call, refs: Sequence[PathRef], scope: Scope, *, deny: bool
) -> bool:
    if rule.kind == "any":
        return True
    if is_mcp_name(rule.family) or is_mcp_name(family):
        # whole server or tool names only, case-folded (`mcp__git` is not server `git__evil`)
        if not (is_mcp_name(rule.family) and is_mcp_name(family)
                and mcp_rule_matches(rule.family, call.tool, call.mcp_server, deny=deny)):
            return False
        return rule.kind == "family" or deny  # a specifier tether cannot read: deny/ask only
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
