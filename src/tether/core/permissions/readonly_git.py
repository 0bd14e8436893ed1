"""Which `git` and `gh` command lines only inspect, and which of them print file contents.

`git show`, `git cat-file`, `git grep`, `git log -p`, `git diff` print what is in files they
do not name on the command line; under a Read deny rule they are treated like a recursive reader
(they ask), because the denied file may be in the repository. Options that write (`--output`),
run a program (`--ext-diff`, `--textconv`, `--upload-pack`) or page (`--paginate`) are vetoed in
every abbreviation. A subcommand git does not ship (`GIT_COMMANDS`) may be an alias that runs
anything (`alias.x = !…`): the wrapper analysis calls it opaque.
"""

from __future__ import annotations

from collections.abc import Sequence

from tether.core.permissions.readonly import ReadOnly

GIT_COMMANDS = frozenset(["add", "am", "annotate", "apply", "archive", "bisect", "blame", "branch", "bugreport", "bundle", "cat-file", "check-attr", "check-ignore", "check-mailmap", "check-ref-format", "checkout", "checkout-index", "cherry", "cherry-pick", "clean", "clone", "column", "commit", "commit-graph", "commit-tree", "config", "count-objects", "credential", "daemon", "describe", "diagnose", "diff", "diff-files", "diff-index", "diff-tree", "difftool", "fast-export", "fast-import", "fetch", "fetch-pack", "filter-branch", "fmt-merge-msg", "for-each-ref", "for-each-repo", "format-patch", "fsck", "fsck-objects", "gc", "get-tar-commit-id", "grep", "hash-object", "help", "hook", "http-backend", "http-fetch", "http-push", "imap-send", "index-pack", "init", "init-db", "instaweb", "interpret-trailers", "log", "ls-files", "ls-remote", "ls-tree", "mailinfo", "mailsplit", "maintenance", "merge", "merge-base", "merge-file", "merge-index", "merge-octopus", "merge-one-file", "merge-ours", "merge-recursive", "merge-recursive-ours", "merge-recursive-theirs", "merge-resolve", "merge-subtree", "merge-tree", "mergetool", "mktag", "mktree", "multi-pack-index", "mv", "name-rev", "notes", "pack-objects", "pack-redundant", "pack-refs", "patch-id", "pickaxe", "prune", "prune-packed", "pull", "push", "quiltimport", "range-diff", "read-tree", "rebase", "receive-pack", "reflog", "remote", "repack", "replace", "request-pull", "rerere", "reset", "restore", "rev-list", "rev-parse", "revert", "rm", "send-pack", "shell", "shortlog", "show", "show-branch", "show-index", "show-ref", "sparse-checkout", "stage", "stash", "status", "stripspace", "submodule", "subtree", "switch", "symbolic-ref", "tag", "unpack-file", "unpack-objects", "update-index", "update-ref", "update-server-info", "upload-archive", "upload-pack", "var", "verify-commit", "verify-pack", "verify-tag", "version", "whatchanged", "worktree", "write-tree"])

_PLAIN = ReadOnly()
_STRINGS = ReadOnly(paths=False)
_CONTENT = ReadOnly(recursive=True)  # prints contents of files it does not name

_VETOED = ("--output", "--ext-diff", "--exec", "--upload-pack", "--receive-pack", "-O",
           "--open-files-in-pager", "--paginate", "--textconv", "--output-directory")
_READERS: dict[str, ReadOnly] = {
    "status": _PLAIN, "log": _PLAIN, "blame": _PLAIN, "rev-parse": _STRINGS,
    "ls-files": _PLAIN, "ls-tree": _PLAIN, "describe": _STRINGS, "shortlog": _PLAIN,
    "grep": _CONTENT, "cat-file": _CONTENT, "show": _CONTENT, "rev-list": _STRINGS,
    "merge-base": _STRINGS, "name-rev": _STRINGS, "show-ref": _STRINGS,
    "for-each-ref": _STRINGS, "count-objects": _STRINGS, "version": _STRINGS,
    "diff": _CONTENT, "diff-tree": _PLAIN, "diff-files": _PLAIN, "diff-index": _PLAIN,
    "whatchanged": _PLAIN,
}
# Options that make log-like commands print patches (file contents).
_PATCH = ("-p", "-u", "--patch", "--patch-with-stat", "--patch-with-raw", "-U", "--unified",
          "--word-diff", "--color-words", "--cc", "-L", "--full-diff", "--binary", "-W",
          "--function-context")
