"""Permission rules: the grammar of `Tool`, `Tool(specifier)` and `*`, parsed once into `Rule`s.

    *                     every call of every tool
    Bash  /  Bash()       every call of a tool family (aliases fold to canonical names first)
    Bash(git status)      a shell command, exactly (compared token by token after quote removal)
    Bash(git status:*)    a shell command prefix, on token boundaries (`git statusx` is not in it)
    Read(src/**)          a file family with a gitignore-style glob (see `paths.PathPattern`)
    Agent(explore)        any other family: the call's primary argument (Task: subagent_type)
    mcp__git              every tool of MCP server `git`; `mcp__git__status` one of its tools

MCP rules match whole names, case-folded, spelled as `mcp/tools.py` builds tool names
(`mcp_rule_matches`): `mcp__git` covers server `git` only, never a server `git__evil` or
`github`, and a deny of `mcp__evil` covers server `Evil` too.

A rule that does not parse raises `RuleError` naming the rule and why; callers add the file. Rules
never widen silently: a specifier tether cannot evaluate for a tool matches every call of that
tool when it denies or asks, and none when it allows.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

from tether.core.permissions.paths import PathPattern
from tether.errors import UsageError


class RuleError(UsageError):
    """A permission rule that does not parse; the message names the rule and, when known, where."""


SHELL_FAMILY = "Bash"
READ_FAMILIES = frozenset({"Read", "Glob", "Grep", "ListDir"})
WRITE_FAMILIES = frozenset({"Write", "Edit"})
FILE_FAMILIES = READ_FAMILIES | WRITE_FAMILIES

# Tool names as models and other runtimes spell them, folded to the family a rule names.
_ALIASES = {
    "shell": "Bash",
    "Shell": "Bash",
    "exec_command": "Bash",
    "run_shell_command": "Bash",
    "shell_command": "Bash",
    "write_stdin": "Bash",
    "Monitor": "Bash",
    "read_file": "Read",
    "ViewImage": "Read",
    "view_image": "Read",
    "write_todos": "TodoWrite",
    "ReadFile": "Read",
    "read_many_files": "Read",
    "ReadManyFiles": "Read",
    "write_file": "Write",
    "WriteFile": "Write",
    "MultiEdit": "Edit",
    "NotebookEdit": "Edit",
    "replace": "Edit",
    "Replace": "Edit",
    "apply_patch": "Edit",
    "ApplyPatch": "Edit",
    "glob": "Glob",
    "glob_files": "Glob",
    "grep_files": "Grep",
    "search_file_content": "Grep",
    "SearchFileContent": "Grep",
    "list_dir": "ListDir",
    "LS": "ListDir",
    "list_directory": "ListDir",
    "ListDirectory": "ListDir",
    "Agent": "Task",
}

_NAME = re.compile(r"^(?:\*|[A-Za-z_][A-Za-z0-9_.:-]*)$")

RuleKind = Literal["any", "family", "shell_exact", "shell_prefix", "path", "argument"]


def canonical_tool_name(name: str) -> str:
    """The family a tool name belongs to for rule matching (`LS` → `ListDir`, `Agent` → `Task`)."""
    return _ALIASES.get(name, name)


_MCP = "mcp__"
_MCP_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")  # as mcp/tools.py spells server and tool names


def mcp_segment(name: str) -> str:
    """A server or tool name as rules compare it: spelled as in tool names, case-folded."""
    return _MCP_UNSAFE.sub("_", name).casefold()


def is_mcp_name(name: str) -> bool:
    return name[: len(_MCP)].casefold() == _MCP


def mcp_rule_matches(rule_family: str, tool: str, server: str | None, *, deny: bool) -> bool:
    """Whether a rule naming `mcp__<server>` or `mcp__<server>__<tool>` covers the MCP tool
    `tool` of `server`: the rule must be the server's whole name or the tool's whole name.
    Without the server (a name alone is ambiguous: server names may contain `__`), a deny covers
    every server the name could belong to, an allow only the one reading of an unambiguous name."""
    want = mcp_segment(rule_family)
    name = mcp_segment(tool)
    if want == name:
        return True
    if server is not None:
        return want == _MCP + mcp_segment(server)
    rest = name[len(_MCP):]
    splits = [i for i in range(1, len(rest)) if rest.startswith("__", i)]
    servers = {_MCP + rest[:i] for i in splits}
    if deny:
        return want in servers
    return len(splits) == 1 and want in servers


def families_covered(rule_family: str) -> frozenset[str]:
    """Call families a rule's family applies to: Read rules guard every reading tool, and a Write
    rule and an Edit rule both guard every writing tool (an edit is a write)."""
    if rule_family == "Read":
        return READ_FAMILIES
    if rule_family in WRITE_FAMILIES:
        return WRITE_FAMILIES
    return frozenset({rule_family})


@dataclass(frozen=True, slots=True)
class Rule:
    text: str  # as written, for messages ("Permission denied by rule: Bash(rm:*)")
    family: str  # canonical family, or "*"
    kind: RuleKind
    tokens: tuple[str, ...] = ()  # shell rules: the command or prefix, split as bash would
    pattern: PathPattern | None = None  # file rules
    argument: str | None = None  # other families: the primary argument

    def __str__(self) -> str:
        return self.text


def parse_rule(text: str) -> Rule:
    """One rule from its text; raises `RuleError` saying what is wrong with it."""
    if not isinstance(text, str):
        raise RuleError(f"permission rule {text!r} is not a string")
    raw = text.strip()
    if not raw:
        raise RuleError("permission rule is empty")
    if raw == "*":
        return Rule(raw, "*", "any")
    open_at = raw.find("(")
    if open_at == -1:
        if ")" in raw:
            raise RuleError(f"permission rule {raw!r} has ')' without '('")
        return Rule(raw, _family(raw, raw), "family")
    if not raw.endswith(")"):
        raise RuleError(f"permission rule {raw!r} must end with ')' after its specifier")
    family = _family(raw[:open_at].strip(), raw)
    spec = raw[open_at + 1 : -1].strip()
    if not spec:
        return Rule(raw, family, "family")
    if family == "*":
        raise RuleError(f"permission rule {raw!r}: '*' takes no specifier")
    if family == SHELL_FAMILY:
        return _shell_rule(raw, spec)
    if family in FILE_FAMILIES:
        try:
            return Rule(raw, family, "path", pattern=PathPattern.parse(spec))
        except ValueError as exc:
            raise RuleError(f"permission rule {raw!r}: {exc}") from None
    return Rule(raw, family, "argument", argument=spec)


def _family(name: str, raw: str) -> str:
    if not _NAME.match(name):
        raise RuleError(f"permission rule {raw!r}: {name!r} is not a tool name")
    return canonical_tool_name(name)


def _shell_rule(raw: str, spec: str) -> Rule:
    prefix = False
    if spec.endswith(":*"):
        spec, prefix = spec[:-2], True
    elif spec == "*" or spec.endswith(" *"):
        spec, prefix = spec[:-1], True
    try:
        tokens = tuple(shlex.split(spec))
    except ValueError as exc:
        raise RuleError(f"permission rule {raw!r}: the command does not tokenise ({exc})") from None
    if not tokens and not prefix:
        raise RuleError(f"permission rule {raw!r} names no command")
    return Rule(raw, SHELL_FAMILY, "shell_prefix" if prefix else "shell_exact", tokens=tokens)


def split_rule_list(value: str) -> list[str]:
    """A `--allowedTools` value: rules separated by commas or spaces; parentheses protect both."""
    out: list[str] = []
    depth = 0
    current: list[str] = []
    for ch in value:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth = max(0, depth - 1)
        if depth == 0 and (ch == "," or ch.isspace()):
            if current:
                out.append("".join(current))
                current = []
            continue
        current.append(ch)
    if current:
        out.append("".join(current))
    if depth:
        raise RuleError(f"tool list {value!r} has an unclosed '('")
    return out


def cli_allow_rule(text: str) -> Rule:
    """`--allowedTools` as the reference: a bare shell tool is `Bash(:*)`, a bare file tool is
    `Tool(**)` (the working directory, not the whole disk)."""
    rule = parse_rule(text)
    if rule.kind == "family" and rule.family in FILE_FAMILIES:
        return parse_rule(f"{text.strip().rstrip('()')}(**)")
    return rule


def parse_rules(texts: Iterable[object], where: str) -> tuple[Rule, ...]:
    """Rules from a settings list; `where` names the file and key for the error."""
    out: list[Rule] = []
    seen: set[str] = set()
    for index, text in enumerate(texts):
        if not isinstance(text, str):
            raise RuleError(f"{where}[{index}]: permission rule {text!r} is not a string")
        try:
            rule = parse_rule(text)
        except RuleError as exc:
            raise RuleError(f"{where}[{index}]: {exc}") from None
        if rule.text not in seen:
            seen.add(rule.text)
            out.append(rule)
    return tuple(out)


def dedup(rules: Sequence[Rule]) -> tuple[Rule, ...]:
    seen: set[str] = set()
    out = []
    for rule in rules:
        if rule.text not in seen:
            seen.add(rule.text)
            out.append(rule)
    return tuple(out)
