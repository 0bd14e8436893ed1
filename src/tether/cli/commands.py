"""Subcommands (`tether version | messages list | connect | models | sandbox`), run before any bootstrap.

Each prints JSON (messages) or one line, and exits 0, or prints `Error: …` and exits 1.
`agents` lives in agents_cmd.py, the rest of `messages` in messages_cmd.py; `server_agents`
(the cloud listing) is shared with agents_cmd.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import orjson

from tether.cli.usage import UsageParser, reported
from tether.errors import UsageError

if TYPE_CHECKING:
    from pathlib import Path

    from tether.backends.local.store import LocalStore


def run_subcommand(name: str, argv: Sequence[str]) -> int:
    handlers: dict[str, Callable[[list[str]], int]] = {
        "version": _version,
        "messages": _messages,
        "connect": _connect,
        "models": _models,
        "sandbox": _sandbox,
    }
    return reported(handlers[name], argv)


def _print_json(obj: Any) -> None:
    sys.stdout.buffer.write(orjson.dumps(obj, option=orjson.OPT_INDENT_2) + b"\n")
    sys.stdout.buffer.flush()


def _store() -> LocalStore:
    from tether.backends.local.store import LocalStore
    from tether.runtime.session.session import tether_home

    return LocalStore(tether_home(os.environ))


def _version(argv: list[str]) -> int:
    from tether import __version__

    if argv:
        raise UsageError("tether version takes no arguments")
    sys.stdout.write(f"{__version__} (tether)\n")
    return 0


def server_agents(home: Path, name: str | None, limit: int) -> list[dict[str, Any]]:
    """The Letta server's agents (the cloud backend keeps them there), as tether's records."""
    import asyncio

    from tether.backends.api.agents import agent_model, list_agents
    from tether.backends.api.client import LettaClient
    from tether.runtime.session.backend_choice import LETTA_CLOUD_URL, agent_record, letta_server

    server = letta_server(os.environ, home)
    if server.base_url == LETTA_CLOUD_URL and server.api_key is None:
        raise UsageError("listing the agents on Letta Cloud needs a key: set LETTA_API_KEY or run "
                         "`tether connect letta` (or point LETTA_BASE_URL at your own server)")
    client = LettaClient(server.base_url, server.api_key, env=os.environ)
    found = asyncio.run(list_agents(client, limit=limit if not name else 1000))
    if name:
        found = [a for a in found if str(a.get("name", "")).lower() == name.lower()]
    return [agent_record(a, agent_model(a)).to_dict() for a in found[:limit]]


def _messages(argv: list[str]) -> int:
    p = UsageParser(prog="tether messages")
    sub = p.add_subparsers(dest="action", required=True)
    ls = sub.add_parser("list")
    ls.add_argument("--conversation", "--conv", required=True)
    ls.add_argument("--agent")
    ls.add_argument("--limit", type=int, default=50)
    ls.add_argument("--format", choices=("pi", "letta"), default="pi",
                    help="pi: the transcript's own shape; letta: Letta API messages (message_type)")
    ns = p.parse_args(argv)
    if ns.limit < 1:
        raise UsageError(f"tether messages list --limit must be at least 1, got {ns.limit}")
    from tether.protocol.messages import message_to_dict

    store = _store()
    if ns.conversation == "default":
        if not ns.agent:
            raise UsageError("tether messages list --conversation default needs --agent <id>")
        agent_id = ns.agent
    else:
        agent_id = store.get_conversation(ns.conversation).agent_id
    # Read back from the end of the file: the cost follows --limit, not the conversation.
    messages = store.transcript(agent_id, ns.conversation).tail(ns.limit)
    if ns.format == "letta":
        from tether.protocol.letta_messages import letta_messages

        _print_json(letta_messages(messages))
    else:
        _print_json([message_to_dict(m) for m in messages])
    return 0


def _connect(argv: list[str]) -> int:
    """Store a provider's credentials; `NAME --base-url URL` (or `openai-compatible --name NAME`)
    adds a custom OpenAI-compatible provider reached as `NAME/<model>`."""
    from tether.providers.catalog import ALIASES, PRESETS, valid_prefixes
    from tether.providers.credentials import save_credential, save_custom_provider
    from tether.runtime.session.session import tether_home

    p = UsageParser(prog="tether connect")
    p.add_argument("provider")
    p.add_argument("--api-key")
    p.add_argument("--base-url")
    p.add_argument("--timeout")
    p.add_argument("--name", help="a custom OpenAI-compatible provider's name (its handle prefix)")
    p.add_argument("--access-key", help="bedrock: AWS access key id")
    p.add_argument("--secret-key", help="bedrock: AWS secret access key")
    p.add_argument("--region", help="bedrock: AWS region")
    p.add_argument("--profile", help="bedrock: a profile of ~/.aws/credentials or ~/.aws/config")
    ns = p.parse_args(argv)
    home = tether_home(os.environ)
    if ns.provider == "letta":  # the hosted backend's server, not a model provider
        return _connect_letta(home, ns)
    provider = ALIASES.get(ns.provider, ns.provider)
    aws = {"access_key": ns.access_key, "region": ns.region, "profile": ns.profile}
    built_in = dict.__contains__(PRESETS, provider)
    if ns.name is not None or not built_in:
        name = ns.name if ns.name is not None else ns.provider
        if built_in and provider != "openai-compatible":
            raise UsageError(
                "--name names a custom OpenAI-compatible provider: "
                "tether connect openai-compatible --name NAME --base-url URL [--api-key KEY]"
            )
        if any(v is not None for v in (*aws.values(), ns.secret_key)):
            raise UsageError("--access-key, --secret-key, --region and --profile are for bedrock")
        if ns.base_url is None and name not in PRESETS:
            raise UsageError(
                f"unknown provider {ns.provider!r}; choose one of: {valid_prefixes()}, or add an "
                f"OpenAI-compatible server with `tether connect {ns.provider} --base-url URL`"
            )
        record = save_custom_provider(
            home, name, base_url=ns.base_url, api_key=ns.api_key, timeout=ns.timeout
        )
        sys.stdout.write(
            f"Saved provider {name} (OpenAI-compatible at {record['base_url']}); "
            f"use --model {name}/<model> or {name}/ for the server's first model\n"
        )
        return 0
    if provider == "bedrock":
        if ns.api_key is not None and ns.secret_key is not None:
            raise UsageError("give the AWS secret once: --secret-key (or --api-key), not both")
        secret = ns.secret_key if ns.secret_key is not None else ns.api_key
        if secret is None and ns.base_url is None and not any(aws.values()) and ns.timeout is None:
            raise UsageError(
                "tether connect bedrock needs --access-key and --secret-key, or --profile, "
                "and --region"
            )
        record = save_credential(
            home, provider, api_key=secret, base_url=ns.base_url, timeout=ns.timeout, **aws
        )
    else:
        if any(v is not None for v in (*aws.values(), ns.secret_key)):
            raise UsageError("--access-key, --secret-key, --region and --profile are for bedrock")
        if ns.api_key is None and ns.base_url is None:
            raise UsageError("tether connect needs --api-key and/or --base-url")
        record = save_credential(
            home, provider, api_key=ns.api_key, base_url=ns.base_url, timeout=ns.timeout
        )
    sys.stdout.write(f"Saved credentials for {ns.provider} as {record.get('name', ns.provider)}\n")
    return 0


def _connect_letta(home: Any, ns: argparse.Namespace) -> int:
    """`tether connect letta [--api-key KEY] [--base-url URL]`: the Letta server of `--backend cloud`."""
    from tether.providers.credentials import save_letta_credential

    if any(v is not None for v in (ns.name, ns.timeout, ns.access_key, ns.secret_key, ns.region,
                                   ns.profile)):
        raise UsageError("tether connect letta takes only --api-key and --base-url")
    record = save_letta_credential(home, api_key=ns.api_key, base_url=ns.base_url)
    where = record.get("base_url") or "Letta Cloud (https://api.letta.com)"
    sys.stdout.write(f"Saved credentials for letta ({where}); use --backend cloud or "
                     "`tether backend cloud`\n")
    return 0


def _models(argv: list[str]) -> int:
    """JSON rows {handle, provider, model, context_window} for each configured provider."""
    p = UsageParser(prog="tether models")
    p.add_argument("--provider", help="only this provider (e.g. ollama, google, a custom name)")
    ns = p.parse_args(argv)
    from tether.providers.model_list import list_all
    from tether.runtime.session.session import tether_home

    env = dict(os.environ)
    rows = list_all(tether_home(env), env, ns.provider)
    if not rows and ns.provider is None:
        raise UsageError(
            "no provider is configured: set a key (e.g. ANTHROPIC_API_KEY, GEMINI_API_KEY) or run "
            "`tether connect <provider> …`"
        )
    _print_json(rows)
    return 0


def _sandbox(argv: list[str]) -> int:
    p = UsageParser(prog="tether sandbox")
    sub = p.add_subparsers(dest="action", required=True)
    sub.add_parser("status")
    p.parse_args(argv)
    # Imported here: the probe and the settings loader stay off every other path.
    from pathlib import Path

    from tether.runtime.policy.sandboxing import (
        describe_confinement,
        describe_switch,
        sandbox_switch,
    )
    from tether.runtime.session.session import tether_home
    from tether.runtime.session.settings import load_settings
    from tether.sandbox import format_status, probe

    status = probe()
    sys.stdout.write(format_status(status) + "\n")
    sys.stdout.flush()
    settings = load_settings(tether_home(os.environ), Path.cwd())
    switch = sandbox_switch(os.environ, {"sandbox": settings.sandbox})
    lines = [describe_switch(switch)]
    lines += describe_confinement(
        os.environ, {"sandbox": settings.sandbox}, tether_home(os.environ)
    )
    lines += [f"note: {why}" for why in settings.ignored if "sandbox" in why]
    if switch.enabled and status.backend is None:
        lines.append("note: no backend here, so every shell command will be refused (fail closed)")
    from tether.sandbox import inside_tether_sandbox

    if "TETHER_SANDBOX" in os.environ and inside_tether_sandbox():
        lines.append(
            f"note: already inside a tether sandbox (TETHER_SANDBOX={os.environ['TETHER_SANDBOX']}); "
            "commands stay in it and are not wrapped again"
        )
    elif "TETHER_SANDBOX" in os.environ:
        lines.append("note: TETHER_SANDBOX is set but this process is not inside a tether sandbox; "
                     "commands are wrapped as usual")
    sys.stdout.write("\n".join(lines) + "\n")
    return 0
