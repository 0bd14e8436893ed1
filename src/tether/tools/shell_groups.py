"""Shell process groups a tether process started, so the next run can reap them if it died.

Every shell command leads its own process group (its own session, in fact), so `kill -9` of
tether leaves them running. Each spawn appends `{pgid, start, owner, owner_start}` to a small
ledger and fsyncs it *before* the command is let run (`process_group.spawn_shell` holds the child
at a handshake until `started` returns), so no command can outlive a killed tether unrecorded.
Under the turn lock, the next run kills every group whose owner is gone and whose leader is
still the same process (pid and start time, from /proc, so a reused pid is never hit), then
rewrites the ledger with what is still owned by live processes. Groups of a live owner are that
owner's business.

The ledger belongs where no sandboxed command can write (`ledger_path`: under `$TETHER_HOME`,
not in the conversation's scratch directory, which the sandbox's private /tmp is): a forged
line would name a victim group to kill. It is opened with O_NOFOLLOW, so a symlink planted in its
place is refused rather than followed.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import signal
from pathlib import Path

import orjson

_FLAGS = os.O_CLOEXEC | os.O_NOFOLLOW


def ledger_path(home: Path, conversation_id: str) -> Path:
    """Where a conversation's ledger lives: `$TETHER_HOME/shell-groups/<conversation>.jsonl`."""
    return home / "shell-groups" / f"{conversation_id}.jsonl"


def _start_time(pid: int) -> int | None:
    try:
        stat = Path(f"/proc/{pid}/stat").read_bytes()
    except OSError:
        return None
    fields = stat[stat.rfind(b")") + 2 :].split()
    if len(fields) < 20 or fields[0] == b"Z":
        return None  # gone, or a zombie nobody reaps: it runs nothing
    return int(fields[19])  # field 22 of stat: start time in clock ticks since boot


def _same(pid: int, start: int | None) -> bool:
    return start is not None and _start_time(pid) == start


class LedgerUnwritable(OSError):
    """The group could not be recorded durably; the command was not let run."""


class ShellGroups:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.owner = os.getpid()
        self.owner_start = _start_time(self.owner)

    @classmethod
    def for_conversation(cls, home: Path, conversation_id: str) -> ShellGroups:
        return cls(ledger_path(home, conversation_id))

    def started(self, pgid: int) -> None:
        """Append the group and fsync it; raises LedgerUnwritable (naming the ledger and the
        cause) when that fails, and the caller must then not let the command run."""
        record = {"pgid": pgid, "start": _start_time(pgid), "owner": self.owner,
                  "owner_start": self.owner_start}
        try:
            self.path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
            created = not self.path.exists()
            fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | _FLAGS, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)  # not mid-rewrite by a reaper
                data = orjson.dumps(record) + b"\n"
                if os.write(fd, data) != len(data):
                    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
                os.fsync(fd)
            finally:
                os.close(fd)
            if created:
                _fsync_dir(self.path.parent)
        except OSError as exc:
            why = "a symlink is in its place" if exc.errno == errno.ELOOP else (exc.strerror or str(exc))
            raise LedgerUnwritable(
                exc.errno or errno.EIO,
                f"could not record the shell's process group in {self.path} ({why}); "
                "the command did not run",
            ) from exc

    def reap_orphans(self) -> list[int]:
        """Kill the groups dead owners left behind; returns their pgids."""
        try:
            fd = os.open(self.path, os.O_RDWR | _FLAGS)
        except FileNotFoundError:
            return []
        except OSError:
            return []  # a symlink in its place (ELOOP) names nothing of ours
        killed: list[int] = []
        with os.fdopen(fd, "r+b") as fh:
            fcntl.flock(fh, fcntl.LOCK_EX)
            keep: list[bytes] = []
            for line in fh.read().splitlines():
                try:
                    record = orjson.loads(line)
                    pgid, start = int(record["pgid"]), record.get("start")
                    owner, owner_start = int(record["owner"]), record.get("owner_start")
                except (orjson.JSONDecodeError, KeyError, TypeError, ValueError):
                    continue  # a torn line from a crash mid-append
                if not _same(pgid, start):
                    continue  # the group's leader is gone: nothing of ours to find by this id
                if _same(owner, owner_start):
                    keep.append(line)
                    continue
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(pgid, signal.SIGKILL)
                    killed.append(pgid)
            with contextlib.suppress(OSError):  # a full disk: the lines stay, reaped again later
                fh.seek(0)
                fh.truncate()
                fh.write(b"".join(k + b"\n" for k in keep))
        return killed


def _fsync_dir(path: Path) -> None:
    with contextlib.suppress(OSError):
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
