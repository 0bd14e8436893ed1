"""What the in-process file tools may reach: the sandbox's hidden paths and tether's own state.

The shell sandbox hides paths from commands in the kernel; Read, Grep, Glob, LS, Edit and
TaskOutput run inside tether's own process, so they hold the same line themselves, by the real
path of what they opened (never the spelled one, which a symlink can point anywhere):

- always: tether's stored provider keys (`$TETHER_HOME/providers`), the effect checkpoints (they
  hold every conversation's tool results), other conversations' records and scratch dirs, and
  `/proc/<pid>/environ|mem`, `/proc/kcore`, `/dev` (secrets of other processes, or devices);
- with the shell sandbox on, also the policy's denied roots (the user's credential dirs) and the
  rest of `$TETHER_HOME`, except this conversation's own scratch dir and records, this agent's
  (and a subagent's parent's) own tree under `agents/`, and the sandbox's writable roots (the
  workspace may itself live under tether's home).

A deeper root wins over a shallower one (as mounts do), an allowed root wins a tie, and the
"always" entries win over anything. Whatever the roots say, a file that is also a file in
tether's state under another name (a hard link) is never opened (`alias_refusal`).
"""

from __future__ import annotations

import base64
import os
from collections.abc import Iterable
from pathlib import Path
from typing import NamedTuple

from tether.core.tools import ToolRunContext

# What no file tool opens whatever the roots say: what another process keeps in memory or its
# environment (`/proc/<pid>/environ|mem`, per thread too, `/proc/kcore`), and device nodes
# (reading one can block, rewind a tape, or never end).
_PROCESS_SECRET_NAMES = frozenset({"environ", "mem"})
_PROCESS_DIR_NAMES = frozenset({"self", "thread-self"})


def _process_secret(real: str) -> bool:
    parts = real.split("/")  # ["", "proc", pid, ...]
    if len(parts) < 3 or parts[0] or parts[1] != "proc":
        return False
    if parts[2:] == ["kcore"]:
        return True
    rest = parts[3:]
    if len(rest) == 3 and rest[0] == "task":
        rest = rest[2:]
    return len(rest) == 1 and rest[0] in _PROCESS_SECRET_NAMES


def _process_dir(real: str) -> bool:
    """A per-process tree under /proc: walks skip it whole (its secrets, once per process)."""
    parts = real.split("/")
    return (
        len(parts) >= 3
        and not parts[0]
        and parts[1] == "proc"
        and (parts[2].isdigit() or parts[2] in _PROCESS_DIR_NAMES)
    )


_HIDDEN, _ALLOWED, _FORCED = 0, 1, 2


def _b64url(text: str) -> str:
    # The local store's directory naming (backends/local/store.py); repeated here because tools
    # sit beside backends, not above them. If the layout changes, the guard hides more, not less.
    return base64.urlsafe_b64encode(text.encode()).rstrip(b"=").decode("ascii")


def _within(path: str, root: str) -> bool:
    return path == root or path.startswith(root if root.endswith("/") else root + "/")


class Root(NamedTuple):
    path: str  # real path (symlinks of existing parts resolved)
    kind: int  # _HIDDEN, _ALLOWED or _FORCED
    why: str  # what it is, for the error message


class ReadBoundary:
    """The roots that decide, for a real path, whether a file tool may show or change it."""

    # A plain class, not a dataclass: it is imported on every run's start-up path.
    __slots__ = ("roots", "state", "_top", "_all")

    def __init__(self, roots: tuple[Root, ...], state: str | None = None) -> None:
        self.roots = roots
        self.state = state  # $TETHER_HOME: no file with another name in it is opened
        self._top: str | None = None  # see `narrowed`
        self._all = roots

    def narrowed(self, top: str) -> ReadBoundary:
        """The same boundary, faster for paths under the real directory `top` (a walk's root):
        only roots above or below it can decide there; other paths still see every root."""
        keep = tuple(r for r in self.roots if _within(r.path, top) or _within(top, r.path))
        narrow = ReadBoundary(keep, self.state)
        narrow._top, narrow._all = top, self._all
        return narrow

    def why_hidden(self, real: str) -> str | None:
        """None when `real` may be read; else what it belongs to (e.g. "tether's provider keys")."""
        if real.startswith("/dev/") or real == "/dev":
            return "the device tree (/dev)"
        if real.startswith("/proc/") and _process_secret(real):
            return "another process's memory or environment"
        roots = self.roots if self._top is None or _within(real, self._top) else self._all
        best: Root | None = None
        for root in roots:
            if not _within(real, root.path):
                continue
            if root.kind == _FORCED:
                return root.why
            if (
                best is None
                or len(root.path) > len(best.path)
                or (len(root.path) == len(best.path) and root.kind == _ALLOWED)
            ):
                best = root
        return best.why if best is not None and best.kind == _HIDDEN else None

    def prune(self, real_dir: str) -> bool:
        """Whether a walk can skip `real_dir` whole: it is hidden and nothing below it is not."""
        if real_dir == "/dev" or _process_dir(real_dir):
            return True
        if self.why_hidden(real_dir) is None:
            return False
        return not any(
            r.kind == _ALLOWED and r.path != real_dir and _within(r.path, real_dir)
            for r in self._all
        )

    def refuse_walk(self, tool: str, root: Path | str) -> None:
        """Raise the refusal for a search rooted wholly inside a hidden tree (else it would
        quietly find nothing, which reads like "there is nothing there")."""
        real = os.path.realpath(root)
        if self.prune(real):
            from tether.errors import ToolFailure

            raise ToolFailure(self.refusal(tool, root, real) or f"{tool} refused: {root}")

    def alias_refusal(self, tool: str, shown: Path | str, info: os.stat_result, real: str) -> str | None:
        """The error for an open file that is also a file in tether's state under another name
        (a hard link: every path check, and the kernel sandbox, sees only the name), or None."""
        if self.state is None or info.st_nlink < 2:
            return None
        from tether.core.permissions.aliases import state_name_of

        if state_name_of(info, real, self.state) is None:
            return None
        return (
            f"{tool} refused: {shown} is a hard link to a file in tether's own state "
            f"({self.state}), the same file under another name. File tools never read or write "
            "through such a link; remove it (`rm` the workspace name) if it should not be there."
        )

    def refusal(self, tool: str, shown: Path | str, real: str) -> str | None:
        """The error a tool returns for `shown` (whose real path is `real`), or None if allowed."""
        why = self.why_hidden(real)
        if why is None:
            return None
        # Not the target's name: what lies inside a hidden tree is not the model's to learn.
        via = "" if os.path.normpath(str(shown)) == real else " (through a symlink)"
        return (
            f"{tool} refused: {shown}{via} is inside {why}, which file tools do not open. "
            "Work with files in the workspace instead."
        )


