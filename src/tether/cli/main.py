"""The `tether` console script: one table of subcommands, dispatched before any bootstrap, then a run.

Nothing heavy is imported here: `tether --version` must cost little more than `python -c pass`,
so the table names each handler as "module:function" text and imports it only when chosen.
A first word that names a subcommand tether lacks, or is a near miss of one it has, exits 2
before anything is created: a typo never reaches the model as a prompt (`tether -- words` does).
"""

from __future__ import annotations

import sys

# (name, aliases, "module:function", passes the name, one-line summary). The handler is called
# as fn(argv) or, with "passes the name", fn(name, argv). `tether --help` lists these lines.
COMMANDS: tuple[tuple[str, tuple[str, ...], str, bool, str], ...] = (
    ("agents", (), "tether.cli.agents_cmd:run_agents", False,
     "list, create and configure agents (JSON)"),
    ("backend", (), "tether.cli.backend_cmd:run_backend", False,
     "show or save the default backend (local, or cloud: a Letta server)"),
    ("channel-gateway", (), "tether.channels.gateway:run_channel_gateway", False,
     "run the chat-channel gateway against an App Server"),
    ("channels", (), "tether.cli.channels_cmd:run_channels", False,
     "install, configure, pair and route chat channels (telegram, slack, webhook, custom)"),
    ("compact", (), "tether.cli.compact_cmd:run_compact", False,
     "summarise a conversation's older history now"),
    ("completion", (), "tether.cli.completion:run_completion", False,
     "print a shell completion script (bash, zsh or fish)"),
    ("connect", (), "tether.cli.commands:run_subcommand", True,
     "store a provider's API key or base URL"),
    ("cron", (), "tether.cli.cron_cmd:run_cron", False,
     "schedule prompts for agents (add, list, get, runs, delete)"),
    ("dream", (), "tether.cli.dream_cmd:run_dream", False,
     "run one reflection pass over an agent's memory and wait"),
    ("hooks", (), "tether.cli.mods_cmd:run_mods_command", True, "list the configured hooks"),
    ("install", (), "tether.cli.skills_cmd:run_install", False,
     "install a skill (a folder or git:<url>) into an agent's memory"),
    ("mcp", (), "tether.cli.mcp_cmd:run_mcp", False, "add, list and remove MCP servers"),
    ("memory", ("memfs",), "tether.cli.memory_cmd:run_memory", False,
     "an agent's memory repository (status, diff, log, export, backup, restore, resolve, tokens)"),
    ("messages", (), "tether.cli.messages_cmd:run_messages", False,
     "list, search or transcribe a conversation's messages (JSON)"),
    ("models", (), "tether.cli.commands:run_subcommand", True,
     "list the models of the configured providers (JSON)"),
    ("mods", (), "tether.cli.mods_cmd:run_mods_command", True,
     "list, enable, disable or remove mods"),
    ("sandbox", (), "tether.cli.commands:run_subcommand", True,
     "show which kernel sandbox shell commands run in"),
    ("server", (), "tether.cli.server_cmd:run_server_command", False,
     "run the App Server (websocket, optional OpenAI-compatible API)"),
    ("skills", (), "tether.cli.skills_cmd:run_skills", False,
     "list, install and delete skills (JSON)"),
    ("store", (), "tether.cli.store_cmd:run_store", False,
     "copy a TETHER_HOME to a PostgreSQL store and back, verified (migrate), or show one (status)"),
    ("trust", (), "tether.cli.trust:run_trust", False,
     "let a folder's project settings (rules, hooks, mods) apply"),
    ("update", ("upgrade",), "tether.cli.update_cmd:run_update", False,
     "update tether to the latest release"),
    ("version", (), "tether.cli.commands:run_subcommand", True, "print the version"),
)

# Subcommands of the reference (Letta Code) that tether does not have: named, they are refused
# with "unknown command" rather than sent to the model as a prompt, and near misses of them
# ("skils") are refused like near misses of tether's own.
REFERENCE_ONLY = (
    "environments", "envs", "teleport", "setup", "shared-memory",
    "local-backend", "trajectories", "remote", "app-server",
)
# Those a typo is taken for; not `remote` or `envs`, whose near misses are words ("remove").
NEAR_MISS_REFERENCE = tuple(n for n in REFERENCE_ONLY if n not in ("remote", "envs"))
NOT_AVAILABLE = 2  # exit code: unknown command, or one this build does not ship
NO_TERMINAL = 2  # exit code: the interactive app was asked for with no terminal to draw on


def entry() -> None:
    from tether.runtime.session import gc_policy

    gc_policy.starting()
    try:
        code = main(sys.argv[1:])
    finally:
        gc_policy.exiting()
    sys.exit(code)


