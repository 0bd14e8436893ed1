"""`tether dream [--agent ID] [--conversation ID] [-m MODEL]`: one reflection pass now, waited for.

Prints the pass's result as JSON on stdout; exit 0 when it merged or found nothing to change,
1 otherwise (the message on stderr says what happened; the pass is then left pending for the
post-turn trigger to retry).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import signal
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import orjson

from tether.errors import TetherError, UsageError

if TYPE_CHECKING:
    from tether.backends.local.store import LocalStore


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(f"tether dream: {message}")


def run_dream(argv: Sequence[str]) -> int:
    parser = _Parser(prog="tether dream", description=__doc__.splitlines()[0])
    parser.add_argument("--agent", "-a", help="agent id (default: this folder's last agent)")
    parser.add_argument(
        "--conversation",
        "--from",
        "-C",
        dest="conversation",
        help="conversation to review (default: the agent's most recent one)",
    )
    parser.add_argument("--model", "-m", help="model for the reflection subagent")
    try:
        ns = parser.parse_args(list(argv))
        return asyncio.run(_dream(ns.agent, ns.conversation, ns.model))
    except TetherError as exc:
        sys.stderr.write(f"Error: {exc}\n")
        return 1


async def _dream(agent_id: str | None, conversation: str | None, model: str | None) -> int:
    from tether.backends.local.store import LocalStore
    from tether.providers.catalog import default_handle, resolve_provider
    from tether.runtime.agents import reflection, reflection_pass
    from tether.runtime.session.session import NO_MODEL, _last_agent, tether_home

    env = dict(os.environ)
    store = LocalStore(tether_home(env))
    if agent_id is not None:
        agent = store.get_agent(agent_id)
    elif (last := _last_agent(store, Path.cwd())) is not None:
        agent = last
    else:
        raise UsageError("tether dream: no agent has run in this folder yet; pass --agent ID")
    handle = model or agent.model or default_handle(store.home, env)
    if handle is None:
        raise UsageError(NO_MODEL)
    resolve_provider(handle, store.home, env)  # a bad handle or missing key fails here
    conv_id = conversation or _latest_conversation(store, agent.id)
    messages = store.transcript(agent.id, conv_id).load() if conv_id is not None else []

    abort = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, abort.set)
    result = await reflection_pass.run_pass(
        store.home, agent.id, agent_name=agent.name, messages=messages, model=handle, abort=abort
    )
    reflection.update_state(
        store, agent.id, lambda state: reflection.record_result(state, result.result, time.time())
    )
    sys.stdout.write(orjson.dumps(result.to_dict()).decode() + "\n")
    sys.stdout.flush()
    if result.ok:
        return 0
    sys.stderr.write(f"Error: reflection {result.result}: {result.message}\n")
    return 1


def _latest_conversation(store: LocalStore, agent_id: str) -> str | None:
    """The conversation whose transcript was written last (None when the agent has none)."""
    best: tuple[float, str] | None = None
    for record in store.list_conversations(agent_id):
        path = store.conversation_dir(agent_id, record.id) / "messages.jsonl"
        try:
            mtime = path.stat().st_mtime
        except FileNotFoundError:
            continue
        if best is None or mtime > best[0]:
            best = (mtime, record.id)
    return best[1] if best else None
