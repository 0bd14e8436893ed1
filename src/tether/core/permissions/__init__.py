"""Who may run what: rules, modes and the one `decide()` that applies them.

    rules.py         the rule grammar (`Bash(git status:*)`, `Read(src/**)`, aliases)
    paths.py         gitignore-style patterns, resolution, containment, globs on disk
    shell.py         what a shell command runs, read with tree-sitter-bash
    words.py         a word's static value, globs, braces, and expansions that run data as code
    wrappers.py      timeout/env/sudo/xargs/bash -c/git -C/find -exec peeled to the real command
    launchers.py     the real option grammars of the launchers wrappers.py peels
    options.py       GNU option parsing (abbreviations, clusters, glued values)
    readonly.py      the inspect commands that run without asking (kernel-confined)
    readonly_git.py  the same for git and gh
    readonly_scripts.py  the same for sed and awk programs
    checker.py       `decide(call, policy)`, the reference's check order; guards
    shellcheck.py    the shell half of `decide()`
    modes.py         modes and the `Decision` value (`confine`)
"""

from tether.core.permissions.checker import Call, Guards, Policy, RuleSet, Scope, decide
from tether.core.permissions.modes import (
    MODE_STRICTNESS,
    PERMISSION_MODES,
    Decision,
    Verdict,
    headless_denial,
    normalize_mode,
)
from tether.core.permissions.rules import Rule, RuleError, parse_rule

__all__ = [
    "MODE_STRICTNESS",
    "PERMISSION_MODES",
    "Call",
    "Decision",
    "Guards",
    "Policy",
    "Rule",
    "RuleError",
    "RuleSet",
    "Scope",
    "Verdict",
    "decide",
    "headless_denial",
    "normalize_mode",
    "parse_rule",
]
