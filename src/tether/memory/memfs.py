"""MemFS: an agent's memory as a git repository of Markdown files (reference §15).

    $TETHER_HOME/agents/<agent_id>/memory/      git repo, branch `main`
        system/   blocks compiled into the system prompt
        skills/   the agent's own skills (`<name>/SKILL.md`)
        mods/     the agent's mods
        ...       anything else: listed in the prompt by path and description only

The repo is created on first open with one empty commit ("chore: initialize local memory").
Only committed HEAD reaches the prompt: readers use `git ls-tree`/`git cat-file` on HEAD, never
the working tree, so a half-finished edit by a shell command is invisible until committed.

Every git call runs with no user or system configuration (GIT_CONFIG_GLOBAL=/dev/null,
GIT_CONFIG_NOSYSTEM=1), hooks off, a fixed author and committer, and literal pathspecs, so a
user's `~/.gitconfig` (signing, hooks, templates) can neither break nor hijack a memory commit.
Writes take an flock inside `.git` so two processes never race on the index.
"""

from __future__ import annotations

import contextlib
import errno
import os
import re
import shutil
import stat
import subprocess
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from tether.backends.local.disk_full import disk_full
from tether.backends.local.locks import exclusive_flock, write_atomic
from tether.errors import StoreError

INITIAL_COMMIT = "chore: initialize local memory"
SCAFFOLD_DIRS = ("system", "skills", "mods")
_GIT_OPTIONS = (
    "-c", "core.hooksPath=/dev/null",
    "-c", "commit.gpgsign=false",
    "-c", "tag.gpgsign=false",
    "-c", "core.autocrlf=false",
    "-c", "core.quotepath=false",
    "-c", "core.fsmonitor=false",
    "-c", "init.defaultBranch=main",
    "--no-pager",
)
_LOCK_WAIT_S = 30.0
_SHA = re.compile(r"^[0-9a-f]{40}(?:[0-9a-f]{24})?$")
_DRIVE = re.compile(r"^[A-Za-z]:[\\/]")


class MemFSError(StoreError):
    """The memory repository cannot do what was asked (bad path, git failure, read-only file)."""


def memory_dir(home: Path, agent_id: str) -> Path:
    """Beside the agent records (`agents/<b64>.json`), one folder per agent id."""
    if not agent_id or agent_id in (".", "..") or "/" in agent_id or "\0" in agent_id:
        raise MemFSError(f"agent id {agent_id!r} cannot name a memory folder")
    return Path(home) / "agents" / agent_id / "memory"


def normalize_path(raw: object, field: str = "path", *, markdown: bool = True) -> str:
    """A memory-relative path (`system/human.md`), or MemFSError saying what is wrong with it.

    Refuses absolute and home-relative paths, `..`, `.git`, NUL; `markdown` adds `.md` when the
    caller gave a label (`system/human`)."""
    if not isinstance(raw, str) or not raw.strip():
        raise MemFSError(f"'{field}' must be a non-empty string like system/human.md")
    text = raw.strip().replace("\\", "/")
    if "\0" in text:
        raise MemFSError(f"'{field}' contains a NUL byte")
    if text.startswith(("/", "~", "$")) or _DRIVE.match(raw.strip()):
        raise MemFSError(
            f"'{field}' must be relative to the memory directory (like system/human.md), "
            f"not {raw.strip()!r}"
        )
    parts = [p for p in text.split("/") if p not in ("", ".")]
    if not parts:
        raise MemFSError(f"'{field}' names the memory directory itself, not a file in it")
    for part in parts:
        if part == "..":
            raise MemFSError(f"'{field}' may not contain '..': memory paths stay inside the repo")
        if part.lower() == ".git":
            raise MemFSError(f"'{field}' may not point into .git")
    path = "/".join(parts)
    if markdown and not path.endswith(".md"):
        path += ".md"
    return path


@dataclass(frozen=True, slots=True)
class Commit:
    sha: str
    date: str  # ISO 8601
    subject: str


