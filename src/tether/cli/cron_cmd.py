"""`tether cron add|list|get|runs|delete|remove|trigger`: scheduled prompts, as JSON (reference §13).

Tasks live in `$TETHER_HOME/cron.db`; a `tether server` running on the same home fires them.
With `--store postgresql://…` they are the fleet's, in that database (`runtime/cron/fleet.py`),
fired by whichever `tether server --store` on it runs the schedules. `trigger` asks the running
scheduler to run a task now and waits for the outcome.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Sequence
from typing import Any

import orjson

from tether.errors import TetherError, UsageError


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(f"{self.prog}: {message}")


def _parser() -> _Parser:
    p = _Parser(prog="tether cron")
    p.add_argument(
        "--store", metavar="URL",
        help="the fleet's schedules in PostgreSQL (postgresql://…, as `tether server --store`) "
        "instead of $TETHER_HOME/cron.db",
    )
    sub = p.add_subparsers(dest="action", required=True, parser_class=_Parser)
    add = sub.add_parser("add", help="schedule a prompt")
    add.add_argument(
        "--agent", help="the agent (default: $TETHER_AGENT_ID inside an agent's shell)"
    )
    add.add_argument(
        "--conversation",
        "--conv",
        default="new",
        help="new (a fresh conversation each fire), default, or a conversation id",
    )
    add.add_argument("--name", help="a short label (default: the prompt's first words)")
    add.add_argument("--description", default="")
    add.add_argument("--prompt", required=True)
    add.add_argument("--every", help="5m, 2h, 1d … (recurring)")
    add.add_argument("--at", help='"3:00pm", "in 45m", an ISO time (one-shot)')
    add.add_argument("--cron", help='a 5-field cron expression, e.g. "0 9 * * 1-5"')
    add.add_argument("--timezone", "--tz", help="an IANA zone (default: the system's)")
    ls = sub.add_parser("list", help="the scheduled tasks")
    ls.add_argument("--agent")
    ls.add_argument("--status", choices=("active", "fired", "missed", "cancelled"))
    get = sub.add_parser("get", help="one task")
    get.add_argument("id")
    runs = sub.add_parser("runs", help="a task's run log, oldest first")
    runs.add_argument("id")
    runs.add_argument("--limit", type=int, default=20)
    for name in ("delete", "remove"):
        rm = sub.add_parser(name, help="delete a task: it never fires after this returns")
        rm.add_argument("id")
    trig = sub.add_parser("trigger", help="run a task now through the running `tether server`")
    trig.add_argument("id")
    trig.add_argument("--timeout", type=float, default=15.0, help="seconds to wait for the outcome")
    trig.add_argument("--no-wait", action="store_true")
    return p


def run_cron(argv: Sequence[str]) -> int:
    try:
        ns = _parser().parse_args(list(argv))
        return _run(ns)
    except TetherError as exc:
        sys.stderr.write(f"Error: {exc}\n")
        return 1


def _run(ns: argparse.Namespace) -> int:
    from tether.runtime.cron.scheduler import clock_from_env
    from tether.runtime.cron.store import CronStore
    from tether.runtime.session.session import tether_home

    home = tether_home(os.environ)
    session = None
    if ns.store:
        session, store = _fleet_store(ns.store, home)
    else:
        store = CronStore(home)
    clock = clock_from_env(os.environ)
    try:
        if ns.action == "add":
            _print(_add(ns, home, store, clock.now_ms()))
        elif ns.action == "list":
            _print(store.tasks(ns.agent, ns.status))
        elif ns.action == "get":
            _print(store.get(ns.id))
        elif ns.action == "runs":
            if ns.limit <= 0:
                raise UsageError("--limit must be a positive number")
            runs = store.runs(ns.id, ns.limit)
            if not runs:
                store.get(ns.id)  # an unknown id says so; a deleted task's log stays until GC
            _print(runs)
        elif ns.action in ("delete", "remove"):
            task = store.delete(ns.id)
            _print({"deleted": True, "id": task["id"], "name": task["name"]})
        else:
            return _trigger(ns, store, clock)
        return 0
    finally:
        store.close()
        if session is not None:
            session.close()


def _fleet_store(url: str, home: Any) -> tuple[Any, Any]:
    """A session on the fleet's database at `url` and its schedule store."""
    import uuid
    from urllib.parse import urlsplit

    from tether.backends.postgres.connection import SCHEMES, PgSession, redact
    from tether.backends.postgres.cron_tasks import CronTasks
    from tether.backends.postgres.fires import CronFires
    from tether.runtime.cron.fleet import FleetCronStore

    scheme = urlsplit(url).scheme
    if scheme not in SCHEMES:
        raise UsageError(
            f"tether cron: --store {redact(url)!r} is not a PostgreSQL URL: expected"
            f" postgresql://… (got scheme {scheme or 'none'!r})"
        )
    session = PgSession(url, f"cron-{os.getpid()}-{uuid.uuid4().hex[:8]}")
    return session, FleetCronStore(home, CronFires(session), CronTasks(session))


