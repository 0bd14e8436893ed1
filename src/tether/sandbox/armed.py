"""Names that arm later execution, and the guard that undoes their creation by a sandboxed command.

A workspace-sandboxed command may write the workspace, but not plant what a later unsandboxed
step runs or loads: a nested `.git` (its config names programs git runs: fsmonitor, hooks,
filters), a bare repository layout (`HEAD` beside `objects/` and `refs/`, or beside a
`commondir` file), `.envrc` (direnv), `.vscode`/`.idea` (editor tasks), `.tether` (settings,
hooks, skills), `.agents/skills` (skills tether puts in later prompts: `PROJECT_SKILL_FOLDERS`).
Mounts keep the existing ones read-only (`known_armed`, used when the policy is built); a name that does not exist yet
cannot be mounted over without leaving junk in the user's tree, so instead the guard, run as
`armed-guard STATE ROOT... -- COMMAND...` around the sandbox, notes the time, runs the
command, and afterwards moves aside every armed name that appeared under a root during it
(renamed to `<name>.tether-quarantine-<n>`), saying so on stderr, where the model and the user
see it.

It is cheap after the first run: STATE (a file in tether's scratch dir, which sandboxed
commands cannot write) keeps every directory of the tree with its mtime and every armed path, so
the sweep stats the known directories and lists only those that changed; a new entry always
changes its directory's mtime, whether created or renamed in. A sweep cut short (the guard was
SIGKILLed) leaves its entry in STATE's `pending` (pid, start) list: the next guard sweeps since
then first. Several guards may run at once (a background command and a foreground one): each
keeps its own entry and removes only its own.

`armed_guard.c` is the same guard in C (same arguments, same state file), built on first use
and preferred: it costs ~2 ms per command where this module's `python -I -S` start-up costs
10–20 ms. This module is the fallback without a C compiler: builtin modules only, runnable
without tether on sys.path.
"""

from __future__ import annotations

# Only builtin modules: every workspace-sandboxed command pays this module's start-up, and
# json, signal, contextlib or typing would each add milliseconds to it.
import _signal
import os
import sys
import time

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable, Sequence

State = dict  # {"dirs": {path: mtime_ns}, "armed": {path: inode}, "pending": {pid: start_ns}}
_S_IFMT, _S_IFDIR = 0o170000, 0o040000

ARMED_NAMES = frozenset({".git", ".envrc", ".tether", ".vscode", ".idea"})
# The project skill folders whose SKILL.md files reach later prompts: `runtime/extensions/skills.py` scans
# exactly these, so a folder added there is armed here too. `.tether/…` is armed with `.tether`.
PROJECT_SKILL_FOLDERS = (".agents/skills", ".tether/skills")
ARMED_CHILDREN = frozenset(
    (parent, child)
    for parent, _, child in (f.partition("/") for f in PROJECT_SKILL_FOLDERS)
    if parent not in ARMED_NAMES
)  # (parent folder's name, name): `.agents/skills` at any depth
# With a HEAD file: git takes the folder for a repository when it holds objects/ and refs/, or a
# `commondir` file naming a folder that does (a worktree-style git directory).
BARE_MARKERS = ("objects", "refs")
COMMON_DIR = "commondir"
QUARANTINE = ".tether-quarantine"
TOP_PROTECTED = (".git", ".tether")  # under each root: kept read-only by the sandbox's mounts
_VERSION = "tether-armed 1"


def _is_armed(directory: str, name: str) -> bool:
    if name in ARMED_NAMES:
        return True
    if (os.path.basename(directory), name) in ARMED_CHILDREN:
        return True
    if name == "HEAD":
        if os.path.isfile(os.path.join(directory, COMMON_DIR)):
            return True
        return all(os.path.isdir(os.path.join(directory, m)) for m in BARE_MARKERS)
    return False


def _scan_dir(path: str, dirs: dict[str, int], armed: dict[str, int]) -> list[str]:
    """List `path`: record its armed entries; return its subdirectories (not followed links)."""
    subdirs: list[str] = []
    try:
        with os.scandir(path) as it:
            entries = list(it)
    except OSError:
        return subdirs
    for entry in entries:
        if _is_armed(path, entry.name):
            try:
                # st_ino, not d_ino: they differ on overlayfs, and the sweep compares lstat's
                armed[entry.path] = entry.stat(follow_symlinks=False).st_ino
            except OSError:
                pass
            continue  # an armed directory is guarded as a whole, not walked
        if QUARANTINE in entry.name:
            continue
        try:
            if entry.is_dir(follow_symlinks=False):
                subdirs.append(entry.path)
        except OSError:
            continue
    return subdirs