def main(argv: list[str] | tuple[str, ...]) -> int:
    argv = list(argv)
    if argv in (["--version"], ["-v"], ["version"]):
        from tether import __version__

        _write(f"{__version__} (tether)\n")
        return 0
    if argv == ["help"] or (len(argv) == 2 and argv[0] == "help" and find_command(argv[1])):
        return main([*argv[1:], "--help"])  # `tether help [sub]`, as gh and git take it
    command = find_command(argv[0]) if argv else None
    if command is not None:
        return _dispatch(command, argv[1:])
    if argv and not argv[0].startswith("-"):
        refused = _refuse_near_miss(argv[0])
        if refused is not None:
            return refused

    from tether.cli.flags import parse_run_flags
    from tether.errors import TetherError, UsageError

    try:
        flags = parse_run_flags(argv)
    except UsageError as exc:
        sys.stderr.write(f"Error: {exc}\n")
        return 1
    if not flags.headless and not _have_terminal():
        return _refuse_without_terminal(flags.prompt)
    if flags.continue_last:
        from tether.cli.runner import apply_continue

        try:
            apply_continue(flags)
        except (TetherError, OSError) as exc:
            sys.stderr.write(f"Error: {exc}\n")
            return 1
    if flags.headless:
        from tether.cli.headless import run_headless

        return run_headless(flags)
    from tether.tui.app import run_tui

    return run_tui(flags)


def find_command(word: str) -> tuple[str, tuple[str, ...], str, bool, str] | None:
    for command in COMMANDS:
        if word == command[0] or word in command[1]:
            return command
    return None


def command_names() -> list[str]:
    """Every name and alias the table answers to (completion and help read this)."""
    return [n for c in COMMANDS for n in (c[0], *c[1])]


def _dispatch(command: tuple[str, tuple[str, ...], str, bool, str], rest: list[str]) -> int:
    name, _aliases, target, passes_name, summary = command
    module_name, _, function = target.partition(":")
    try:
        module = __import__(module_name, fromlist=[function])
    except ModuleNotFoundError as exc:
        # Only the handler's own module (or its package) missing means "not in this build"; a
        # missing dependency inside it is a real error and is raised as one.
        if exc.name is None or not (module_name + ".").startswith(exc.name + "."):
            raise
        module = None
    handler = getattr(module, function, None)
    if handler is None:
        sys.stderr.write(f"tether {name} is not available in this build\n")
        return NOT_AVAILABLE
    if name == "version" and rest in (["--help"], ["-h"]):
        _write(f"usage: tether version\n\n{summary}\n")
        return 0
    # `mods`/`hooks` and the small JSON subcommands share a handler that takes the name.
    return int(handler(name, rest) if passes_name else handler(rest))


def _have_terminal() -> bool:
    """The full-screen app reads keys from stdin and draws on stdout: both must be terminals."""
    return all(stream is not None and stream.isatty() for stream in (sys.stdin, sys.stdout))


def _refuse_without_terminal(words: str | None) -> int:
    """Never draw the full-screen app into a pipe, nor send its words anywhere: say what to do."""
    example = f"tether -p {_shell_quote(words)}" if words else 'tether -p "…"'
    sys.stderr.write(
        f"tether: no terminal; use `{example}` or pipe a prompt on stdin "
        "(`echo \"…\" | tether`)\n"
    )
    return NO_TERMINAL


def _shell_quote(text: str) -> str:
    import shlex

    return shlex.quote(text if len(text) <= 60 else text[:57] + "...")


def _refuse_near_miss(word: str) -> int | None:
    """Exit 2 for a subcommand of the reference that tether lacks, or a near miss of a command
    either has (`skils`: the reference's `skills`)."""
    lowered = word.lower()
    if lowered in REFERENCE_ONLY:
        sys.stderr.write(
            f"tether: unknown command {word!r}: tether has no `{lowered}` command (Letta Code does).\n"
            "Run `tether --help` for the commands; `tether -- WORDS` sends WORDS as a prompt.\n"
        )
        return NOT_AVAILABLE
    if not all(c.isalpha() or c == "-" for c in lowered) or len(lowered) < 3:
        return None
    # Within 2 edits (1 for words of four letters or fewer, so "run" or "test" starting a prompt
    # is not taken for `cron` or `trust`).
    limit = 2 if len(lowered) > 4 else 1
    scored = sorted(
        (d, name)
        for name in (*command_names(), *NEAR_MISS_REFERENCE)
        if (d := _edit_distance(lowered, name)) <= limit
    )
    if not scored:
        return None
    best = scored[0][0]
    guesses = " or ".join(repr(name) for d, name in scored if d == best)
    sys.stderr.write(
        f"tether: unknown command {word!r}; did you mean {guesses}?\n"
        "Run `tether --help` for the commands; `tether -- WORDS` sends WORDS as a prompt.\n"
    )
    return NOT_AVAILABLE


def _edit_distance(a: str, b: str) -> int:
    """Levenshtein distance with adjacent transpositions counted as one edit."""
    prev2: list[int] = []
    prev = list(range(len(b) + 1))
    for i in range(1, len(a) + 1):
        row = [i] + [0] * len(b)
        for j in range(1, len(b) + 1):
            cost = 0 if a[i - 1] == b[j - 1] else 1
            row[j] = min(prev[j] + 1, row[j - 1] + 1, prev[j - 1] + cost)
            if i > 1 and j > 1 and a[i - 1] == b[j - 2] and a[i - 2] == b[j - 1]:
                row[j] = min(row[j], prev2[j - 2] + 1)
        prev2, prev = prev, row
    return prev[len(b)]


def _write(text: str) -> None:
    sys.stdout.write(text)
    sys.stdout.flush()
