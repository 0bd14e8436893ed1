"""What the read-only parts of a shell call must not do when a rule or the mode makes it all run
unconfined.

A call is confined only when nothing but the read-only analysis admitted it. When a rule admits
one command (`Bash(git status:*)`) or the mode a redirection (`acceptEdits`), the whole call runs
as the user would run it, its read-only parts included: with the full environment and the
network. Those parts were judged for what they read from the workspace, so two things they could
do unconfined make the call ask instead: print the environment (only confined commands lose the
credential variables, and output redaction knows their values only verbatim: `${TOKEN:1}` or
`| base64` evade it), and, for git in a partial clone, fetch a missing object from the promisor
remote the repository names; and a walk (`grep -R`, `find -L`) may follow a link the repository
ships out of the workspace into credential stores only the sandbox hides.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING

from tether.core.permissions.readonly import inspect

if TYPE_CHECKING:
    from tether.core.permissions.shellcheck import ShellCheck

READ_ONLY = "read-only"  # the label `ShellCheck._admit` gives the read-only auto-allow
_ENV_READERS = frozenset({"printenv", "env", "export", "declare", "set", "typeset"})
_AWKS = frozenset({"awk", "gawk", "mawk", "nawk"})
# a parameter expansion anywhere (here-strings and here-documents too): `$X`, `${…}`, `$1`, `$@`
_EXPANSION = re.compile(r"\$[A-Za-z_{@*#?!$0-9-]")
_WHY = "would run unconfined (a rule or the mode admits the rest of the command)"


def unconfined_problem(check: ShellCheck, matched: Sequence[str]) -> str | None:
    """Why the call must ask although every command in it was admitted (`matched[i]` says what
    admitted `check.commands[i]`), or None."""
    read_only = [c for c, how in zip(check.commands, matched, strict=True)
                 if how.startswith(READ_ONLY)]
    if not read_only:
        return None
    for command in read_only:
        if command.argv[0] != "git" or command.cwd is None:
            continue
        run_dir = check.scope.resolve(str(command.cwd), check.cwd, check.scope.home).resolved
        remote = check.scope.lazy_fetch(run_dir)
        if remote:
            return (f"`{_show(command.argv)}` {_WHY} in a partial clone, where a read fetches "
                    f"from {remote}")
    for command in read_only:
        if command.argv[0] == "gh":  # confined it finds no network; unconfined it sends the token
            return f"`{_show(command.argv)}` {_WHY} and talks to a server over the network"
        kind = inspect(command.argv, command.splits)
        if command.argv[0] != "git" and kind is not None and kind.recursive:
            # confined, the kernel hides the credential stores a walk may reach through a link
            # the repository ships (`home -> ~`); unconfined, nothing does
            return (f"`{_show(command.argv)}` {_WHY} and walks a tree, which links in it can lead "
                    "out of the workspace into files only the sandbox would hide")
    env = "and could print the environment, whose credentials only confined commands lose"
    for command in read_only:
        name, args = command.argv[0], command.argv[1:]
        if (name in _ENV_READERS or command.splits or any(w is None for w in args)
                or (name == "jq" and any("env" in (w or "").lower() for w in args))
                or (name in _AWKS and any("ENVIRON" in (w or "") for w in args))):
            return f"`{_show(command.argv)}` {_WHY} {env}"
    if _EXPANSION.search(check.call.command or ""):
        return f"The command expands a variable where part of it {_WHY} {env}"
    return None


def _show(argv: Sequence[str | None]) -> str:
    return " ".join("…" if w is None else w for w in argv)
