"""Shell commands that only inspect: the built-in auto-allow of the reference's step 6.

`inspect(argv)` says whether a fully static command line is read-only, and how the checker must
treat its words. Each entry errs towards "not read-only": a flag that writes a file (`sort -o`,
`git log --output`), runs a program (`find -exec`, `rg --pre`, `fd -x`) or changes state
(`date -s`, `git branch new`) disqualifies the whole command.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class ReadOnly:
    paths: bool = True  # its operands are files it reads (checked against roots and deny rules)
    recursive: bool = False  # it may read whole trees (denied files inside cannot be excluded)


_Check = Callable[[Sequence[str]], ReadOnly | None]

_PLAIN = ReadOnly()
_STRINGS = ReadOnly(paths=False)
_TREE = ReadOnly(recursive=True)


def _flags(args: Sequence[str]) -> list[str]:
    return [a for a in args if a.startswith("-")]


def _operands(args: Sequence[str]) -> list[str]:
    return [a for a in args if not a.startswith("-")]


def _vetoed(args: Sequence[str], banned: Sequence[str]) -> bool:
    """True when any flag is banned, in its `--flag`, `--flag=value` or bundled `-xVALUE` form."""
    for arg in args:
        if arg == "--":
            return False
        for flag in banned:
            if arg == flag or arg.startswith(flag + "="):
                return True
            if len(flag) == 2 and not arg.startswith("--") and arg.startswith("-") and flag[1] in arg[1:]:
                return True
    return False


def _simple(result: ReadOnly, banned: Sequence[str] = ()) -> _Check:
    return lambda args: None if _vetoed(args, banned) else result


def _grep(args: Sequence[str]) -> ReadOnly | None:
    recursive = any(a in ("-r", "-R", "--recursive", "--dereference-recursive") or
                    (a.startswith("-") and not a.startswith("--") and ("r" in a or "R" in a))
                    for a in args)
    return _TREE if recursive else _PLAIN


def _find(args: Sequence[str]) -> ReadOnly | None:
    banned = {"-exec", "-execdir", "-ok", "-okdir", "-delete", "-fprint", "-fprint0",
              "-fprintf", "-fls"}
    return None if any(a in banned for a in args) else _TREE


def _ls(args: Sequence[str]) -> ReadOnly | None:
    recursive = any(a == "--recursive" or (a.startswith("-") and not a.startswith("--") and "R" in a)
                    for a in args)
    return _TREE if recursive else _PLAIN


def _at_most_operands(count: int, result: ReadOnly, banned: Sequence[str] = ()) -> _Check:
    def check(args: Sequence[str]) -> ReadOnly | None:
        if _vetoed(args, banned) or len(_operands(args)) > count:
            return None
        return result

    return check


def _date(args: Sequence[str]) -> ReadOnly | None:
    if _vetoed(args, ("-s", "--set")) or any(not a.startswith(("-", "+")) for a in args):
        return None
    return _STRINGS


def _no_args(result: ReadOnly) -> _Check:
    return lambda args: result if not _operands(args) else None


_GIT_WRITES_OUTPUT = ("--output", "--ext-diff", "--exec", "--upload-pack", "--receive-pack",
                      "-O", "--open-files-in-pager", "--paginate", "-p")
_GIT_READERS: dict[str, ReadOnly] = {
    "status": _PLAIN, "diff": _PLAIN, "log": _PLAIN, "show": _PLAIN, "blame": _PLAIN,
    "rev-parse": _STRINGS, "ls-files": _PLAIN, "ls-tree": _PLAIN, "describe": _STRINGS,
    "shortlog": _PLAIN, "grep": _TREE, "cat-file": _STRINGS, "rev-list": _STRINGS,
    "merge-base": _STRINGS, "name-rev": _STRINGS, "show-ref": _STRINGS,
    "for-each-ref": _STRINGS, "count-objects": _STRINGS, "version": _STRINGS,
    "diff-tree": _PLAIN, "diff-files": _PLAIN, "diff-index": _PLAIN, "whatchanged": _PLAIN,
}


def _git(args: Sequence[str]) -> ReadOnly | None:
    if not args:
        return None
    sub, rest = args[0], list(args[1:])
    banned = _GIT_WRITES_OUTPUT if sub != "log" and sub != "show" else _GIT_WRITES_OUTPUT[:-1]
    if sub in ("diff", "log", "show", "grep") and _vetoed(rest, ("--textconv",)):
        return None
    if _vetoed(rest, banned):
        return None
    if sub in _GIT_READERS:
        return _GIT_READERS[sub]
    ops = _operands(rest)
    if sub == "branch":
        listing = {"-a", "-r", "-v", "-vv", "--list", "-l", "--show-current", "--all",
                   "--remotes", "--contains", "--merged", "--no-merged", "--verbose"}
        allowed = all(a in listing or a.startswith(("--sort=", "--format=", "--color"))
                      for a in _flags(rest))
        return _STRINGS if allowed and (not ops or "--list" in rest or "-l" in rest) else None
    if sub == "tag":
        return _STRINGS if not ops or "-l" in rest or "--list" in rest else None
    if sub == "remote":
        return _STRINGS if rest in ([], ["-v"], ["--verbose"]) or (ops[:1] == ["get-url"]) else None
    if sub in ("stash", "worktree", "reflog"):
        return _STRINGS if ops[:1] in (["list"], ["show"]) or (sub == "reflog" and not ops) else None
    if sub == "config":
        reading = {"--get", "--get-all", "--get-regexp", "--list", "-l", "--show-origin",
                   "--show-scope", "--name-only", "--null", "-z"}
        return _STRINGS if rest and all(a in reading for a in _flags(rest)) and (
            "--list" in rest or "-l" in rest or any(a.startswith("--get") for a in rest)
        ) else None
    return None


_GH_READERS = {
    "pr": {"view", "list", "status", "diff", "checks"},
    "issue": {"view", "list", "status"},
    "repo": {"view", "list"},
    "run": {"view", "list"},
    "release": {"view", "list"},
    "workflow": {"view", "list"},
    "search": {"repos", "issues", "prs", "code", "commits"},
}


def _gh(args: Sequence[str]) -> ReadOnly | None:
    if len(args) < 2 or _vetoed(args, ("--web", "-w")):
        return None
    return _STRINGS if args[1] in _GH_READERS.get(args[0], set()) else None


COMMANDS: dict[str, _Check] = {
    "cat": _simple(_PLAIN), "head": _simple(_PLAIN), "tail": _simple(_PLAIN),
    "ls": _ls, "pwd": _simple(_STRINGS), "echo": _simple(_STRINGS),
    "printf": _simple(_STRINGS, ("-v",)), "wc": _simple(_PLAIN), "cut": _simple(_PLAIN),
    "tr": _simple(_STRINGS), "diff": _simple(_PLAIN), "cmp": _simple(_PLAIN),
    "comm": _simple(_PLAIN), "file": _simple(_PLAIN), "stat": _simple(_PLAIN),
    "du": _simple(_TREE), "df": _simple(_PLAIN), "basename": _simple(_STRINGS),
    "dirname": _simple(_STRINGS), "realpath": _simple(_PLAIN), "readlink": _simple(_PLAIN),
    "true": _simple(_STRINGS), "false": _simple(_STRINGS), "which": _simple(_STRINGS),
    "type": _simple(_STRINGS), "whoami": _simple(_STRINGS), "id": _simple(_STRINGS),
    "uname": _simple(_STRINGS), "nl": _simple(_PLAIN), "od": _simple(_PLAIN),
    "hexdump": _simple(_PLAIN), "column": _simple(_PLAIN), "sha1sum": _simple(_PLAIN),
    "sha256sum": _simple(_PLAIN), "sha512sum": _simple(_PLAIN), "md5sum": _simple(_PLAIN),
    "cksum": _simple(_PLAIN), "tac": _simple(_PLAIN), "rev": _simple(_PLAIN),
    "fold": _simple(_PLAIN), "seq": _simple(_STRINGS), "test": _simple(_PLAIN),
    "[": _simple(_PLAIN), "[[": _simple(_PLAIN), "cd": _simple(_PLAIN),
    "grep": _grep, "egrep": _grep, "fgrep": _grep, "jq": _simple(_PLAIN),
    "rg": _simple(_TREE, ("--pre", "--pre-glob")), "fd": _simple(_TREE, ("-x", "--exec", "-X", "--exec-batch")),
    "tree": _simple(_TREE, ("-o",)), "find": _find,
    "sort": _simple(_PLAIN, ("-o", "--output", "--compress-program")),
    "uniq": _at_most_operands(1, _PLAIN), "xxd": _at_most_operands(1, _PLAIN, ("-r",)),
    "base64": _simple(_PLAIN, ("-o", "--output")), "date": _date,
    "hostname": _no_args(_STRINGS), "git": _git, "gh": _gh,
}


def inspect(argv: Sequence[str | None]) -> ReadOnly | None:
    """How a read-only command treats its words, or None when it may write or run something."""
    if not argv or any(word is None for word in argv):
        return None
    words = [w for w in argv if w is not None]
    check = COMMANDS.get(words[0])
    return check(words[1:]) if check is not None else None
