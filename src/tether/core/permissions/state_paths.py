"""The state guard's view of a shell command's paths that are only known at run time (issue 30.7).

The analysis reads `$TETHER_HOME` (and `$HOME`, `$PWD`, `~`) as the paths they are and follows
`cd`/`pushd`/`popd`, so `cd "$TETHER_HOME"; echo x > f` is judged as a write of `$TETHER_HOME/f`
and denied like any path word inside tether's state (`state_cwd`: a command the command itself
moved into the state dir is denied too — `git init`, `rm -rf *` name no file). What the command
computes itself stays unknown — `D=$TETHER_HOME; echo x > $D/f`, `cd "$(…)"`, `cp k "$1"` — and
could be inside the state dir as well (a variable only the run's environment sets is the user's
value, not the model's). Under a workspace sandbox the kernel keeps the state dir out of reach;
without one nothing would, so `state_unseen` says why such a command must ask even in
unrestricted mode: a redirection to a file the command names at run time (or relative to a
directory it reaches at run time), a command run in such a directory, or such a file operand of
a command that reads or writes the files it names (the read-only file readers; `cp`, `mv`, `rm`,
`tee` … below). A program's own file access (`python -c …`) is not a shell path: only the
sandbox confines that.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tether.core.permissions.modes import Decision
from tether.core.permissions.paths import within
from tether.core.permissions.readonly import inspect

if TYPE_CHECKING:
    from tether.core.permissions.shell import SimpleCommand
    from tether.core.permissions.shellcheck import ShellCheck

# Commands whose operands are files they create, change or remove.
FILE_WRITERS = frozenset({
    "cp", "mv", "rm", "rmdir", "mkdir", "touch", "ln", "tee", "install", "truncate", "chmod",
    "chown", "chgrp", "shred", "unlink", "dd", "rsync", "tar", "unzip", "zip", "sed", "patch",
    "mkfifo", "mknod", "split", "csplit", "gzip", "gunzip", "bzip2", "xz", "zstd",
})


def state_cwd(check: ShellCheck, command: SimpleCommand) -> Decision | None:
    """Deny a command the shell command itself moved into tether's state dir (not the call's
    own directory, which a memory worktree may be)."""
    guards = check.policy.guards
    root, cwd = guards.state_root, command.cwd
    if root is None or cwd is None or cwd == check.cwd:
        return None
    run_dir = check.scope.resolve(str(cwd), check.cwd, check.scope.home).resolved
    own = (*guards.own_agent_dirs, *guards.own_state_dirs)
    if within(run_dir, (root,)) and not within(run_dir, own):
        return Decision("deny", f"Permission denied by tether state guard: the command moves into "
                                f"{run_dir}, tether's own state (credentials, other conversations)")
    return None


def state_unseen(check: ShellCheck) -> str | None:
    """Why an unrestricted, unsandboxed command could reach tether's state unseen, or None."""
    guards = check.policy.guards
    if guards.state_root is None or guards.writable_roots is not None:
        return None
    tail = (", which could be inside tether's state ($TETHER_HOME); with no sandbox, only you "
            "may allow it")
    for redirect in check.analysis.redirects:
        if redirect.target is None and redirect.computed:
            return "The command redirects to a file whose name it computes at run time" + tail
        relative = redirect.target is not None and not redirect.target.startswith("/")
        if redirect.cwd is None and redirect.cwd_computed and relative:
            return (f"The command redirects to {redirect.target} in a directory it computes at "
                    "run time" + tail)
    for command in check.commands:
        shown = " ".join(w if w is not None else "$…" for w in command.argv)[:60]
        if command.cwd is None and command.cwd_computed:
            return f"`{shown}` runs in a directory the command computes at run time" + tail
        if not command.computed or None not in command.argv[1:]:
            continue
        kind = inspect(command.argv, command.splits)
        names_files = kind.paths if kind is not None else command.argv[0] in FILE_WRITERS
        if names_files:
            return f"`{shown}` names a file the command computes at run time" + tail
    return None
