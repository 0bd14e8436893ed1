"""Whether the repository git would find from a directory makes an inspect command run a program.

`git status` runs `core.fsmonitor` and the `post-index-change` hook, `git diff` runs
`diff.external`, textconv drivers and clean filters, `git log` runs `gpg.program` for signed
commits when `log.showSignature` is on: a hostile repository turns an inspect command into code
execution (QwenLM qwen-code#8575, codex PR #28714). Such repositories lose the read-only
auto-allow; the user can still approve.

Git itself says which repository and which config files it reads (`rev-parse`, `config --list
--show-origin --show-scope`), so every spelling (`[core] fsmonitor = x` on the section line,
`config.worktree`, `include.path`, a linked worktree's `commondir`, a bare layout git discovers,
a submodule's config) is judged exactly as the command's own git would read it. Reading config
runs no program: the probe disables fsmonitor, hooks, pagers and transports, reads no system or
global file and never touches the index. Without git the config files are scanned instead.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # subprocess and shutil load on the first git command judged, not at start-up
    import subprocess

PROBE_TIMEOUT = 3.0
_MAX_SUBMODULE_DEPTH = 4
# Discovery variables a command inherits from tether: the probe must find the repository it would.
_DISCOVERY_ENV = ("GIT_DIR", "GIT_WORK_TREE", "GIT_COMMON_DIR", "GIT_CEILING_DIRECTORIES",
                  "GIT_DISCOVERY_ACROSS_FILESYSTEM")
_PROBE_CONFIG = ("core.fsmonitor=false", "core.hooksPath=/dev/null", "safe.directory=*",
                 "protocol.allow=never")
# Hooks an inspect command runs: `git status` and `git diff` rewrite the index (even with
# GIT_OPTIONAL_LOCKS=0 for diff), which runs `post-index-change`.
INSPECT_HOOKS = ("post-index-change",)

# Keys whose value is a program that a command tether runs without a human at the terminal can
# reach: inspect commands (fsmonitor, pagers, diff/textconv/filter drivers, signature programs,
# the transports of a partial clone's lazy fetch) and the fetch/push/merge a rule may allow.
# Editors, difftool/mergetool, browsers and send-email only run for a person at a terminal:
# a repository that picks its own editor keeps its auto-allow.
_PROGRAM_KEYS = frozenset({
    "core.fsmonitor", "core.pager", "core.sshcommand", "core.gitproxy", "core.askpass",
    "core.alternaterefscommand", "diff.external", "gpg.program", "gpg.ssh.defaultkeycommand",
    "credential.helper", "uploadpack.packobjectshook",
})
# section.<name>.key forms: a driver or remote the repository names, each running a program.
_SUBSECTION_PROGRAMS = {
    "diff": {"textconv", "command"}, "filter": {"clean", "smudge", "process"},
    "merge": {"driver"}, "gpg": {"program"}, "credential": {"helper"},
    "remote": {"uploadpack", "receivepack"},
    # `git status --help` (a `git status:*` rule admits it) runs `man.<viewer>.cmd`, no terminal
    # needed; a browser the same way under `help.format = web`
    "man": {"cmd", "path"}, "browser": {"cmd", "path"},
}
_BOOLEAN = frozenset({"", "true", "false", "yes", "no", "on", "off", "1", "0"})
# Values that name a program the user installed, not one the repository ships: git's own
# credential helpers (`git credential-<name>`) and git-lfs as `git lfs install --local` writes it.
_KNOWN_PROGRAMS = frozenset({
    "store", "cache", "manager", "manager-core", "osxkeychain", "libsecret", "wincred",
    "git-lfs clean -- %f", "git-lfs smudge -- %f", "git-lfs filter-process",
})


def program_key(key: str, value: str) -> bool:
    """Whether config `key = value` makes some git command run a program the repository chose."""
    key = key.lower()
    if value.strip() in _KNOWN_PROGRAMS and key.endswith(("helper", "clean", "smudge", "process")):
        return False
    section, _, rest = key.partition(".")
    sub, _, name = rest.rpartition(".")
    if key in ("core.fsmonitor",) or section == "pager":
        return value.strip().lower() not in _BOOLEAN  # booleans pick git's own behaviour
    if key in _PROGRAM_KEYS:
        return bool(value.strip())
    if section == "alias":
        return value.lstrip().startswith("!")
    if section == "protocol" and name == "allow":
        return value.strip().lower() == "always"  # `ext::` remotes run any command
    return bool(sub) and name in _SUBSECTION_PROGRAMS.get(section, ())


class _Verdict:
    __slots__ = ("hazard", "watched", "final")

    def __init__(self, hazard: str | None, watched: Iterable[Path], final: bool = True) -> None:
        self.hazard = hazard
        self.watched = tuple(watched)  # files whose change could change the verdict
        self.final = final  # False: git failed (a timeout on a busy machine); ask again next time


# (directory, discovery fingerprint, env) -> (watched files, their stats, hazard)
_CACHE: dict[tuple[object, ...], tuple[tuple[Path, ...], tuple[object, ...], str | None]] = {}
# (git dir, common dir, work tree, submodule depth) -> the same, once git has found the repository
_REPOS: dict[tuple[object, ...], tuple[tuple[Path, ...], tuple[object, ...], str | None]] = {}


def git_hazard(directory: Path) -> str | None:
    """What in the repository git finds from `directory` would run a program, or None.

    The answer names the config key (or hook) and the file it came from, e.g.
    "`core.fsmonitor` (set in /w/.git/config)". Cached per directory until one of the files git
    reported (or the directories it discovered through) changes.
    """
    directory = Path(directory)
    while not directory.is_dir() and directory != directory.parent:
        directory = directory.parent  # not there yet: git would find what its parents hold
    key = (str(directory), _discovery_fingerprint(directory),
           tuple(os.environ.get(name) for name in _DISCOVERY_ENV))
    cached = _CACHE.get(key)
    if cached is not None and cached[1] == _stats(cached[0]):
        return cached[2]
    import shutil

    git = shutil.which("git")
    verdict = _probe(git, directory, 0) if git else _scan_files(directory)
    watched = tuple(sorted(set(verdict.watched)))
    if len(_CACHE) > 512:
        _CACHE.clear()
    if verdict.final:
        _CACHE[key] = (watched, _stats(watched), verdict.hazard)
    return verdict.hazard


def lazy_fetch(directory: Path) -> str | None:
    """The promisor remote a read in the repository git finds from `directory` fetches from
    (a partial clone: `git log -p`, `git show` of a blob it never fetched), or None.

    Not a program, so not a `git_hazard`: confined, the fetch finds no network. A command that
    runs unconfined (a rule or the mode admitted another part of it) would connect wherever the
    repository's config points, so its read-only git commands must not meet one.
    """
    import shutil

    directory = Path(directory)
    while not directory.is_dir() and directory != directory.parent:
        directory = directory.parent
    git = shutil.which("git")
    if git is None:
        return None  # no git: the command's own git cannot fetch either
    try:
        found = _run_git(git, directory, "config", "-z", "--get-regexp",
                         r"^(extensions\.partialclone|remote\..*\.promisor)$")
    except _ProbeFailed as exc:
        return f"a repository tether could not inspect ({exc})"
    for entry in found.stdout.decode(errors="replace").split("\0"):
        key, _, value = entry.partition("\n")
        value = value.strip()
        if key == "extensions.partialclone" and value:
            return f"the promisor remote `{value}` (extensions.partialClone)"
        if key.endswith(".promisor") and value.lower() not in ("", "false", "no", "off", "0"):
            return f"the promisor remote `{key[7:-9]}` ({key})"
    return None


# Keys naming a file git reads while inspecting; `git blame` echoes a bad line of
# `blame.ignoreRevsFile` in its error ("invalid object name: API_KEY=…"), so under a file deny rule
# the file a repository's config names counts as read by the command.
_READ_FILE_KEYS = ("blame.ignorerevsfile", "mailmap.file", "core.attributesfile",
                   "core.excludesfile", "gpg.ssh.allowedsignersfile", "gpg.ssh.revocationfile")


def config_files(directory: Path) -> tuple[str, ...]:
    """The files the config of the repository git finds from `directory` makes inspect
    commands read (as written: relative ones are relative to where git runs), or ("*",) when
    git cannot say (then any file may be read)."""
    import shutil

    directory = Path(directory)
    while not directory.is_dir() and directory != directory.parent:
        directory = directory.parent
    git = shutil.which("git")
    if git is None:
        return ()
    pattern = "^(" + "|".join(k.replace(".", "\\.") for k in _READ_FILE_KEYS) + ")$"
    try:
        found = _run_git(git, directory, "config", "-z", "--get-regexp", pattern)
    except _ProbeFailed:
        return ("*",)
    out = []
    for entry in found.stdout.decode(errors="replace").split("\0"):
        _key, _, value = entry.partition("\n")
        if value.strip():
            out.append(os.path.expanduser(value.strip()))
    return tuple(out)


# probing with git --------------------------------------------------------------------------


def _probe_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_") or k in _DISCOVERY_ENV}
    env.update({"GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": "/dev/null",
                "GIT_OPTIONAL_LOCKS": "0", "GIT_TERMINAL_PROMPT": "0", "GIT_PAGER": "cat",
                "GIT_ALLOW_PROTOCOL": "none", "GIT_NO_REPLACE_OBJECTS": "1", "LC_ALL": "C"})
    return env


class _ProbeFailed(Exception):
    pass


def _run_git(git: str, cwd: Path, *args: str) -> subprocess.CompletedProcess[bytes]:
    import subprocess

    argv = [git, "--no-pager"]
    for setting in _PROBE_CONFIG:
        argv += ["-c", setting]
    try:
        return subprocess.run([*argv, *args], cwd=cwd, env=_probe_env(), capture_output=True,
                              stdin=subprocess.DEVNULL, timeout=PROBE_TIMEOUT, check=False)
    except subprocess.TimeoutExpired as exc:
        raise _ProbeFailed(f"git did not answer within {PROBE_TIMEOUT:g} s") from exc
    except OSError as exc:
        raise _ProbeFailed(f"git could not start ({exc.strerror})") from exc


def _probe(git: str, directory: Path, depth: int) -> _Verdict:
    watched: list[Path] = []
    try:
        return _probe_repo(git, directory, depth, watched)
    except _ProbeFailed as exc:
        return _Verdict(f"a repository tether could not inspect: {exc}", tuple(watched), False)


def _probe_repo(git: str, directory: Path, depth: int, watched: list[Path]) -> _Verdict:
    found = _run_git(git, directory, "rev-parse", "--path-format=absolute", "--git-dir",
                     "--git-common-dir", "--is-bare-repository", "--show-toplevel")
    lines = found.stdout.decode(errors="replace").splitlines()
    if len(lines) < 3:
        error = found.stderr.decode(errors="replace").strip()
        if "not a git repository" in error:
            # a `.git` git rejects (no HEAD yet) runs nothing today, but one step can finish it
            return _scan_files(directory)
        raise _ProbeFailed(error.splitlines()[-1] if error else f"git exited {found.returncode}")
    git_dir, common_dir = Path(lines[0]), Path(lines[1])
    bare = lines[2] == "true"
    top = Path(lines[3]) if len(lines) > 3 and not bare else None
    # Folders of one repository share its verdict: the rest of the probe runs once per repo.
    repo_key = (git_dir, common_dir, top, depth)
    known = _REPOS.get(repo_key)
    if known is not None and known[1] == _stats(known[0]):
        watched += known[0]
        return _Verdict(known[2], known[0])
    judged = _judge_repo(git, directory, git_dir, common_dir, top, depth)
    watched += judged.watched
    if judged.final:
        if len(_REPOS) > 256:
            _REPOS.clear()
        _REPOS[repo_key] = (judged.watched, _stats(judged.watched), judged.hazard)
    return judged


def _judge_repo(git: str, directory: Path, git_dir: Path, common_dir: Path, top: Path | None,
                depth: int) -> _Verdict:
    # HEAD: `includeIf "onbranch:…"` follows the checked-out branch
    watched = [git_dir, git_dir / "HEAD", git_dir / "config.worktree", common_dir,
               common_dir / "config"]
    where = f", the bare repository git finds at {git_dir}" if top is None else ""

    listed = _run_git(git, directory, "config", "--list", "--show-origin", "--show-scope", "-z")
    if listed.returncode != 0:  # a config git cannot parse stops every git command early
        error = listed.stderr.decode(errors="replace").strip()
        raise _ProbeFailed(error.splitlines()[0] if error else "git could not read its config")
    hooks_path: str | None = None
    first: str | None = None
    for scope, origin, key, value in _entries(listed.stdout):
        if scope == "command":
            continue
        source = _origin_path(origin, directory)
        if source is not None:
            watched.append(source)
        if key in ("include.path",) or (key.startswith("includeif.") and key.endswith(".path")):
            watched.append(_include_target(value, source))
        if key == "core.hookspath":
            hooks_path = value
        if first is None and program_key(key, value):
            first = f"`{key}` (set in {source or origin}{where})"
    if first is not None:
        return _Verdict(first, tuple(watched))

    hooks = _hooks_dir(hooks_path, common_dir, top)
    watched.append(hooks)
    for hook in INSPECT_HOOKS:
        path = hooks / hook
        watched.append(path)
        if path.is_file() and os.access(path, os.X_OK):
            return _Verdict(f"the `{hook}` hook ({path}{where})", tuple(watched))

    if top is None or depth >= _MAX_SUBMODULE_DEPTH:
        return _Verdict(None, tuple(watched))
    # `git status` / `git diff` run git again inside every populated submodule (a gitlink in
    # the index, with or without .gitmodules): that git reads the submodule's own config.
    watched.append(git_dir / "index")
    for sub in _gitlinks(git, top):
        path = top / sub
        watched.append(path / ".git")
        if (path / ".git").exists():
            inner = _probe(git, path, depth + 1)
            watched += inner.watched
            if inner.hazard:
                return _Verdict(f"{inner.hazard} in submodule {sub}", tuple(watched), inner.final)
    return _Verdict(None, tuple(watched))


def _entries(raw: bytes) -> Iterable[tuple[str, str, str, str]]:
    """`config --list --show-scope --show-origin -z`: scope NUL origin NUL key LF value NUL."""
    fields = raw.decode(errors="replace").split("\0")
    for i in range(0, len(fields) - 2, 3):
        scope, origin, pair = fields[i], fields[i + 1], fields[i + 2]
        key, _, value = pair.partition("\n")
        yield scope, origin, key, value


def _origin_path(origin: str, cwd: Path) -> Path | None:
    if not origin.startswith("file:"):
        return None
    return (cwd / origin[5:]).absolute()


def _include_target(value: str, source: Path | None) -> Path:
    target = Path(os.path.expanduser(value))
    if not target.is_absolute() and source is not None:
        target = source.parent / target
    return target


def _hooks_dir(hooks_path: str | None, common_dir: Path, top: Path | None) -> Path:
    if hooks_path is None:
        return common_dir / "hooks"
    path = Path(os.path.expanduser(hooks_path))
    # a relative core.hooksPath is relative to where hooks run: the work tree's top
    return path if path.is_absolute() else (top or common_dir) / path


def _gitlinks(git: str, top: Path) -> list[str]:
    listed = _run_git(git, top, "ls-files", "--stage", "-z")
    out = []
    for entry in listed.stdout.decode(errors="replace").split("\0"):
        if entry.startswith("160000 "):
            out.append(entry.partition("\t")[2])
    return out


# cache keys ------------------------------------------------------------------------------


def _stat(path: Path) -> tuple[int, int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return st.st_ino, st.st_mtime_ns, st.st_size


def _stats(paths: Iterable[Path]) -> tuple[object, ...]:
    return tuple(_stat(p) for p in paths)


def _discovery_fingerprint(directory: Path) -> tuple[object, ...]:
    """What git's discovery walk looks at: each directory up to / and its `.git` and `HEAD`
    (a folder that gains `.git`, or `HEAD`/`objects`/`refs` to become a bare layout, changes
    its mtime)."""
    out: list[object] = []
    for parent in (directory, *directory.parents):
        out += [_stat(parent), _stat(parent / ".git"), _stat(parent / "HEAD")]
    return tuple(out)


# without git -------------------------------------------------------------------------------

# patterns, not compiled regexes: compiled on the first scan (re caches them), not at import
_SCAN_SECTION = r'^\s*\[\s*([A-Za-z0-9.-]+)(?:\s+"((?:[^"\\]|\\.)*)")?\s*\](.*)$'
_SCAN_PAIR = r"^\s*([A-Za-z][A-Za-z0-9-]*)\s*(?:=\s*(.*))?$"


def _scan_files(directory: Path) -> _Verdict:
    """The fallback without a git binary (then no git command runs either): find the git dir
    the way git would and read its config files with a small parser."""
    git_dir = _find_git_dir(directory)
    if git_dir is None:
        return _Verdict(None, ())
    common = git_dir
    try:
        common = (git_dir / (git_dir / "commondir").read_text().strip()).resolve()
    except OSError:
        pass
    files = (git_dir, common / "config", git_dir / "config.worktree")
    for config in files[1:]:
        try:
            text = config.read_text(errors="replace")
        except OSError:
            continue
        section = ""
        for line in text.splitlines():
            line = re.sub(r"\s[;#].*$", "", line)
            head = re.match(_SCAN_SECTION, line)
            if head:
                section = head.group(1).lower() + (f".{head.group(2)}" if head.group(2) else "")
                line = head.group(3)
            pair = re.match(_SCAN_PAIR, line)
            if pair is None or not section:
                continue
            key = f"{section}.{pair.group(1).lower()}"
            if section.startswith(("include", "includeif")):
                return _Verdict(f"configuration included from another file (in {config})", files)
            if program_key(key, (pair.group(2) or "").strip().strip('"')):
                return _Verdict(f"`{key}` (set in {config})", files)
    return _Verdict(None, files)


def _find_git_dir(directory: Path) -> Path | None:
    for parent in (directory, *directory.parents):
        dot = parent / ".git"
        if dot.is_file():
            try:
                text = dot.read_text(errors="replace").strip()
            except OSError:
                return dot
            return (parent / text[7:].strip()).resolve() if text.startswith("gitdir:") else dot
        if dot.is_dir():
            return dot
        if (parent / "HEAD").is_file() and (parent / "objects").is_dir() and (parent / "refs").is_dir():
            return parent
    return None
