"""The task log of one parent conversation: which subagent tasks it started, how they ended, and
which `<task-notification>`s still wait to be delivered.

`<conversation dir>/tasks.jsonl`, append-only, one JSON object a line, 0600:

    {"event": "created",  "task_id", "type", "description", "log", "owner": [pid, start], "at"}
    {"event": "spawned",  "task_id", "pid", "start", "at"}           one per attempt
    {"event": "ended",    "task_id", "status", "notification", "delivered", "at"}
    {"event": "delivered", "task_ids": [...], "at"}

`owner` and `start` pair a pid with its start time (`/proc/<pid>/stat` field 22) so a reused pid
is never mistaken for the process that was recorded. Every read-modify-append happens under an
exclusive `flock` on the log, so task ids stay unique across processes sharing the conversation
and a notification is taken by exactly one run. `reconcile` settles tasks whose owner died
without recording an end (a parent killed with SIGKILL): a still-running child is killed and the
task is recorded as interrupted, its notification pending for the conversation's next turn.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

Identity = tuple[int, int | None]  # pid, start time in clock ticks (None off Linux)


def process_start(pid: int) -> int | None:
    """The start time of `pid` (clock ticks since boot), None when unknown or not running."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = stat[stat.rfind(")") + 2 :].split()  # after "pid (comm) "
    try:
        return int(fields[19])  # field 22 overall: starttime
    except (IndexError, ValueError):
        return None


def this_process() -> Identity:
    return os.getpid(), process_start(os.getpid())


def alive(identity: Identity) -> bool:
    """Whether the process recorded as `identity` still runs (a zombie counts as gone)."""
    pid, start = identity
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return start is None  # no /proc: trust kill(0)
    if stat[stat.rfind(")") + 2 :].split()[:1] == ["Z"]:
        return False
    return start is None or process_start(pid) == start


def kill_recorded(identity: Identity, grace: float = 2.0) -> None:
    """SIGTERM the recorded process's group (it leads one), then SIGKILL after `grace` seconds."""
    pid = identity[0]
    for sig in (signal.SIGTERM, signal.SIGKILL):
        if not alive(identity):
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, sig)
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline and alive(identity):
            time.sleep(0.02)


@dataclass(slots=True)
class LoggedTask:
    """What the log says about one task."""

    task_id: str
    type: str = ""
    description: str = ""
    log: str = ""
    owner: Identity | None = None
    created_at: float = 0.0
    child: Identity | None = None
    status: str | None = None  # None: no end recorded
    notification: str | None = None
    delivered: bool = False


class TaskLog:
    def __init__(self, path: Path) -> None:
        self.path = path

    @contextlib.contextmanager
    def _locked(self) -> Iterator[int]:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_APPEND, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield fd
        finally:
            os.close(fd)  # releases the lock

    @staticmethod
    def _append(fd: int, record: dict[str, Any]) -> None:
        record.setdefault("at", time.time())
        os.write(fd, orjson.dumps(record) + b"\n")

    def _read(self) -> dict[str, LoggedTask]:
        tasks: dict[str, LoggedTask] = {}
        try:
            data = self.path.read_bytes()
        except FileNotFoundError:
            return tasks
        for line in data.splitlines():
            try:
                rec = orjson.loads(line)
            except orjson.JSONDecodeError:
                continue  # a torn last line from a crash
            if not isinstance(rec, dict):
                continue
            event = rec.get("event")
            if event == "delivered":
                for tid in rec.get("task_ids") or ():
                    if tid in tasks:
                        tasks[tid].delivered = True
                continue
            tid = rec.get("task_id")
            if not isinstance(tid, str):
                continue
            task = tasks.setdefault(tid, LoggedTask(tid))
            if event == "created":
                task.type, task.description = (
                    str(rec.get("type", "")),
                    str(rec.get("description", "")),
                )
                task.log, task.created_at = str(rec.get("log", "")), float(rec.get("at") or 0)
                owner = rec.get("owner")
                task.owner = (
                    (int(owner[0]), owner[1]) if isinstance(owner, list) and owner else None
                )
            elif event == "spawned":
                task.child = (int(rec["pid"]), rec.get("start"))
            elif event == "ended":
                task.status = str(rec.get("status"))
                task.notification = rec.get("notification")
                task.delivered = bool(rec.get("delivered"))
        return tasks

    def tasks(self) -> dict[str, LoggedTask]:
        if not self.path.exists():
            return {}
        with self._locked():
            return self._read()

    def create(
        self, type_: str, description: str, log_for: Callable[[str], Path]
    ) -> tuple[str, Path]:
        """A fresh task id (`task_<n>`, unique in this conversation) and its transcript path."""
        with self._locked() as fd:
            numbers = [
                int(t[5:]) for t in self._read() if t.startswith("task_") and t[5:].isdigit()
            ]
            task_id = f"task_{max(numbers, default=0) + 1}"
            log = log_for(task_id)
            self._append(
                fd,
                {
                    "event": "created",
                    "task_id": task_id,
                    "type": type_,
                    "description": description,
                    "log": str(log),
                    "owner": list(this_process()),
                },
            )
        return task_id, log

    def spawned(self, task_id: str, pid: int) -> None:
        with self._locked() as fd:
            self._append(
                fd,
                {"event": "spawned", "task_id": task_id, "pid": pid, "start": process_start(pid)},
            )

    def ended(
        self, task_id: str, status: str, notification: str | None, *, delivered: bool
    ) -> None:
        with self._locked() as fd:
            self._append(
                fd,
                {
                    "event": "ended",
                    "task_id": task_id,
                    "status": status,
                    "notification": notification,
                    "delivered": delivered,
                },
            )

    def reconcile(self, own: set[str], interrupted: Callable[[LoggedTask], str]) -> list[str]:
        """Settle tasks whose owner died without recording their end: kill a child still running,
        record the task as interrupted (notification from `interrupted(task)`, not delivered).
        Tasks in `own` belong to this process and are left alone. Returns the settled ids."""
        settled: list[str] = []
        if not self.path.exists():  # reading never creates the log
            return settled
        with self._locked() as fd:
            for task in self._read().values():
                if task.status is not None or task.task_id in own:
                    continue
                if task.owner is not None and alive(task.owner):
                    continue  # another live parent process still owns it
                if task.child is not None:
                    kill_recorded(task.child)
                self._append(
                    fd,
                    {
                        "event": "ended",
                        "task_id": task.task_id,
                        "status": "interrupted",
                        "notification": interrupted(task),
                        "delivered": False,
                    },
                )
                settled.append(task.task_id)
        return settled

    def take_pending(self) -> list[str]:
        """Every ended task's notification not delivered yet, oldest first; marks them delivered."""
        if not self.path.exists():
            return []
        with self._locked() as fd:
            pending = [
                t
                for t in self._read().values()
                if t.status is not None and not t.delivered and t.notification
            ]
            if pending:
                self._append(fd, {"event": "delivered", "task_ids": [t.task_id for t in pending]})
        return [t.notification for t in pending if t.notification]