# Options that keep `git diff` to names and counts.
_SUMMARY = ("--stat", "--name-only", "--name-status", "--numstat", "--shortstat", "--quiet",
            "--exit-code", "--raw", "--summary", "--dirstat", "--compact-summary", "-s",
            "--no-patch", "--check")


def vetoed(args: Sequence[str], banned: Sequence[str]) -> str | None:
    """The first word that is a banned option in any spelling: `--flag`, `--flag=v`, a prefix
    `--fl` of it (GNU abbreviation; when unsure, the veto wins), or a short flag in a cluster."""
    for arg in args:
        if arg == "--":
            return None
        if arg.startswith("--"):
            name = arg.split("=", 1)[0]
            if len(name) > 3 and any(f.startswith("--") and f.startswith(name) for f in banned):
                return arg
            if name in banned:
                return arg
        elif len(arg) > 1 and arg.startswith("-") and any(
            len(f) == 2 and f[1] in arg[1:] for f in banned
        ):
            return arg
    return None


def _uses(args: Sequence[str], options: Sequence[str]) -> bool:
    for arg in args:
        if arg == "--":
            return False
        name = arg.split("=", 1)[0]
        for option in options:
            if name == option or (len(option) == 2 and not arg.startswith("--")
                                  and arg.startswith(option)):
                return True
            if option.startswith("--") and name.startswith(option):
                return True
    return False


def inspect_git(args: Sequence[str | None]) -> ReadOnly | None:
    if not args or any(a is None for a in args):
        return None
    words = [a for a in args if a is not None]
    sub, rest = words[0], words[1:]
    if vetoed(rest, _VETOED):
        return None
    if sub in _READERS:
        found = _READERS[sub]
        if sub in ("log", "whatchanged", "diff-tree", "diff-files", "diff-index", "shortlog") \
                and _uses(rest, _PATCH):
            return _CONTENT
        if sub == "diff" and _uses(rest, _SUMMARY) and not _uses(rest, _PATCH):
            return _PLAIN
        return found
    ops = [a for a in rest if not a.startswith("-")]
    flags = [a for a in rest if a.startswith("-")]
    if sub == "branch":
        listing = {"-a", "-r", "-v", "-vv", "--list", "-l", "--show-current", "--all",
                   "--remotes", "--contains", "--merged", "--no-merged", "--verbose"}
        allowed = all(a in listing or a.startswith(("--sort=", "--format=", "--color"))
                      for a in flags)
        return _STRINGS if allowed and (not ops or "--list" in rest or "-l" in rest) else None
    if sub == "tag":
        return _STRINGS if not ops or "-l" in rest or "--list" in rest else None
    if sub == "remote":
        return _STRINGS if rest in ([], ["-v"], ["--verbose"]) or (ops[:1] == ["get-url"]) else None
    if sub == "stash":
        if ops[:1] == ["list"]:
            return _STRINGS
        return _CONTENT if ops[:1] == ["show"] else None
    if sub in ("worktree", "reflog"):
        return _STRINGS if ops[:1] in (["list"], ["show"]) or (sub == "reflog" and not ops) else None
    if sub == "config":
        reading = {"--get", "--get-all", "--get-regexp", "--list", "-l", "--show-origin",
                   "--show-scope", "--name-only", "--null", "-z"}
        return _STRINGS if rest and all(a in reading for a in flags) and (
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


def inspect_gh(args: Sequence[str | None]) -> ReadOnly | None:
    if len(args) < 2 or any(a is None for a in args):
        return None
    words = [a for a in args if a is not None]
    if vetoed(words, ("--web", "-w")):
        return None
    return _STRINGS if words[1] in _GH_READERS.get(words[0], set()) else None
