"""The main run's flag catalogue (reference §1.2): parsing, validation and conflicts.

Every malformed flag is a `UsageError` naming the flag; unknown options are errors (exit 1).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass

from tether.core.prompt import SYSTEM_PRESETS  # the presets and their texts live there
from tether.errors import UsageError
from tether.runtime.session.flags import RunFlags

OUTPUT_FORMATS = ("text", "json", "stream-json")
REFLECTION_TRIGGERS = ("off", "step-count", "compaction-event")
MEMFS_STARTUP = ("blocking", "background", "skip")
SKILL_SOURCES = ("all", "bundled", "global", "agent", "project")


@dataclass(slots=True)
class CommandLineFlags(RunFlags):
    """The run's choices as the command line gave them, with what only a command-line run has:
    `--store` (a headless run's agents, conversations and transcripts on the PostgreSQL store
    of a fleet, `cli/headless.py`; None: TETHER_HOME's files)."""

    store: str | None = None


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(f"{message} (see `tether --help`)")


def _parser() -> _Parser:
    p = _Parser(prog="tether", add_help=True, allow_abbrev=False)
    p.add_argument("prompt_words", nargs="*")
    p.add_argument(
        "-p", "--prompt", action="store_true", help="run headless: one turn loop, then exit"
    )
    p.add_argument(
        "-m", "--model", help="model handle, e.g. anthropic/claude-opus-4-8, openai/gpt-5.5"
    )
    p.add_argument("-a", "--agent", help="agent id")
    p.add_argument("--new-agent", action="store_true")
    p.add_argument("-C", "--conversation", "--conv", dest="conversation")
    p.add_argument("--new", action="store_true", dest="new_conversation")
    p.add_argument("-r", "--resume", action="store_true")
    p.add_argument("-c", "--continue", action="store_true", dest="continue_last")
    p.add_argument("--max-turns")
    p.add_argument("--output-format", default="text")
    p.add_argument("--input-format")
    p.add_argument("--include-partial-messages", action="store_true")
    p.add_argument("--permission-mode")
    p.add_argument("--yolo", action="store_true")
    p.add_argument("--trust", action="store_true")
    p.add_argument("-s", "--system")
    p.add_argument("--system-custom")
    p.add_argument("--system-append")
    p.add_argument(
        "--allowedTools", "--allowed-tools", dest="allowed_tools", action="append", default=[]
    )
    p.add_argument(
        "--disallowedTools",
        "--disallowed-tools",
        dest="disallowed_tools",
        action="append",
        default=[],
    )
    # Accepted for Letta Code SDK compatibility; validated, used by later subsystems.
    p.add_argument("--init-blocks")
    p.add_argument("--memory-blocks")
    p.add_argument("--block-value", action="append", default=[])
    p.add_argument("--reflection-behavior")
    p.add_argument("--reflection-trigger")
    p.add_argument("--reflection-step-count")
    p.add_argument("--memfs-startup")
    p.add_argument("--skill-sources")
    p.add_argument("--no-skills", action="store_true")
    p.add_argument("--skills", dest="skills_dir")
    p.add_argument("--no-bundled-skills", action="store_true")
    p.add_argument("--memfs", action="store_true")  # local memory is always on
    p.add_argument("--no-memfs", action="store_true")  # ignored, as in the reference
    p.add_argument("--tags")
    p.add_argument("--tools", help='comma list of the tools to offer ("" for none)')
    p.add_argument("--toolset", default="auto", help="auto | default | codex | codex_snake | gemini")
    p.add_argument("--base-tools", help="comma list of built-in tools offered instead of the toolset's")
    p.add_argument("--no-mods", action="store_true", help="load no mods this run")
    p.add_argument("--no-system-info-reminder", action="store_true")  # tether sends none
    p.add_argument("--embedding")  # accepted: the local backend embeds nothing (no archival search)
    p.add_argument("--mcp-config", action="append", default=[], metavar="FILE|JSON",
                   help='MCP servers to start: a file or inline JSON {"mcpServers": {...}}; repeatable')
    p.add_argument("--strict-mcp-config", action="store_true",
                   help="start only the MCP servers of --mcp-config, none from settings or .mcp.json")
    p.add_argument("--backend", help="local | cloud (a Letta server; `api` is the same); "
                   "default: `tether backend`'s saved choice, else local")
    p.add_argument("--store", help="postgresql://… : run headless on a fleet's PostgreSQL store")
    from tether.cli.help_text import apply_help  # every option's words and the examples

    apply_help(p)
    return p


def parse_run_flags(
    argv: Sequence[str], *, stdin_is_tty: bool | None = None
) -> CommandLineFlags:
    ns = _parser().parse_intermixed_args(list(argv))
    if stdin_is_tty is None:
        stdin_is_tty = sys.stdin is not None and sys.stdin.isatty()
    words = " ".join(ns.prompt_words).strip()
    headless = bool(ns.prompt) or (not words and not stdin_is_tty) or ns.input_format is not None
    flags = CommandLineFlags(headless=headless, prompt=words or None)
    flags.model = ns.model
    flags.agent = ns.agent
    flags.new_agent = ns.new_agent
    flags.conversation = ns.conversation
    if ns.conversation and ns.conversation.startswith("agent-") and not ns.agent:
        # `--conversation agent-…` is shorthand for `--agent agent-… --conversation default`
        flags.agent, flags.conversation = ns.conversation, "default"
    if ns.agent and ns.agent.startswith("local-conv-") and ns.conversation in (None, "default"):
        # the Letta Code SDK's resumeSession(id) sends a non-`conv-` id as --agent ID
        flags.agent, flags.conversation = None, ns.agent
    flags.new_conversation = ns.new_conversation
    flags.resume = ns.resume
    flags.continue_last = ns.continue_last
    flags.max_turns = _positive_int("--max-turns", ns.max_turns)
    flags.output_format = _choice("--output-format", ns.output_format, OUTPUT_FORMATS)
    if ns.input_format is not None:
        flags.input_format = _choice("--input-format", ns.input_format, ("stream-json",))
        if flags.output_format != "stream-json":
            raise UsageError("--input-format stream-json requires --output-format stream-json")
    flags.include_partial = ns.include_partial_messages
    flags.permission_mode = _permission_mode(ns.permission_mode, ns.yolo)
    flags.permission_mode_given = bool(
        ns.yolo or ns.permission_mode is not None or os.environ.get("TETHER_PERMISSION_MODE")
    )
    flags.trust = ns.trust
    flags.no_mods = ns.no_mods
    if ns.system is not None:
        flags.system_preset = _choice("--system", ns.system, SYSTEM_PRESETS)
    if ns.system is not None and ns.system_custom is not None:
        raise UsageError("--system and --system-custom are mutually exclusive")
    flags.system_custom = ns.system_custom
    if flags.system_preset is not None:  # the preset's text, for a local agent and a server one
        from tether.core.prompt import preset_system

        flags.system_custom = preset_system(flags.system_preset)
    flags.system_append = ns.system_append
    flags.allowed_tools = _tool_list("--allowedTools", ns.allowed_tools)
    flags.disallowed_tools = _tool_list("--disallowedTools", ns.disallowed_tools)
    flags.tags = [t.strip() for t in (ns.tags or "").split(",") if t.strip()]
    if ns.tools is not None:
        flags.tools = [t.strip() for t in ns.tools.split(",") if t.strip()]
    from tether.tools.toolsets import TOOLSET_CHOICES, parse_base_tools

    flags.toolset = _choice("--toolset", ns.toolset, TOOLSET_CHOICES)
    flags.base_tools = parse_base_tools(ns.base_tools, flags.tools)
    _validate_compat(ns)
    from tether.runtime.session.initial_blocks import initial_blocks

    initial_blocks(ns.init_blocks, ns.memory_blocks, ns.block_value)  # a bad one is an error now
    flags.init_blocks, flags.memory_blocks = ns.init_blocks, ns.memory_blocks
    flags.block_values = list(ns.block_value)
    flags.reflection_trigger = ns.reflection_trigger
    flags.reflection_step_count = _positive_int("--reflection-step-count", ns.reflection_step_count)
    flags.skills_dir = ns.skills_dir
    if ns.skill_sources is not None:
        flags.skill_sources = [s.strip() for s in ns.skill_sources.split(",") if s.strip()]
    flags.no_skills = ns.no_skills
    flags.no_bundled_skills = ns.no_bundled_skills
    flags.mcp_config = list(ns.mcp_config)
    flags.strict_mcp_config = ns.strict_mcp_config
    if flags.strict_mcp_config and not flags.mcp_config:
        raise UsageError("--strict-mcp-config needs at least one --mcp-config")
    if ns.backend is not None:
        from tether.runtime.session.backend_choice import parse_backend

        flags.backend = parse_backend(ns.backend)
    if ns.store is not None:
        from tether.runtime.session.pg_store import check_store_url  # psycopg only with --store

        flags.store = check_store_url(ns.store)
        # agents on the store are local ones: a saved `tether backend cloud` does not apply
        flags.backend = flags.backend or "local"
    _check_conflicts(flags)
    _check_store_conflicts(flags)
    return flags


def _permission_mode(value: str | None, yolo: bool) -> str:
    from tether.core.permissions import normalize_mode

    if yolo:
        if value is not None and normalize_mode(value) != "unrestricted":
            raise UsageError("--yolo conflicts with --permission-mode " + value)
        return "unrestricted"
    if value is None:
        value = os.environ.get("TETHER_PERMISSION_MODE") or "standard"
    return normalize_mode(value)


def _tool_list(flag: str, values: list[str]) -> list[str]:
    """Rule lists (`Bash(git diff:*),Read`): commas and spaces separate, parentheses protect."""
    from tether.core.permissions.rules import parse_rule, split_rule_list

    out: list[str] = []
    for value in values:
        try:
            for text in split_rule_list(value):
                parse_rule(text)  # a malformed rule fails here, naming itself
                out.append(text)
        except UsageError as exc:
            raise UsageError(f"{flag}: {exc}") from None
    return out


def _validate_compat(ns: argparse.Namespace) -> None:
    if ns.reflection_trigger is not None:
        _choice("--reflection-trigger", ns.reflection_trigger, REFLECTION_TRIGGERS)
    if ns.reflection_behavior is not None:
        _choice("--reflection-behavior", ns.reflection_behavior, ("reminder", "auto-launch"))
    if ns.reflection_step_count is not None:
        _positive_int("--reflection-step-count", ns.reflection_step_count)
    if ns.memfs_startup is not None:
        _choice("--memfs-startup", ns.memfs_startup, MEMFS_STARTUP)
    if ns.skill_sources is not None:
        for source in ns.skill_sources.split(","):
            _choice("--skill-sources", source.strip(), SKILL_SOURCES)
    for item in ns.block_value:
        if "=" not in item:
            raise UsageError(f"--block-value {item!r}: expected LABEL=VALUE")


def _check_conflicts(f: RunFlags) -> None:
    conv = f.conversation
    if conv is not None and conv != "default" and (f.agent or f.new_agent):
        raise UsageError("--conversation <id> cannot be combined with --agent or --new-agent")
    if conv == "default" and not f.agent:
        raise UsageError("--conversation default needs --agent <id>")
    if f.new_conversation and conv is not None:
        raise UsageError("--new cannot be combined with --conversation")
    if f.resume and f.headless:
        raise UsageError("--resume is interactive only; headless runs take --conversation <id>")
    if f.resume and (f.new_conversation or f.new_agent or (conv is not None and conv != "default")):
        raise UsageError("--resume cannot be combined with --new, --new-agent or --conversation <id>")
    if f.continue_last and (f.resume or f.new_conversation or f.new_agent or f.agent or conv):
        raise UsageError("-c/--continue cannot be combined with --resume, --new, --new-agent, "
                         "--agent or --conversation")
    if f.agent and f.new_agent:
        raise UsageError("--agent cannot be combined with --new-agent")


def _check_store_conflicts(f: CommandLineFlags) -> None:
    """`--store` runs one headless run on the fleet's store; what reads this machine's own
    records or another backend cannot go with it."""
    if f.store is None:
        return
    if not f.headless:
        raise UsageError("--store runs headless only: add -p (the interactive view uses "
                         "TETHER_HOME's conversations)")
    if f.continue_last:
        raise UsageError("-c/--continue cannot be combined with --store (it looks in this "
                         "machine's TETHER_HOME); pass --conversation <id>")
    if f.backend == "cloud":
        raise UsageError("--store cannot be combined with --backend cloud: a cloud agent lives "
                         "on its Letta server, not in the PostgreSQL store")


def _choice(flag: str, value: str, choices: Sequence[str]) -> str:
    if value not in choices:
        raise UsageError(f"{flag} {value!r} is not valid; choose one of: {', '.join(choices)}")
    return value


def _positive_int(flag: str, value: str | None) -> int | None:
    if value is None:
        return None
    try:
        n = int(value)
    except ValueError:
        raise UsageError(f"{flag} expects a positive integer, got {value!r}") from None
    if n <= 0:
        raise UsageError(f"{flag} expects a positive integer, got {value!r}")
    return n
