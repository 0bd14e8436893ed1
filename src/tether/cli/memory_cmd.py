"""`tether memory` (alias `memfs`): look at an agent's memory repository from the shell.

    tether memory status [--agent ID]              revision, blocks, skills, uncommitted changes
    tether memory diff   [--agent ID]              what the working tree has that HEAD does not
    tether memory log    [--agent ID] [--limit N]  the memory's commits, newest first
    tether memory export [--agent ID] --out DIR    HEAD's files, written under DIR
    tether memory backup  [--agent ID] [--reason R]  bundle the repo under memory-backups/ (JSON)
    tether memory backups [--agent ID]               the backups, oldest first (JSON)
    tether memory restore [--agent ID] --from ID|latest [--force]
                          main back to a backup; --force drops commits it lacks, backing them up first
    tether memory resolve [--agent ID] [--branch B] [--resolutions JSON|@FILE]
                          without --resolutions: the pending merges and their conflicts; with:
                          {"<path>": text | null | {"take": "ours"|"theirs"}} merged and committed
    tether memory tokens  [--agent ID]               estimated tokens per committed file (JSON)

Without --agent: this folder's last agent, else the last agent used anywhere. Nothing here
creates a memory repository; an agent gets one on its first run.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tether.errors import TetherError, UsageError

if TYPE_CHECKING:
    from tether.memory.memfs import MemFS

ACTIONS = ("status", "diff", "log", "export", "backup", "backups", "restore", "resolve", "tokens")
JSON_ACTIONS = ("backup", "backups", "restore", "resolve", "tokens")


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(f"tether memory: {message}")


def run_memory(argv: Sequence[str]) -> int:
    parser = _Parser(prog="tether memory", description=__doc__.splitlines()[0])
    parser.add_argument("action", choices=ACTIONS)
    parser.add_argument("-a", "--agent")
    parser.add_argument("--out")
    parser.add_argument("--limit", type=int, default=20)
    parser.add_argument("--from", dest="source")
    parser.add_argument("--force", action="store_true")
    parser.add_argument("--resolutions")
    parser.add_argument("--branch")
    parser.add_argument("--reason", default="manual backup")
    try:
        ns = parser.parse_args(list(argv))
        if ns.action == "export" and not ns.out:
            raise UsageError("tether memory export: --out DIR is required")
        if ns.action == "restore" and not ns.source:
            raise UsageError("tether memory restore: --from <backup id>|latest is required "
                             "(`tether memory backups` lists them)")
        if ns.limit <= 0:
            raise UsageError("tether memory: --limit expects a positive integer")
        return _run(ns)
    except TetherError as exc:
        sys.stderr.write(f"Error: {exc}\n")
        return 1


def _run(ns: argparse.Namespace) -> int:
    from tether.backends.local.store import LocalStore
    from tether.memory.memfs import MemFS, memory_dir
    from tether.runtime.session.session import _last_agent, tether_home

    store = LocalStore(tether_home(os.environ))
    if ns.agent:
        agent = store.get_agent(ns.agent)
    else:
        found = _last_agent(store, Path.cwd())
        if found is None:
            raise UsageError(f"no agent has run yet in {store.home}; pass --agent <id>")
        agent = found
    if ns.action in JSON_ACTIONS:
        return _run_json(store.home, agent.id, ns)
    memfs = MemFS(memory_dir(store.home, agent.id), agent_id=agent.id, agent_name=agent.name)
    out = sys.stdout
    if not memfs.exists:
        if ns.action == "export":
            raise UsageError(f"agent {agent.id} has no memory yet (it is created on its first run)")
        if ns.action == "status":
            out.write(f"agent: {agent.id}\nmemory: {memfs.root} (not created yet)\n")
        return 0
    if ns.action == "status":
        out.write(_status(memfs))
    elif ns.action == "diff":
        out.write(memfs.diff())
    elif ns.action == "log":
        for commit in memfs.log(ns.limit):
            out.write(f"{commit.sha[:7]}  {commit.date}  {commit.subject}\n")
    else:
        target = Path(ns.out).expanduser().resolve()
        count = memfs.export(target)
        out.write(f"exported {count} files from {memfs.revision() or 'HEAD'} to {target}\n")
    return 0


def _status(memfs: MemFS) -> str:
    paths = memfs.head_paths()
    system = [p for p in paths if p.startswith("system/") and p.endswith(".md")]
    skills = sorted({p.split("/")[1] for p in paths if p.startswith("skills/") and p.endswith("/SKILL.md")})
    other = [p for p in paths if not p.startswith(("system/", "skills/"))]
    dirty = memfs.status_lines()
    lines = [
        f"agent: {memfs.agent_id}",
        f"memory: {memfs.root}",
        f"revision: {memfs.revision() or 'none'}",
        f"system blocks ({len(system)}): {', '.join(system) or '-'}",
        f"skills ({len(skills)}): {', '.join(skills) or '-'}",
        f"other files: {len(other)}",
    ]
    from tether.memory.history import list_backups, pending_merges

    waiting = pending_merges(memfs)
    if waiting:
        lines.append(f"pending merges ({len(waiting)}): "
                     f"{', '.join(p['branch'] for p in waiting)} (tether memory resolve)")
    lines.append(f"backups: {len(list_backups(memfs))}")
    if dirty:
        lines.append(f"uncommitted ({len(dirty)}, not in the prompt until committed):")
        lines.extend(f"  {line}" for line in dirty)
    else:
        lines.append("uncommitted: none")
    return "\n".join(lines) + "\n"


def _run_json(home: Path, agent_id: str, ns: argparse.Namespace) -> int:
    import orjson

    from tether.backends.local.store import LocalStore
    from tether.runtime.manage import memory_ops

    store = LocalStore(home)
    if ns.action == "backup":
        result: object = memory_ops.backup(store, agent_id, ns.reason)
    elif ns.action == "backups":
        result = memory_ops.backups(store, agent_id)
    elif ns.action == "restore":
        result = memory_ops.restore(store, agent_id, ns.source, force=ns.force)
    elif ns.action == "tokens":
        result = memory_ops.tokens(store, agent_id)
    elif ns.resolutions is None:
        result = memory_ops.pending(store, agent_id)
    else:
        result = memory_ops.resolve(store, agent_id, _resolutions(ns.resolutions), ns.branch)
    sys.stdout.buffer.write(orjson.dumps(result, option=orjson.OPT_INDENT_2) + b"\n")
    return 0


def _resolutions(raw: str) -> Any:
    import orjson

    text = raw
    if raw.startswith("@"):
        try:
            text = Path(raw[1:]).expanduser().read_text(encoding="utf-8")
        except OSError as exc:
            raise UsageError(f"--resolutions {raw}: cannot read it ({exc.strerror})") from None
    try:
        return orjson.loads(text)
    except orjson.JSONDecodeError as exc:
        raise UsageError(f"--resolutions is not JSON: {exc}") from None