def _add(ns: argparse.Namespace, home: Any, store: Any, now_ms: int) -> dict[str, Any]:
    from tether.runtime.cron.tasks import new_task

    agent_id = ns.agent or os.environ.get("TETHER_AGENT_ID") or os.environ.get("AGENT_ID")
    if not agent_id:
        raise UsageError("tether cron add needs --agent <id> (`tether agents list` shows them)")
    if agent_id.startswith("agent-local-") and not ns.store:  # a fleet's agents are its store's
        from tether.backends.local.store import LocalStore

        local = LocalStore(home)
        local.get_agent(agent_id)  # NotFound names the home and how to list agents
        if ns.conversation not in ("new", "default"):
            local.get_conversation(ns.conversation, agent_id)
    task, first_slot = new_task(
        agent_id=agent_id,
        conversation_id=ns.conversation,
        name=ns.name if ns.name is not None else default_name(ns.prompt),
        description=ns.description,
        prompt=ns.prompt,
        every=ns.every,
        at=ns.at,
        cron=ns.cron,
        timezone=ns.timezone,
        now_ms=now_ms,
    )
    return store.add(task, now_ms, first_slot)


def default_name(prompt: str, limit: int = 40) -> str:
    """A task's name when `--name` is not given: the prompt's first line, spaces collapsed, cut
    at a word boundary to `limit` characters (an ellipsis says it was cut)."""
    first = " ".join((prompt.strip().splitlines() or [""])[0].split())
    if len(first) <= limit:
        return first
    head = first[: limit - 1]
    if " " in head:
        head = head.rsplit(" ", 1)[0]
    return head.rstrip(" ,.;:") + "…"


def _trigger(ns: argparse.Namespace, store: Any, clock: Any) -> int:
    if store.lease_holder(clock.now_ms()) is None:
        store.get(ns.id)  # an unknown id says so first
        raise TetherError(
            "no scheduler is running on this TETHER_HOME (or, with --store, on that store): start "
            "`tether server` (it fires schedules and triggers), then run `tether cron trigger` "
            "again"
        )
    seq = store.request_trigger(ns.id, clock.now_ms())
    if ns.no_wait:
        _print({"id": ns.id, "requested": True})
        return 0
    deadline = time.monotonic() + ns.timeout
    while time.monotonic() < deadline:
        result = store.trigger_result(seq)
        if result is not None:
            _print({"id": ns.id, **result})
            return 0 if result.get("outcome") == "queued" else 1
        time.sleep(0.05)
    raise TetherError(
        f"the scheduler did not pick up the trigger of {ns.id} within {ns.timeout:g}s; it stays "
        "requested and runs when the scheduler gets to it (see `tether cron runs`)"
    )


def _print(obj: Any) -> None:
    sys.stdout.buffer.write(orjson.dumps(obj, option=orjson.OPT_INDENT_2) + b"\n")
    sys.stdout.buffer.flush()

