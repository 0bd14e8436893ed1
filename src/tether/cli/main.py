"""The `tether` console script: fast paths first, subcommands before any bootstrap, then a run.

Nothing heavy is imported here: `tether --version` must cost little more than `python -c pass`.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence

SUBCOMMANDS = ("version", "agents", "messages", "connect", "models", "sandbox")


def entry() -> None:
    from tether.cli import gc_policy

    gc_policy.starting()
    try:
        code = main(sys.argv[1:])
    finally:
        gc_policy.exiting()
    sys.exit(code)


def main(argv: Sequence[str]) -> int:
    argv = list(argv)
    if argv in (["--version"], ["-v"], ["version"]):
        from tether import __version__

        _write(f"{__version__} (tether)\n")
        return 0
    if argv and argv[0] == "compact":
        from tether.cli.compact_cmd import run_compact

        return run_compact(argv[1:])
    if argv and argv[0] == "trust":
        from tether.cli.trust import run_trust

        return run_trust(argv[1:])
    if argv and argv[0] == "dream":
        from tether.cli.dream_cmd import run_dream

        return run_dream(argv[1:])
    if argv and argv[0] == "server":
        from tether.server.app_server import run_server_command

        return run_server_command(argv[1:])
    if argv and argv[0] in ("memory", "memfs"):
        from tether.cli.memory_cmd import run_memory

        return run_memory(argv[1:])
    if argv and argv[0] == "mcp":
        from tether.cli.mcp_cmd import run_mcp

        return run_mcp(argv[1:])
    if argv and argv[0] in ("mods", "hooks"):
        from tether.cli.mods_cmd import run_mods_command

        return run_mods_command(argv[0], argv[1:])
    if argv and argv[0] in SUBCOMMANDS:
        from tether.cli.commands import run_subcommand

        return run_subcommand(argv[0], argv[1:])

    from tether.cli.flags import parse_run_flags
    from tether.errors import UsageError

    try:
        flags = parse_run_flags(argv)
    except UsageError as exc:
        sys.stderr.write(f"Error: {exc}\n")
        return 1
    if flags.headless:
        from tether.cli.headless import run_headless

        return run_headless(flags)
    from tether.tui.app import run_tui

    return run_tui(flags)


def _write(text: str) -> None:
    sys.stdout.write(text)
    sys.stdout.flush()
