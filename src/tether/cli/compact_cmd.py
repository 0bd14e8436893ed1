"""`tether compact --conversation ID`: summarise a conversation's older history now (§16 manual).

Prints the compaction's stats as JSON; exit 1 (history unchanged) if the summary call fails.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
from collections.abc import Sequence

import orjson

from tether.errors import TetherError, UsageError


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(f"tether compact: {message}")


def run_compact(argv: Sequence[str]) -> int:
    parser = _Parser(prog="tether compact", description=__doc__.splitlines()[0])
    parser.add_argument("--conversation", required=True)
    parser.add_argument("--agent")
    parser.add_argument("--model", "-m")
    parser.add_argument("--mode", choices=("sliding_window", "all"))
    try:
        ns = parser.parse_args(list(argv))
        from dataclasses import replace

        from tether.cli.flags import parse_run_flags
        from tether.cli.runner import prepare

        run_argv = ["-p", "(compact)", "--conversation", ns.conversation]
        if ns.agent:
            run_argv += ["--agent", ns.agent]
        if ns.model:
            run_argv += ["--model", ns.model]
        from tether.backends.local.backend import LocalBackend

        prepared = prepare(parse_run_flags(run_argv))
        backend = prepared.backend
        if not isinstance(backend, LocalBackend):
            raise UsageError("tether compact: a hosted conversation is compacted by its Letta "
                             "server, not by tether")
        if ns.mode:
            backend.compaction = replace(backend.compaction, mode=ns.mode)
        session = prepared.session
        with prepared.store.turn_lock(session.agent.id, session.conversation_id):
            done = asyncio.run(backend.compact(prepared.conversation))
    except TetherError as exc:
        sys.stderr.write(f"Error: {exc}\n")
        return 1
    sys.stdout.write(orjson.dumps({"summary": done.summary, "stats": done.stats}).decode() + "\n")
    return 0
