"""`tether mcp list | get | add | remove`: the MCP servers a run here would start, and editing them.

`list` and `get` print JSON: each server's configuration (header and env values left out) and,
after connecting to it, its status and tools; project servers of an untrusted folder are listed
as `held_back` and not started. `add` and `remove` edit one scope's file atomically:

    user     $TETHER_HOME/settings.json            "mcpServers"
    project  <cwd>/.mcp.json                       (Claude Code's shared file)
    local    <cwd>/.tether/settings.local.json     "mcpServers"
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import orjson

from tether.errors import TetherError, UsageError

SCOPES = ("user", "project", "local")
USAGE = """usage: tether mcp list
       tether mcp get NAME
       tether mcp add NAME [--scope user|project|local] [-e KEY=VALUE]... -- COMMAND [ARGS...]
       tether mcp add NAME --transport http|sse [--header 'Name: value']... URL
       tether mcp remove NAME [--scope user|project|local]"""


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(f"{self.prog}: {message}")


def run_mcp(argv: Sequence[str]) -> int:
    argv = list(argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(USAGE)
        return 0 if argv else 2
    verb, rest = argv[0], argv[1:]
    handlers = {"list": _list, "get": _get, "add": _add, "remove": _remove, "rm": _remove}
    if verb not in handlers:
        sys.stderr.write(f"Error: unknown mcp command {verb!r}\n{USAGE}\n")
        return 2
    try:
        return handlers[verb](rest)
    except TetherError as exc:
        sys.stderr.write(f"Error: {exc}\n")
        return 1


def _home() -> Path:
    from tether.runtime.session.session import tether_home

    return tether_home(os.environ)


def _configured() -> tuple[Any, list[str]]:
    """(McpConfig with every server a run here would start, names held back as untrusted)."""
    from tether.mcp.config import resolve_config
    from tether.runtime.session.prompt_cache import project_trusted
    from tether.runtime.session.settings import load_settings

    home, cwd = _home(), Path.cwd()
    settings = load_settings(home, cwd)
    trusted = project_trusted(settings.trust, False, home, cwd)
    config = resolve_config(settings.mcp_sources, (), cwd=cwd, env=os.environ, trusted=trusted)
    everything = resolve_config(settings.mcp_sources, (), cwd=cwd, env=os.environ, trusted=True)
    started = {s.name for s in config.servers}
    held = [s.name for s in everything.servers if s.name not in started]
    return everything, held


def _status(servers: Sequence[Any]) -> dict[str, dict[str, Any]]:
    if not servers:
        return {}
    from tether.mcp.client import McpServers

    async def check() -> list[dict[str, Any]]:
        with open(os.devnull, "w") as quiet:
            clients = McpServers(tuple(servers), env=os.environ, errlog=quiet)
            try:
                await clients.ready()
                return clients.status()
            finally:
                await clients.close()

    return {s["name"]: s for s in asyncio.run(check())}


def _report(names: Sequence[str] | None) -> list[dict[str, Any]]:
    config, held = _configured()
    chosen = [s for s in config.servers if names is None or s.name in names]
    live = _status([s for s in chosen if s.name not in held])
    out = []
    for server in chosen:
        entry = server.describe()
        if server.name in held:
            entry["status"] = "held_back"
            entry["error"] = "this folder is not trusted (run `tether trust`)"
        else:
            entry.update({k: v for k, v in live[server.name].items() if k != "name"})
        out.append(entry)
    return out


def _print(obj: Any) -> None:
    sys.stdout.buffer.write(orjson.dumps(obj, option=orjson.OPT_INDENT_2) + b"\n")
    sys.stdout.flush()


def _list(argv: list[str]) -> int:
    _Parser(prog="tether mcp list").parse_args(argv)
    _print(_report(None))
    return 0


def _get(argv: list[str]) -> int:
    ns = _parser_with_name("tether mcp get").parse_args(argv)
    found = _report([ns.name])
    if not found:
        raise UsageError(f"no MCP server named {ns.name!r} is configured here (see `tether mcp list`)")
    _print(found[0])
    return 0


def _parser_with_name(prog: str) -> _Parser:
    p = _Parser(prog=prog)
    p.add_argument("name")
    return p


def _scope_file(scope: str) -> Path:
    cwd = Path.cwd()
    return {"user": _home() / "settings.json", "project": cwd / ".mcp.json",
            "local": cwd / ".tether" / "settings.local.json"}[scope]


def _read_json(path: Path) -> dict[str, Any]:
    from tether.mcp.config import read_json_object

    return read_json_object(path) or {}


def _add(argv: list[str]) -> int:
    command: list[str] = []
    if "--" in argv:
        at = argv.index("--")
        argv, command = argv[:at], argv[at + 1:]
    p = _parser_with_name("tether mcp add")
    p.add_argument("target", nargs="?", help="the URL of an http/sse server")
    p.add_argument("--scope", choices=SCOPES, default="local")
    p.add_argument("--transport", "-t", choices=("stdio", "http", "sse"), default=None)
    p.add_argument("-e", "--env", action="append", default=[], metavar="KEY=VALUE")
    p.add_argument("--header", "-H", action="append", default=[], metavar="'Name: value'")
    ns = p.parse_intermixed_args(argv)
    transport = ns.transport or ("stdio" if command else "http")
    spec: dict[str, Any]
    if transport == "stdio":
        if not command:
            raise UsageError("tether mcp add: a stdio server needs its command after `--`")
        env = {}
        for item in ns.env:
            key, sep, value = item.partition("=")
            if not sep or not key:
                raise UsageError(f"tether mcp add: -e {item!r} is not KEY=VALUE")
            env[key] = value
        spec = {"command": command[0], "args": command[1:]}
        if env:
            spec["env"] = env
    else:
        if command or not ns.target:
            raise UsageError(f"tether mcp add: an {transport} server takes its URL, not a command")
        headers = {}
        for item in ns.header:
            key, sep, value = item.partition(":")
            if not sep or not key.strip():
                raise UsageError(f"tether mcp add: --header {item!r} is not 'Name: value'")
            headers[key.strip()] = value.strip()
        spec = {"type": transport, "url": ns.target}
        if headers:
            spec["headers"] = headers
    from tether.mcp.config import parse_servers

    path = _scope_file(ns.scope)
    # Checked as a run would read it (variables are not expanded in the file).
    parse_servers({ns.name: spec}, source="cli", origin=str(path), env=_ExpandAnything(), base=Path.cwd())
    data = _read_json(path)
    servers = data.setdefault("mcpServers", {})
    if not isinstance(servers, dict):
        raise UsageError(f'{path}: "mcpServers" must be an object')
    replaced = ns.name in servers
    servers[ns.name] = spec
    from tether.backends.local.locks import write_json_atomic

    write_json_atomic(path, data)
    _print({"added": ns.name, "scope": ns.scope, "file": str(path), "replaced": replaced})
    return 0


def _remove(argv: list[str]) -> int:
    p = _parser_with_name("tether mcp remove")
    p.add_argument("--scope", choices=SCOPES, default=None)
    ns = p.parse_args(argv)
    scopes = [ns.scope] if ns.scope else list(SCOPES)
    from tether.backends.local.locks import write_json_atomic

    for scope in scopes:
        path = _scope_file(scope)
        data = _read_json(path)
        servers = data.get("mcpServers")
        if isinstance(servers, dict) and ns.name in servers:
            del servers[ns.name]
            write_json_atomic(path, data)
            _print({"removed": ns.name, "scope": scope, "file": str(path)})
            return 0
    raise UsageError(f"no MCP server named {ns.name!r} in the {'/'.join(scopes)} settings")


class _ExpandAnything(dict):
    """An environment in which every `${VAR}` is set, for validating a file's shape only."""

    def __contains__(self, key: object) -> bool:
        return True

    def __getitem__(self, key: str) -> str:
        return ""