WALK_BUDGET_S = 3.0


def _walk(root: str, dirs: dict[str, int], armed: dict[str, int]) -> None:
    stack = [root]
    deadline = time.monotonic() + WALK_BUDGET_S
    while stack:
        if time.monotonic() > deadline:
            sys.stderr.write(
                f"tether sandbox: {root} is too large to watch whole for planted .git/.envrc/"
                f".vscode ({len(dirs)} folders in {WALK_BUDGET_S:.0f} s); folders not reached "
                "are not watched\n"
            )
            return
        path = stack.pop()
        try:
            dirs[path] = os.lstat(path).st_mtime_ns
        except OSError:
            continue
        stack.extend(_scan_dir(path, dirs, armed))


def baseline(roots: Iterable[str]) -> State:
    dirs: dict[str, int] = {}
    armed: dict[str, int] = {}
    for root in roots:
        _walk(root, dirs, armed)
    return {"dirs": dirs, "armed": armed, "pending": {}}


def sweep(state: State, roots: Sequence[str], since_ns: int) -> list[tuple[str, str]]:
    """Move aside the armed names that appeared since `since_ns`; update `state` in place.

    Returns (planted path, where it was moved). Directories whose mtime is older than
    `since_ns` gained no entry since, so only changed or new directories are listed. A name is
    planted when it was not there before or is another file now (replaced: a new inode). The
    roots' own `.git`/`.tether` are skipped: mounts keep those (bwrap makes them if missing).
    """
    dirs: dict[str, int] = dict(state["dirs"])
    before: dict[str, int] = dict(state["armed"])
    armed: dict[str, int] = {}
    for path in before:
        try:
            armed[path] = os.lstat(path).st_ino
        except OSError:
            pass
    new_dirs: dict[str, int] = {}
    for root in roots:
        if root not in dirs:
            _walk(root, new_dirs, armed)
    changed = []
    for path in list(dirs):
        try:
            st = os.lstat(path)
        except OSError:
            continue  # gone
        if st.st_mode & _S_IFMT != _S_IFDIR:
            continue
        new_dirs[path] = st.st_mtime_ns
        if st.st_mtime_ns >= since_ns:
            changed.append(path)
    for path in changed:
        for sub in _scan_dir(path, new_dirs, armed):
            if sub not in dirs:
                _walk(sub, new_dirs, armed)
    mounted = {os.path.join(r, name) for r in roots for name in TOP_PROTECTED}
    moved: list[tuple[str, str]] = []
    for path in sorted(armed):
        if before.get(path) == armed[path] or path in mounted:
            continue
        if not any(path.startswith(r.rstrip("/") + "/") for r in roots):
            continue
        target = _quarantine(path)
        if target is not None:
            moved.append((path, target))
            del armed[path]
    state.update(dirs=new_dirs, armed=armed)
    return moved


def _quarantine(path: str) -> str | None:
    for n in range(1, 1000):
        target = f"{path}{QUARANTINE}-{n}"
        if os.path.lexists(target):
            continue
        try:
            os.rename(path, target)
        except OSError:
            return None
        return target
    return None