def tether_home_of(ctx: ToolRunContext) -> Path:
    """The run's `$TETHER_HOME`: a `tether_home` service when the runtime gives one, else the
    environment (as `runtime.session.tether_home` reads it)."""
    given = ctx.services.tether_home
    if isinstance(given, str | Path) and str(given):
        return Path(given).expanduser()
    value = (ctx.env or {}).get("TETHER_HOME") or os.environ.get("TETHER_HOME")
    return Path(value).expanduser() if value else Path.home() / ".tether"


def _real(path: Path | str) -> str:
    return os.path.realpath(os.path.abspath(os.fspath(path)))


def _roots(entries: Iterable[tuple[Path | str, int, str]]) -> tuple[Root, ...]:
    seen: dict[tuple[str, int], Root] = {}
    for path, kind, why in entries:
        for form in {_real(path), os.path.normpath(os.path.abspath(os.fspath(path)))}:
            seen.setdefault((form, kind), Root(form, kind, why))
    return tuple(seen.values())


def boundary_for(ctx: ToolRunContext) -> ReadBoundary:
    """The boundary of one tool call, from what its context carries (see the module docstring)."""
    home = tether_home_of(ctx)
    env = ctx.env or {}
    conversation = env.get("TETHER_CONVERSATION_ID")
    agent = env.get("TETHER_AGENT_ID")
    state = f"tether's own state ({home})"
    entries: list[tuple[Path | str, int, str]] = [
        (home / "providers", _FORCED, f"tether's stored provider keys ({home / 'providers'})"),
        (home / "checkpoints.db", _FORCED, f"tether's effect checkpoints ({home})"),
        (home / "checkpoints.db-wal", _FORCED, f"tether's effect checkpoints ({home})"),
        (home / "checkpoints.db-shm", _FORCED, f"tether's effect checkpoints ({home})"),
        (
            home / "conversations",
            _HIDDEN,
            f"other conversations' records ({home / 'conversations'})",
        ),
        (home / "tmp", _HIDDEN, f"other conversations' scratch files ({home / 'tmp'})"),
    ]
    if conversation:
        # The store's key: an agent's primary history is `default:<agent>`.
        key = f"default:{agent}" if conversation == "default" else f"conversation:{conversation}"
        if conversation != "default" or agent:
            own = home / "conversations" / _b64url(key)
            entries.append((own, _ALLOWED, "this conversation's records"))
        entries.append((home / "tmp" / conversation, _ALLOWED, "this conversation's scratch dir"))
    if ctx.scratch_dir is not None:
        entries.append((ctx.scratch_dir, _ALLOWED, "this conversation's scratch dir"))
    sandbox = ctx.services.sandbox
    policy = getattr(sandbox, "policy", None)
    if policy is not None:
        entries.append((home, _HIDDEN, state))
        # The agent's own tree (its memory, reflection worktrees) and, in a subagent, its
        # parent's: the agent's own context, which memory subagents work on with file tools.
        parent = os.environ.get("TETHER_PARENT_AGENT_ID")
        for owner in {a for a in (agent, parent) if a}:
            for name in {owner, _b64url(owner)}:
                entries.append((home / "agents" / name, _ALLOWED, "this agent's own tree"))
        for denied in getattr(policy, "denied_roots", ()):
            entries.append((denied, _HIDDEN, f"a path the sandbox hides ({denied})"))
        for writable in getattr(policy, "writable_roots", ()):
            entries.append((writable, _ALLOWED, "the sandbox's writable roots"))
    return ReadBoundary(_roots(entries), _real(home))
