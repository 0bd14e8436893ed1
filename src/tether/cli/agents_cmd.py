"""`tether agents list | create | config`: the local agents as JSON (reference §1.1).

    tether agents list   [--name N | --query Q | --tags a,b [--match-all-tags]] [--include-blocks] [--limit 20]
                         (--shared: a Letta organisation's agents, refused locally)
    tether agents create [--name N] [--model M] [--description D] [--tags a,b] [--system TEXT]
                         [--block LABEL=TEXT ...] [--memfs | --no-memfs]
    tether agents config ID [--name N] [--model M] [--description D] [--system TEXT]
                         [--tags a,b] [--add-tag T] [--remove-tag T] [--model-settings JSON]

`config` without a change prints the agent (with its memory blocks). Errors exit 1 naming
what was wrong; nothing is written then.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import orjson

from tether.cli.usage import UsageParser, reported
from tether.errors import UsageError


def print_json(obj: Any) -> None:
    sys.stdout.buffer.write(orjson.dumps(obj, option=orjson.OPT_INDENT_2) + b"\n")
    sys.stdout.buffer.flush()


def split_tags(raw: str | None) -> list[str]:
    return [t.strip() for t in raw.split(",") if t.strip()] if raw else []


def run_agents(argv: Sequence[str]) -> int:
    return reported(_run, argv)


def _run(argv: list[str]) -> int:
    p = UsageParser(prog="tether agents", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="action", required=True)
    ls = sub.add_parser("list")
    ls.add_argument("--limit", type=int, default=20)
    ls.add_argument("--name")
    ls.add_argument("--query")
    ls.add_argument("--tags")
    ls.add_argument("--match-all-tags", action="store_true")
    ls.add_argument("--include-blocks", action="store_true")
    ls.add_argument("--shared", action="store_true")
    ls.add_argument("--backend", help="local|cloud (api): default TETHER_BACKEND, else the saved one")
    create = sub.add_parser("create")
    create.add_argument("--name")
    create.add_argument("--model", "-m")
    create.add_argument("--description", default="")
    create.add_argument("--tags")
    create.add_argument("--system")
    create.add_argument("--block", action="append", default=[], metavar="LABEL=TEXT")
    create.add_argument("--memfs", action="store_true", help="the default: a git memory repo")
    create.add_argument("--no-memfs", action="store_true")
    config = sub.add_parser("config")
    config.add_argument("agent_id")
    config.add_argument("--name")
    config.add_argument("--model", "--set-model", "-m", dest="model")
    config.add_argument("--description")
    config.add_argument("--system")
    config.add_argument("--tags")
    config.add_argument("--add-tag", action="append", default=[])
    config.add_argument("--remove-tag", action="append", default=[])
    config.add_argument("--model-settings")
    ns = p.parse_args(argv)
    from tether.runtime.session.session import tether_home

    home = tether_home(os.environ)
    if ns.action == "list":
        return _list(home, ns)
    from tether.backends.local.store import LocalStore
    from tether.runtime.manage import agents

    store = LocalStore(home)
    if ns.action == "create":
        if ns.memfs and ns.no_memfs:
            raise UsageError("give --memfs or --no-memfs, not both")
        blocks = {}
        for item in ns.block:
            label, eq, text = item.partition("=")
            if not eq or not label.strip():
                raise UsageError(f"--block expects LABEL=TEXT, got {item!r}")
            blocks[label.strip()] = text
        print_json(agents.create_agent(
            store, name=ns.name, model=ns.model, description=ns.description,
            system=ns.system, tags=split_tags(ns.tags), memfs=not ns.no_memfs, blocks=blocks,
        ))
        return 0
    changes: dict[str, Any] = {k: getattr(ns, k) for k in ("name", "model", "description", "system")
                               if getattr(ns, k) is not None}
    if ns.model_settings is not None:
        try:
            changes["model_settings"] = orjson.loads(ns.model_settings)
        except orjson.JSONDecodeError as exc:
            raise UsageError(f"--model-settings is not JSON: {exc}") from None
    if ns.tags is not None or ns.add_tag or ns.remove_tag:
        current = split_tags(ns.tags) if ns.tags is not None else list(
            agents.get_agent(store, ns.agent_id)["tags"])
        current += [t for t in ns.add_tag if t not in current]
        changes["tags"] = [t for t in current if t not in ns.remove_tag]
    if not changes:
        print_json(agents.get_agent(store, ns.agent_id, include_blocks=True))
    else:
        print_json(agents.update_agent(store, ns.agent_id, changes))
    return 0


def _list(home: Path, ns: argparse.Namespace) -> int:
    if ns.limit < 1:
        raise UsageError(f"tether agents list --limit must be at least 1, got {ns.limit}")
    chosen = sum(x is not None for x in (ns.name, ns.query, ns.tags))
    if chosen > 1:
        raise UsageError("tether agents list: give one of --name, --query, --tags")
    if ns.match_all_tags and ns.tags is None:
        raise UsageError("tether agents list: --match-all-tags goes with --tags")
    if ns.shared:
        raise UsageError("--shared lists agents shared through a Letta organisation; local agents "
                         "are never shared (use --backend cloud with a Letta server)")
    from tether.runtime.session.backend_choice import choose_backend

    if choose_backend(ns.backend, home, os.environ) == "cloud":
        if ns.query or ns.tags or ns.include_blocks:
            raise UsageError("--query, --tags and --include-blocks list local agents; "
                             "the cloud listing takes --name and --limit")
        from tether.cli.commands import server_agents

        print_json(server_agents(home, ns.name, ns.limit))
        return 0
    from tether.backends.local.store import LocalStore
    from tether.runtime.manage.agents import list_agents

    print_json(list_agents(LocalStore(home), name=ns.name, query=ns.query, tags=split_tags(ns.tags),
                           match_all_tags=ns.match_all_tags, include_blocks=ns.include_blocks,
                           limit=ns.limit))
    return 0