class MemFS:
    """One agent's memory repository. Synchronous (git is ~10 ms a call); async callers use
    `asyncio.to_thread`."""

    def __init__(self, root: Path, *, agent_id: str, agent_name: str = "tether") -> None:
        self.root = Path(root)
        self.agent_id = agent_id
        env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
        name = agent_name.strip() or agent_id
        email = f"{agent_id}@tether.local"
        env.update(
            GIT_CONFIG_GLOBAL=os.devnull,
            GIT_CONFIG_NOSYSTEM="1",
            GIT_AUTHOR_NAME=name,
            GIT_AUTHOR_EMAIL=email,
            GIT_COMMITTER_NAME=name,
            GIT_COMMITTER_EMAIL=email,
            GIT_TERMINAL_PROMPT="0",
            GIT_LITERAL_PATHSPECS="1",
            LC_ALL="C",
        )
        self._env = env

    # --- opening --------------------------------------------------------------------------------

    @classmethod
    def open(cls, home: Path, agent_id: str, *, agent_name: str = "tether") -> MemFS:
        """The agent's repo, created (git init + initial commit) if it does not exist yet."""
        memfs = cls(memory_dir(home, agent_id), agent_id=agent_id, agent_name=agent_name)
        memfs.ensure_created()
        return memfs

    @property
    def exists(self) -> bool:
        return (self.root / ".git" / "HEAD").is_file()

    def ensure_created(self) -> None:
        if self.exists and self.revision() is not None:
            return
        lock = self.root.parent / ".memory-init.lock"
        with _flock(lock, f"{lock} stayed locked; is another tether creating this memory?"):
            if not self.exists:
                self.root.mkdir(parents=True, exist_ok=True)
                self._git("init", "-q", "-b", "main")
            if self.revision() is None:
                self._git("commit", "-q", "--allow-empty", "-m", INITIAL_COMMIT)
            for name in SCAFFOLD_DIRS:
                (self.root / name).mkdir(exist_ok=True)

    # --- git ------------------------------------------------------------------------------------

    def _run(self, *args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
        try:
            return subprocess.run(
                ["git", *_GIT_OPTIONS, *args],
                cwd=self.root,
                env=self._env,
                input=stdin,
                capture_output=True,
                check=False,
            )
        except FileNotFoundError:
            raise MemFSError(
                "git is not installed (or not on PATH): agent memory (MemFS) needs the git CLI"
            ) from None

    def _git(self, *args: str, stdin: bytes | None = None) -> bytes:
        proc = self._run(*args, stdin=stdin)
        if proc.returncode != 0:
            why = proc.stderr.decode(errors="replace").strip() or f"exit code {proc.returncode}"
            full = _disk_full(self.root, why, f"git {args[0]}")
            if full is not None:
                raise full
            raise MemFSError(f"git {args[0]} failed in {self.root}: {why}")
        return proc.stdout

    def git(self, *args: str, stdin: bytes | None = None) -> bytes:
        """git in this repo with tether's fixed configuration; MemFSError naming the failure."""
        return self._git(*args, stdin=stdin)

    def try_git(self, *args: str) -> subprocess.CompletedProcess[bytes]:
        """git in this repo, its exit status left to the caller (a query that may answer no)."""
        return self._run(*args)

    # --- reading HEAD ---------------------------------------------------------------------------

    def revision(self) -> str | None:
        """HEAD's commit sha (None before the first commit). Read from the ref files when they
        are plain, so the per-send cache check costs no subprocess."""
        git_dir = self.root / ".git"
        try:
            head = (git_dir / "HEAD").read_text().strip()
        except OSError:
            return None
        if _SHA.match(head):
            return head
        if head.startswith("ref: "):
            ref = head[5:].strip()
            if ".." not in ref:
                try:
                    value = (git_dir / ref).read_text().strip()
                except OSError:
                    value = ""
                if _SHA.match(value):
                    return value
        proc = self._run("rev-parse", "-q", "--verify", "HEAD^{commit}")
        value = proc.stdout.decode().strip()
        return value if proc.returncode == 0 and _SHA.match(value) else None

    def head_paths(self, prefix: str = "") -> list[str]:
        """Regular files committed at HEAD under `prefix` (symlinks and submodules left out)."""
        return [path for path, _ in self._ls_tree(prefix)]

    def _ls_tree(self, prefix: str, rev: str | None = None) -> list[tuple[str, str]]:
        rev = rev or self.revision()
        if rev is None:
            return []
        args = ["ls-tree", "-r", "-z", rev]
        if prefix:
            args += ["--", prefix.rstrip("/") + "/"]
        out: list[tuple[str, str]] = []
        for record in self._git(*args).split(b"\0"):
            if not record:
                continue
            info, _, name = record.partition(b"\t")
            mode, kind, sha = info.split(b" ")
            if kind == b"blob" and mode in (b"100644", b"100755"):
                out.append((name.decode("utf-8", errors="surrogateescape"), sha.decode()))
        return out

    def read_head_tree(self, prefix: str = "", *, rev: str | None = None) -> dict[str, bytes]:
        """Every regular file under `prefix` at HEAD (or commit `rev`), path -> bytes, in two
        git calls."""
        entries = self._ls_tree(prefix, rev)
        if not entries:
            return {}
        blobs = self._cat_blobs([sha for _, sha in entries])
        return {path: blobs[sha] for path, sha in entries}

    def read_head(self, path: str) -> str | None:
        """One file's committed text, or None if HEAD has no such regular file."""
        for name, sha in self._ls_tree(path.rsplit("/", 1)[0] if "/" in path else ""):
            if name == path:
                return self._cat_blobs([sha])[sha].decode("utf-8", errors="replace")
        return None

    def _cat_blobs(self, shas: list[str]) -> dict[str, bytes]:
        wanted = list(dict.fromkeys(shas))
        raw = self._git("cat-file", "--batch", stdin=("\n".join(wanted) + "\n").encode())
        out: dict[str, bytes] = {}
        pos = 0
        for sha in wanted:
            end = raw.index(b"\n", pos)
            header = raw[pos:end].split(b" ")
            if len(header) != 3:
                raise MemFSError(f"git cat-file: unexpected answer for {sha}: {header!r}")
            size = int(header[2])
            out[sha] = raw[end + 1:end + 1 + size]
            pos = end + 1 + size + 1
        return out

    # --- the working tree, confined ------------------------------------------------------------

    def resolve(self, rel: str) -> Path:
        """`rel` (already normalized) under the repo root, refusing any symlink on the way."""
        current = self.root
        for part in rel.split("/"):
            current = current / part
            try:
                mode = os.lstat(current).st_mode
            except FileNotFoundError:
                break
            if stat.S_ISLNK(mode):
                raise MemFSError(
                    f"{rel}: {current.relative_to(self.root)} is a symlink; the memory tool does "
                    "not follow links out of the memory repository"
                )
        return self.root / rel

    def read_working(self, rel: str) -> str | None:
        path = self.resolve(rel)
        try:
            return path.read_text(encoding="utf-8")
        except FileNotFoundError:
            return None
        except IsADirectoryError:
            raise MemFSError(f"{rel} is a directory, not a memory file") from None
        except UnicodeDecodeError:
            raise MemFSError(f"{rel} is not UTF-8 text") from None

    def write_working(self, rel: str, text: str) -> None:
        path = self.resolve(rel)
        path.parent.mkdir(parents=True, exist_ok=True)
        self.resolve(rel)  # a racing symlink in a just-created parent is still refused
        write_atomic(path, text.encode("utf-8"))

    # --- writing --------------------------------------------------------------------------------

    @contextlib.contextmanager
    def writing(self) -> Iterator[None]:
        """Hold the repo's write lock for the `with` body (one writer across processes)."""
        lock = self.root / ".git" / "tether-memory.lock"
        with _flock(lock, f"{lock} stayed locked for {_LOCK_WAIT_S:.0f}s; is a tether stuck?"):
            yield

    def commit(self, paths: Iterable[str], message: str) -> str | None:
        """Commit exactly `paths` as they are in the working tree (other staged changes are left
        alone); the new HEAD sha, or None if they did not change. Call inside `writing()`."""
        message = message.strip()
        if not message:
            raise MemFSError("a memory commit needs a non-empty message (the reason)")
        wanted = list(dict.fromkeys(paths))
        tracked = set(self._git("ls-files", "-z", "--", *wanted).decode().split("\0")) - {""}
        present = [
            p for p in wanted
            if (self.root / p).exists() or p in tracked or any(t.startswith(p + "/") for t in tracked)
        ]
        if not present:
            return None
        self._git("add", "-A", "--", *present)
        if self._run("diff", "--cached", "--quiet", "HEAD", "--", *present).returncode == 0:
            return None
        self._git("commit", "-q", "--only", "-m", message, "--", *present)
        return self.revision()

    # --- inspection -----------------------------------------------------------------------------

    def status_lines(self) -> list[str]:
        """`git status --porcelain` lines: what the working tree has that HEAD does not."""
        out = self._git("status", "--porcelain=v1", "-z", "--untracked-files=all")
        entries = out.decode("utf-8", errors="replace").split("\0")
        lines: list[str] = []
        skip = False
        for entry in entries:
            if skip:
                skip = False
                continue
            if not entry:
                continue
            lines.append(entry)
            if entry[:1] in ("R", "C"):
                skip = True  # the rename's source path follows
        return lines

    def diff(self) -> str:
        """Uncommitted changes to tracked files, then the untracked files by name."""
        text = self._git("diff", "HEAD", "--no-color").decode("utf-8", errors="replace")
        untracked = [line[3:] for line in self.status_lines() if line.startswith("??")]
        if untracked:
            text += "".join(f"untracked: {p}\n" for p in untracked)
        return text

    def log(self, limit: int = 20) -> list[Commit]:
        if self.revision() is None:
            return []
        out = self._git("log", f"-n{limit}", "--format=%H%x1f%aI%x1f%s%x1e").decode(
            "utf-8", errors="replace"
        )
        commits = []
        for record in out.split("\x1e"):
            record = record.strip("\n")
            if record:
                sha, date, subject = record.split("\x1f", 2)
                commits.append(Commit(sha, date, subject))
        return commits

    # --- branches and worktrees (reflection passes) ---------------------------------------------

    def add_worktree(self, path: Path, branch: str) -> None:
        """A new branch `branch` at HEAD, checked out in a linked worktree at `path` (outside
        the repo root, so the main working tree never sees it)."""
        Path(path).parent.mkdir(parents=True, exist_ok=True)
        self._git("worktree", "add", "-q", "-b", branch, str(path), "HEAD")

    def remove_worktree(self, path: Path, branch: str | None = None) -> None:
        """Remove the worktree at `path` (discarding anything uncommitted in it) and delete
        `branch`; quiet when either is already gone."""
        path = Path(path)
        if path.exists():
            self._run("worktree", "remove", "--force", "--force", str(path))
        if path.exists():
            shutil.rmtree(path, ignore_errors=True)
        self._run("worktree", "prune")
        if branch:
            self._run("branch", "-D", branch)

    def branch_revision(self, branch: str) -> str | None:
        proc = self._run("rev-parse", "-q", "--verify", f"refs/heads/{branch}^{{commit}}")
        value = proc.stdout.decode().strip()
        return value if proc.returncode == 0 and _SHA.match(value) else None

    def is_ancestor(self, commit: str, of: str) -> bool:
        """Whether `commit` is already contained in `of` (so merging it would change nothing)."""
        return self._run("merge-base", "--is-ancestor", commit, of).returncode == 0

    def merge_branch(self, branch: str, message: str) -> str:
        """Merge `branch` into the checked-out branch: "fast-forward" or "merge" when it went
        in, "conflict" when it could not (the merge is aborted: HEAD and the working tree are
        as before). Call inside `writing()`."""
        before = self.revision()
        proc = self._run("merge", "--no-edit", "-m", message, branch)
        if proc.returncode == 0:
            return "fast-forward" if self.revision() == self.branch_revision(branch) else "merge"
        if (self.root / ".git" / "MERGE_HEAD").exists():
            if self._run("merge", "--abort").returncode != 0 and before is not None:
                self._run("reset", "-q", "--merge", before)
            return "conflict"
        why = proc.stderr.decode(errors="replace").strip() or f"exit code {proc.returncode}"
        raise MemFSError(f"git merge {branch} failed in {self.root}: {why}")

    def export(self, out: Path) -> int:
        """Write HEAD's files under `out` (which must be empty or absent); how many were written."""
        out = Path(out)
        if out.exists() and (not out.is_dir() or any(out.iterdir())):
            raise MemFSError(f"{out} exists and is not an empty directory; choose a new --out")
        files = self.read_head_tree()
        for path, data in files.items():
            target = out / path
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
        out.mkdir(parents=True, exist_ok=True)
        return len(files)


def _flock(path: Path, busy: str) -> contextlib.AbstractContextManager[None]:
    return exclusive_flock(path, wait=_LOCK_WAIT_S, busy=lambda: MemFSError(busy))


# git says a full disk only in words: its strerror text for ENOSPC and EDQUOT.
_SPACE_WORDS = {
    os.strerror(errno.ENOSPC): errno.ENOSPC,
    os.strerror(errno.EDQUOT): errno.EDQUOT,
}


def _disk_full(root: Path, why: str, doing: str) -> StoreError | None:
    """The DiskFull for a git command in the memory repo that a full disk (or quota) refused."""
    for words, code in _SPACE_WORDS.items():
        said = next((line.strip() for line in why.splitlines() if words in line), None)
        if said is not None:  # git's own line, so the message stays one line
            return disk_full(root, OSError(code, f"{words} (git: {said})"), doing=doing)
    return None

