"""Subcommands (`tether version | agents | messages | connect | sandbox`), run before any bootstrap.

Each prints JSON (agents, messages) or one line, and exits 0, or prints `Error: …` and exits 1.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import orjson

from tether.errors import TetherError, UsageError

if TYPE_CHECKING:
    from tether.backends.local.store import LocalStore


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(f"{self.prog}: {message}")


def run_subcommand(name: str, argv: Sequence[str]) -> int:
    handlers: dict[str, Callable[[list[str]], int]] = {
        "version": _version,
        "agents": _agents,
        "messages": _messages,
        "connect": _connect,
        "sandbox": _sandbox,
    }
    try:
        return handlers[name](list(argv))
    except TetherError as exc:
        sys.stderr.write(f"Error: {exc}\n")
        return 1


def _print_json(obj: Any) -> None:
    sys.stdout.buffer.write(orjson.dumps(obj, option=orjson.OPT_INDENT_2) + b"\n")
    sys.stdout.buffer.flush()


def _store() -> LocalStore:
    from tether.backends.local.store import LocalStore
    from tether.runtime.session import tether_home

    return LocalStore(tether_home(os.environ))


def _version(argv: list[str]) -> int:
    from tether import __version__

    if argv:
        raise UsageError("tether version takes no arguments")
    sys.stdout.write(f"{__version__} (tether)\n")
    return 0


def _agents(argv: list[str]) -> int:
    p = _Parser(prog="tether agents")
    sub = p.add_subparsers(dest="action", required=True)
    ls = sub.add_parser("list")
    ls.add_argument("--limit", type=int, default=20)
    ls.add_argument("--name")
    ns = p.parse_args(argv)
    agents = _store().list_agents()
    if ns.name:
        agents = [a for a in agents if a.name.lower() == ns.name.lower()]
    _print_json([a.to_dict() for a in agents[-ns.limit :]])
    return 0


def _messages(argv: list[str]) -> int:
    p = _Parser(prog="tether messages")
    sub = p.add_subparsers(dest="action", required=True)
    ls = sub.add_parser("list")
    ls.add_argument("--conversation", "--conv", required=True)
    ls.add_argument("--agent")
    ls.add_argument("--limit", type=int, default=50)
    ns = p.parse_args(argv)
    from tether.protocol.messages import message_to_dict

    store = _store()
    if ns.conversation == "default":
        if not ns.agent:
            raise UsageError("tether messages list --conversation default needs --agent <id>")
        agent_id = ns.agent
    else:
        agent_id = store.get_conversation(ns.conversation).agent_id
    messages = store.transcript(agent_id, ns.conversation).load()
    _print_json([message_to_dict(m) for m in messages[-ns.limit :]])
    return 0


def _connect(argv: list[str]) -> int:
    from tether.providers.catalog import ALIASES, PRESETS
    from tether.providers.credentials import save_credential
    from tether.runtime.session import tether_home

    p = _Parser(prog="tether connect")
    p.add_argument("provider")
    p.add_argument("--api-key")
    p.add_argument("--base-url")
    p.add_argument("--timeout")
    ns = p.parse_args(argv)
    if ns.provider not in PRESETS and ns.provider not in ALIASES:
        raise UsageError(
            f"unknown provider {ns.provider!r}; choose one of: {', '.join(PRESETS)}"
        )
    if ns.api_key is None and ns.base_url is None:
        raise UsageError("tether connect needs --api-key and/or --base-url")
    record = save_credential(
        tether_home(os.environ),
        ns.provider,
        api_key=ns.api_key,
        base_url=ns.base_url,
        timeout=ns.timeout,
    )
    sys.stdout.write(f"Saved credentials for {ns.provider} as {record.get('name', ns.provider)}\n")
    return 0


def _sandbox(argv: list[str]) -> int:
    p = _Parser(prog="tether sandbox")
    sub = p.add_subparsers(dest="action", required=True)
    sub.add_parser("status")
    p.parse_args(argv)
    # Imported here: the probe and the settings loader stay off every other path.
    from pathlib import Path

    from tether.runtime.sandboxing import describe_switch, sandbox_switch
    from tether.runtime.session import tether_home
    from tether.runtime.settings import load_settings
    from tether.sandbox import format_status, probe

    status = probe()
    sys.stdout.write(format_status(status) + "\n")
    sys.stdout.flush()
    settings = load_settings(tether_home(os.environ), Path.cwd())
    switch = sandbox_switch(os.environ, {"sandbox": settings.sandbox})
    lines = [describe_switch(switch)]
    lines += [f"note: {why}" for why in settings.ignored if "sandbox" in why]
    if switch.enabled and status.backend is None:
        lines.append("note: no backend here, so every shell command will be refused (fail closed)")
    if "TETHER_SANDBOX" in os.environ:
        lines.append(
            f"note: already inside a tether sandbox (TETHER_SANDBOX={os.environ['TETHER_SANDBOX']}); "
            "commands stay in it and are not wrapped again"
        )
    sys.stdout.write("\n".join(lines) + "\n")
    return 0
