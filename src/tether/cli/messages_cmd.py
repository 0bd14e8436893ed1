"""`tether messages list | search | transcript`: a conversation's messages as JSON (§1.1).

    tether messages list       --conversation ID [--agent ID] [--limit 50] [--format pi|letta]
    tether messages search     --query WORDS [--mode fts] [--agent ID] [--conversation ID] [--limit 20]
    tether messages transcript --conversation ID [--agent ID]

`search` matches every word (case-insensitive) in the local transcripts, newest first;
`--mode vector|hybrid` needs a Letta server's embeddings and is refused locally.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from tether.cli.agents_cmd import print_json
from tether.cli.usage import UsageParser, reported


def run_messages(argv: Sequence[str]) -> int:
    argv = list(argv)
    if argv[:1] == ["list"]:
        from tether.cli.commands import run_subcommand

        return run_subcommand("messages", argv)
    return reported(_run, argv)


def _run(argv: list[str]) -> int:
    p = UsageParser(prog="tether messages", description=__doc__.splitlines()[0])
    sub = p.add_subparsers(dest="action", required=True)
    sub.add_parser("list", help="a conversation's last messages")
    search = sub.add_parser("search")
    search.add_argument("--query", "-q", required=True)
    search.add_argument("--mode", default="fts")
    search.add_argument("--agent")
    search.add_argument("--conversation", "--conv")
    search.add_argument("--limit", type=int, default=20)
    transcript = sub.add_parser("transcript")
    transcript.add_argument("--conversation", "--conv", required=True)
    transcript.add_argument("--agent")
    ns = p.parse_args(argv)
    from tether.backends.local.store import LocalStore
    from tether.runtime.manage import conversations
    from tether.runtime.session.session import tether_home

    store = LocalStore(tether_home(os.environ))
    if ns.action == "search":
        print_json(conversations.search_messages(
            store, ns.query, mode=ns.mode, agent_id=ns.agent, conversation_id=ns.conversation,
            limit=ns.limit,
        ))
    else:
        print_json(conversations.transcript(store, ns.conversation, ns.agent))
    return 0
