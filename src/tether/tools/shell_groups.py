"""Shell process groups a tether process started, so the next run can reap them if it died.

Every shell command leads its own process group (its own session, in fact), so `kill -9` of
tether leaves them running. Each spawn appends `{pgid, start, owner, owner_start}` to a small
ledger in the conversation's scratch directory; under the turn lock, the next run kills every
group whose owner is gone and whose leader is still the same process (pid and start time, from
/proc, so a reused pid is never hit), then rewrites the ledger with what is still owned by live
processes. Groups of a live owner are that owner's business.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
from pathlib import Path

import orjson


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


class ShellGroups:
    def __init__(self, path: Path) -> None:
        self.path = path
        self.owner = os.getpid()
        self.owner_start = _start_time(self.owner)

    def started(self, pgid: int) -> None:
        record = {"pgid": pgid, "start": _start_time(pgid), "owner": self.owner,
                  "owner_start": self.owner_start}
        with contextlib.suppress(OSError):
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with open(self.path, "ab") as fh:
                fh.write(orjson.dumps(record) + b"\n")

    def reap_orphans(self) -> list[int]:
        """Kill the groups dead owners left behind; returns their pgids."""
        try:
            fh = open(self.path, "r+b")  # noqa: SIM115 - held for the lock below
        except FileNotFoundError:
            return []
        killed: list[int] = []
        with fh:
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
            fh.seek(0)
            fh.truncate()
            fh.write(b"".join(k + b"\n" for k in keep))
        return killed
