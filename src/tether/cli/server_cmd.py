"""`tether server`'s command line: every flag parsed and checked into the App Server's
`ServerOptions` (a bad value is a usage error naming the flag, before anything binds), then
`server.app_server.run_server` runs it; an error the server raises is printed, exit 1."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from tether.errors import TetherError, UsageError
from tether.server import auth
from tether.server.app_server import (
    DEFAULT_LISTEN,
    DEFAULT_MAX_FRAME,
    ServerOptions,
    parse_listen_url,
    run_server,
)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(f"{message} (see `tether server --help`)")


def _parser() -> _Parser:
    p = _Parser(
        prog="tether server", description="Serve agents to protocol v2 clients over a websocket."
    )
    p.add_argument(
        "--listen", default=DEFAULT_LISTEN, help=f"ws://host:port[/path] (default {DEFAULT_LISTEN})"
    )
    p.add_argument("--ws-auth", help="capability-token | signed-bearer-token")
    p.add_argument("--ws-token-file", help="absolute path of a file holding the bearer token")
    p.add_argument("--ws-token-sha256", help="hex SHA-256 of the bearer token")
    p.add_argument(
        "--ws-shared-secret-file", help="absolute path of the HS256 secret (>= 32 bytes)"
    )
    p.add_argument("--ws-issuer")
    p.add_argument("--ws-audience")
    p.add_argument("--ws-max-clock-skew-seconds")
    p.add_argument("--max-frame-bytes", type=int, default=DEFAULT_MAX_FRAME)
    p.add_argument("--ping-interval", type=float, default=30.0)
    p.add_argument("--ping-timeout", type=float, default=60.0)
    p.add_argument(
        "--max-queue", type=int, default=32, help="inputs that may wait per conversation"
    )
    p.add_argument(
        "--max-connections-per-ip", type=int, default=64,
        help="open websocket connections one client address may hold",
    )
    p.add_argument("--cwd", help="working directory for runtimes that name none (default: here)")
    p.add_argument(
        "--idle-release-after", type=float, default=60.0, metavar="SECONDS",
        help="release a conversation's runtime this long after it went idle with no client "
        "(rebuilt from disk when asked for again; default 60)",
    )
    p.add_argument(
        "--store", metavar="URL",
        help="keep agents, conversations, transcripts, the input queue, idempotency keys, "
        "effect checkpoints, schedules, secrets, reflection settings and memory repositories "
        "in PostgreSQL (postgresql://…; needs pip install 'tether[postgres]') so several "
        "servers, each with a TETHER_HOME of its own, share them (subagents too: they run "
        "as tether -p --store); settings and trusted folders stay per machine (default: the "
        "local store)",
    )
    p.add_argument(
        "--lease-ttl", type=float, default=15.0, metavar="SECONDS",
        help="with --store: how long a worker that stops renewing (paused, cut off) keeps its "
        "conversations before another worker takes them (default 15)",
    )
    p.add_argument(
        "--log-format", choices=("text", "json"), default="text",
        help="json: structured logs, one JSON object per line on stderr",
    )
    p.add_argument(
        "--openai-api",
        action="store_true",
        help="also serve /v1/models, /v1/chat/completions, /v1/responses (model = agent id)",
    )
    return p


def options_from_argv(argv: Sequence[str]) -> ServerOptions:
    """The server's options from its command line; UsageError naming a bad flag."""
    ns = _parser().parse_args(list(argv))
    for flag, value in (("--max-frame-bytes", ns.max_frame_bytes), ("--max-queue", ns.max_queue),
                        ("--max-connections-per-ip", ns.max_connections_per_ip)):
        if value <= 0:
            raise UsageError(f"{flag} must be a positive integer")
    if not ns.idle_release_after >= 0:  # NaN too
        raise UsageError(f"--idle-release-after must be 0 or more seconds, not {ns.idle_release_after}")
    policy = auth.policy_from_flags(
        auth.AuthFlags(
            ns.ws_auth,
            ns.ws_token_file,
            ns.ws_token_sha256,
            ns.ws_shared_secret_file,
            ns.ws_issuer,
            ns.ws_audience,
            ns.ws_max_clock_skew_seconds,
        )
    )
    if ns.cwd:
        from tether.server.runtime_start import check_cwd

        cwd: Path | None = check_cwd(ns.cwd, Path.cwd())
    else:
        cwd = None
    if not ns.lease_ttl > 0:
        raise UsageError(f"--lease-ttl must be more than 0 seconds, not {ns.lease_ttl}")
    if ns.store is not None:
        from tether.runtime.session.pg_store import check_store_url

        check_store_url(ns.store)
    options = ServerOptions(
        ns.listen,
        policy,
        ns.max_frame_bytes,
        ns.ping_interval,
        ns.ping_timeout,
        ns.max_queue,
        cwd,
        ns.openai_api,
        ns.max_connections_per_ip,
        ns.idle_release_after,
        ns.store,
        ns.log_format,
        ns.lease_ttl,
    )
    host, _port, _path = parse_listen_url(options.listen)
    auth.check_listen(host, options.policy)  # non-loopback needs auth: refused before binding
    return options


def run_server_command(argv: Sequence[str]) -> int:
    try:
        return run_server(options_from_argv(argv))
    except TetherError as exc:
        sys.stderr.write(f"Error: {exc}\n")
        return 1