def _lock(path: str) -> int:
    """An exclusive lock beside the state file (released by closing the fd)."""
    fd = os.open(path + ".lock", os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    os.lockf(fd, os.F_LOCK, 0)
    return fd


def load_state(path: str) -> State | None:
    """The state file: a version line, then NUL-separated records `d<mtime>\t<path>`,
    `a<inode>\t<path>`, `p<pid>\t<start ns>` (no JSON: see the imports)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        chunks = []
        while chunk := os.read(fd, 1 << 20):
            chunks.append(chunk)
    except OSError:
        return None
    finally:
        os.close(fd)
    records = b"".join(chunks).decode("utf-8", "surrogateescape").split("\0")
    if not records or records[0] != _VERSION:
        return None
    dirs: dict[str, int] = {}
    armed: dict[str, int] = {}
    pending: dict[int, int] = {}
    try:
        for record in records[1:]:
            if not record:
                continue
            kind, rest = record[0], record[1:]
            number, _, name = rest.partition("\t")
            if kind == "p":
                pending[int(number)] = int(name)
                continue
            (dirs if kind == "d" else armed)[name] = int(number)
    except ValueError:
        return None
    return {"dirs": dirs, "armed": armed, "pending": pending}


def save_state(path: str, state: State) -> None:
    parts = [_VERSION]
    parts += [f"d{m}\t{p}" for p, m in state["dirs"].items()]
    parts += [f"a{i}\t{p}" for p, i in state["armed"].items()]
    parts += [f"p{pid}\t{start}" for pid, start in state["pending"].items()]
    data = "\0".join(parts).encode("utf-8", "surrogateescape")
    tmp = f"{path}.{os.getpid()}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    try:
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    finally:
        os.close(fd)
    os.replace(tmp, path)


def known_armed(state_path: str, roots: Iterable[str]) -> list[str]:
    """The armed paths under `roots` the last sweep saw (for read-only mounts at wrap time).

    With no state yet (the run's first sandboxed command), the tree is walked now and the state
    saved: the guard only moves aside armed names that appear, so an existing `.agents/skills`
    or nested `.git` must be mounted read-only from the very first command."""
    state = load_state(state_path)
    if state is None:
        roots = list(roots)
        state = baseline(roots)
        try:
            lock = _lock(state_path)
        except OSError:
            pass
        else:
            try:
                if load_state(state_path) is None:
                    save_state(state_path, state)
            except OSError:
                pass
            finally:
                os.close(lock)
    prefixes = [r.rstrip("/") + "/" for r in roots]
    armed: dict[str, int] = state["armed"]
    return [a for a in armed if any(a.startswith(p) for p in prefixes)]


def _dead_guards(state: State) -> dict[int, int]:
    """Pending entries whose guard is gone (killed before its sweep)."""
    dead = {}
    for pid, start in state["pending"].items():
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            dead[pid] = start
        except PermissionError:
            pass
    return dead


def _sweep_dead(state: State, roots: Sequence[str]) -> None:
    dead = _dead_guards(state)
    if dead:
        _report(sweep(state, roots, min(dead.values())))
        for pid in dead:
            del state["pending"][pid]


def _report(moved: list[tuple[str, str]]) -> None:
    for path, target in moved:
        sys.stderr.write(
            f"tether sandbox: {path} appeared during this command and was moved aside to "
            f"{target}: a later step outside the sandbox could run or load it (git config and "
            "hooks, direnv, editor tasks, tether settings, skills)\n"
        )


def guard(state_path: str, roots: list[str], argv: list[str]) -> int:
    lock = _lock(state_path)
    try:
        state = load_state(state_path)
        if state is None:
            state = baseline(roots)
        else:
            _sweep_dead(state, roots)
        # File times come from a coarse clock (up to a jiffy behind): start a second early;
        # listing a few more directories costs little, missing one would miss a plant.
        since = time.time_ns() - 1_000_000_000
        state["pending"][os.getpid()] = since
        save_state(state_path, state)
    finally:
        os.close(lock)

    def on_signal(signum: int, _frame: object) -> None:
        pass  # the command gets it too (same process group); the sweep still runs after it

    for sig in (_signal.SIGTERM, _signal.SIGINT, _signal.SIGHUP):
        _signal.signal(sig, on_signal)
    try:
        # posix_spawn: inheritable fds (bwrap's seccomp program) pass through; Python's
        # ignored SIGPIPE is set back to default for the command.
        pid = os.posix_spawnp(
            argv[0], argv, dict(os.environ), setsigdef=(_signal.SIGPIPE, _signal.SIGXFSZ)
        )
    except OSError as exc:
        sys.stderr.write(f"tether sandbox: cannot start {argv[0]}: {exc}\n")
        return 127
    while True:
        try:
            _, status = os.waitpid(pid, 0)
            break
        except InterruptedError:
            continue
    code = os.waitstatus_to_exitcode(status)
    lock = _lock(state_path)
    try:
        state = load_state(state_path) or state
        state["pending"].pop(os.getpid(), None)
        dead = _dead_guards(state)
        moved = sweep(state, roots, min([since, *dead.values()]))
        for pid in dead:
            del state["pending"][pid]
        save_state(state_path, state)
    finally:
        os.close(lock)
    _report(moved)
    return 128 - code if code < 0 else code


def main(args: list[str]) -> int:
    if "--" not in args or len(args) < 3:
        sys.stderr.write("usage: armed.py STATE ROOT... -- COMMAND...\n")
        return 126
    split = args.index("--")
    state_path, roots, argv = args[0], args[1:split], args[split + 1 :]
    if not roots or not argv:
        sys.stderr.write("armed.py: need at least one root and a command\n")
        return 126
    return guard(state_path, roots, argv)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
