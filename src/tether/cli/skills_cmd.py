"""`tether skills list | install | delete` and `tether install <skill>`: skills as JSON (§1.1).

    tether skills list    [--agent ID]                    every skill a run here would offer
    tether skills install SOURCE [--agent ID | --global] [--path SUBDIR] [--force]
    tether skills delete  NAME [--agent ID | --global]
    tether install SOURCE ...                             the same as `skills install`

SOURCE is a folder holding SKILL.md, a SKILL.md file, or `git:<url>[#<ref>]`. A skill goes
into the agent's memory (`skills/<name>/`, one commit) — this folder's last agent unless
--agent names one — or with --global into $TETHER_HOME/skills/.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from tether.cli.agents_cmd import print_json
from tether.cli.usage import UsageParser, reported
from tether.errors import UsageError

if TYPE_CHECKING:
    from tether.backends.local.store import LocalStore


def run_skills(argv: Sequence[str]) -> int:
    return reported(_run, argv)


def run_install(argv: Sequence[str]) -> int:
    argv = list(argv)
    if argv in (["--help"], ["-h"]):
        sys.stdout.write("usage: tether install SOURCE [--agent ID | --global] [--path SUBDIR] "
                         "[--force]\n\n" + __doc__)
        return 0
    if argv and argv[0].startswith("npm:"):
        sys.stderr.write("Error: tether install takes skills (a folder or git:<url>); mods are "
                         "Python packages: pip install them, then `tether mods list`\n")
        return 1
    return run_skills(["install", *argv])


def _run(argv: list[str]) -> int:
    p = UsageParser(prog="tether skills", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="action", required=True)
    ls = sub.add_parser("list")
    ls.add_argument("--agent", "-a")
    install = sub.add_parser("install")
    install.add_argument("source")
    install.add_argument("--agent", "-a")
    install.add_argument("--global", dest="global_", action="store_true")
    install.add_argument("--path", dest="subdir")
    install.add_argument("--force", action="store_true")
    delete = sub.add_parser("delete", aliases=["remove"])
    delete.add_argument("name")
    delete.add_argument("--agent", "-a")
    delete.add_argument("--global", dest="global_", action="store_true")
    ns = p.parse_args(argv)
    from tether.backends.local.store import LocalStore
    from tether.runtime.manage import skills_ops
    from tether.runtime.session.session import tether_home

    home = tether_home(os.environ)
    store = LocalStore(home)
    if ns.action == "list":
        agent = ns.agent or _folder_agent(store, required=False)
        print_json(skills_ops.list_skills(store, Path.cwd(), agent))
        return 0
    if ns.global_ and ns.agent:
        raise UsageError("give --agent or --global, not both")
    agent = None if ns.global_ else (ns.agent or _folder_agent(store, required=True))
    if ns.action == "install":
        print_json(skills_ops.install_skill(store, ns.source, agent_id=agent, subdir=ns.subdir,
                                            force=ns.force))
    else:
        print_json(skills_ops.delete_skill(store, ns.name, agent_id=agent))
    return 0


def _folder_agent(store: LocalStore, *, required: bool) -> str | None:
    from tether.runtime.session.session import _last_agent

    home = store.home
    found = _last_agent(store, Path.cwd())
    if found is None and required:
        raise UsageError(f"no agent has run yet in {home}; pass --agent <id> or --global")
    return found.id if found is not None else None
