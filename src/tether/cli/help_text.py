"""What `tether --help` says: every run option's help text, the sections, the examples.

`apply_help(parser)` dresses the run parser of `cli/flags.py` with this table, so the flags
stay defined in one place and the words live here. Texts say what an option does for a user,
with its values and default; no spec section numbers.
"""

from __future__ import annotations

import argparse

USAGE = "tether [options] [PROMPT...]\n       tether <command> [args]   (tether <command> --help)"

DESCRIPTION = """\
tether is a coding agent for your terminal. With no prompt it opens the interactive view in
this folder; with -p (or input piped in) it runs one headless turn loop and exits 0 on success,
1 on an error, 130 when interrupted."""

# dest of the run parser's action -> (section, help). Keyed by dest so an option's spellings
# (`--conversation`, `--conv`, `-C`) share one text.
OPTION_HELP: dict[str, tuple[str, str]] = {
    "help": ("general", "show this help and exit"),
    "prompt_words": ("general", "the first prompt of the interactive view (which needs a "
                     "terminal; -p runs it headless); words are joined by spaces (use `--` "
                     "before words that look like options or a command)"),
    "prompt": ("general", "run headless: one turn loop on PROMPT (or stdin), print, exit"),
    "model": ("model and agent", "model handle PROVIDER/MODEL, e.g. anthropic/claude-opus-4-8, "
              "openai/gpt-5.5, ollama/qwen3 (`tether models` lists them); default: the agent's "
              "model, else the first provider with credentials"),
    "agent": ("model and agent", "the agent to run as (an id from `tether agents list`); "
              "default: the last agent used in this folder"),
    "new_agent": ("model and agent", "create a new agent for this run"),
    "conversation": ("model and agent", "continue conversation ID; `default` (with --agent) is "
                     "the agent's main history; an agent id means that agent's default "
                     "conversation"),
    "new_conversation": ("model and agent", "start a new conversation with the agent"),
    "resume": ("model and agent", "interactive only: reopen this agent's latest conversation"),
    "continue_last": ("model and agent", "continue the most recent conversation in this folder "
                      "(headless or interactive); an error when there is none"),
    "system": ("model and agent", "system prompt preset for a new agent: default (tether's own), "
               "blank, or a model family's (claude, codex, gemini; letta-claude, letta-codex, "
               "letta-gemini add persistent memory)"),
    "system_custom": ("model and agent", "a new agent's whole system prompt, as TEXT "
                      "(not with --system)"),
    "system_append": ("model and agent", "TEXT appended to the system prompt for this run"),
    "backend": ("model and agent", "where the agent runs: local (files under ~/.tether) or "
                "cloud (a Letta server; `api` is the same); default: `tether backend`'s saved "
                "choice, else local"),
    "store": ("model and agent", "headless only: keep this run's agents, conversations and "
              "transcript in the PostgreSQL store of a fleet (`tether server --store`) instead "
              "of TETHER_HOME; the conversation runs here only while no server worker runs it "
              "(its subagents use the same store)"),
    "max_turns": ("headless output", "stop after N model steps (a positive integer)"),
    "output_format": ("headless output", "text (default), json (one result object) or "
                      "stream-json (one JSON event a line, Letta Code's wire format)"),
    "input_format": ("headless output", "stream-json: read user messages and control requests "
                     "as JSON lines on stdin (needs --output-format stream-json)"),
    "include_partial_messages": ("headless output", "stream-json: also emit partial text and "
                                 "reasoning deltas as they arrive"),
    "permission_mode": ("permissions", "standard (default: reads run, writes and shell ask), "
                        "acceptEdits (file edits run), plan (reads only, until you approve "
                        "the plan the agent hands over with ExitPlanMode), strict (everything "
                        "asks), unrestricted (everything runs); env TETHER_PERMISSION_MODE"),
    "yolo": ("permissions", "same as --permission-mode unrestricted"),
    "trust": ("permissions", "apply this folder's project settings (rules, hooks, mods, MCP) "
              "for this run; see `tether trust` to trust it for good"),
    "allowed_tools": ("permissions", "allow rules, e.g. 'Bash(git diff:*),Read'; commas or "
                      "spaces separate; repeatable"),
    "disallowed_tools": ("permissions", "deny rules, same grammar as --allowedTools; a deny "
                         "always wins"),
    "toolset": ("tools and extensions", "which built-in tools, named as a model family was "
                "trained on: auto (default: codex for OpenAI models, else default), default, "
                "codex, codex_snake or gemini"),
    "base_tools": ("tools and extensions", "comma list of built-in tools offered instead of "
                   "the toolset's"),
    "tools": ("tools and extensions", 'comma list of the tools to offer the model ("" for '
              "none); default: all"),
    "no_mods": ("tools and extensions", "load no mods this run (also TETHER_DISABLE_MODS=1)"),
    "mcp_config": ("tools and extensions", 'MCP servers to start: a FILE or inline JSON '
                   '{"mcpServers": {...}}; repeatable'),
    "strict_mcp_config": ("tools and extensions", "start only the --mcp-config servers, none "
                          "from settings or .mcp.json"),
    "skills_dir": ("tools and extensions", "DIR holding this run's project skills "
                   "(default: .agents/skills and, when trusted, .tether/skills)"),
    "skill_sources": ("tools and extensions", "which skills to offer: all (default) or a comma "
                      "list of bundled, global, agent, project"),
    "no_skills": ("tools and extensions", "offer no skills"),
    "no_bundled_skills": ("tools and extensions", "leave out the skills shipped with tether"),
    "init_blocks": ("memory", "a new agent's memory blocks by label, e.g. persona,human "
                    "(\"\" for none)"),
    "memory_blocks": ("memory", "a new agent's memory blocks as JSON "
                      '[{"label": ..., "value": ..., "description": ...}]'),
    "block_value": ("memory", "LABEL=VALUE: a new agent's block text, e.g. persona=...; "
                    "repeatable"),
    "memfs": ("memory", "accepted for Letta Code compatibility (local memory is always a git "
              "repository)"),
    "no_memfs": ("memory", "accepted and ignored, as Letta Code does"),
    "memfs_startup": ("memory", "blocking, background or skip: accepted for Letta Code "
                      "compatibility (local memory needs no sync)"),
    "reflection_trigger": ("memory", "when the agent reflects on its memory: off, step-count "
                           "or compaction-event (saved per agent)"),
    "reflection_step_count": ("memory", "with step-count: reflect every N steps"),
    "reflection_behavior": ("memory", "reminder or auto-launch: accepted for Letta Code "
                            "compatibility (validated)"),
    "tags": ("memory", "comma list of tags for a new agent"),
    "no_system_info_reminder": ("model and agent", "accepted for Letta Code SDK compatibility "
                                "(tether sends no system-info reminder)"),
    "embedding": ("model and agent", "accepted for Letta Code SDK compatibility (the local "
                  "backend embeds nothing)"),
}

# dest -> the placeholder shown for its value (only where the option has none of its own)
METAVARS = {
    "model": "HANDLE", "agent": "ID", "conversation": "ID", "system": "PRESET",
    "system_custom": "TEXT", "system_append": "TEXT", "backend": "local|cloud", "store": "URL",
    "max_turns": "N",
    "output_format": "FORMAT", "input_format": "FORMAT", "permission_mode": "MODE",
    "allowed_tools": "RULES", "disallowed_tools": "RULES", "skill_sources": "SOURCES",
    "skills_dir": "DIR", "tools": "TOOLS", "init_blocks": "LABELS", "memory_blocks": "JSON",
    "block_value": "LABEL=VALUE", "reflection_behavior": "BEHAVIOR",
    "reflection_trigger": "TRIGGER", "reflection_step_count": "N", "memfs_startup": "WHEN",
    "tags": "TAGS", "toolset": "NAME", "base_tools": "TOOLS", "embedding": "HANDLE",
}

SECTIONS = (
    "general", "model and agent", "headless output", "permissions", "tools and extensions",
    "memory",
)

EXAMPLES = """\
examples:
  tether                                     open the interactive view in this folder
  tether -p "why does test_login fail?"      one headless answer, printed
  git diff | tether -p "review this diff"    the prompt from stdin
  tether -p --output-format stream-json "fix the lint errors" --allowedTools 'Bash(ruff:*),Edit'
  tether -m ollama/qwen3 -p "summarise README.md"
  tether -C conv-123 -p "and now the tests"  continue a conversation
  tether -p --store postgresql://db/tether -C local-conv-7 "go on"   on a fleet's store
  tether connect anthropic --api-key sk-...  store a key (or set ANTHROPIC_API_KEY)
  tether -- update the changelog             words that start like a command, as a prompt
  tether completion bash > ~/.local/share/bash-completion/completions/tether
"""


def commands_text() -> str:
    from tether.cli.main import COMMANDS

    lines = ["commands:"]
    for name, aliases, _target, _named, summary in COMMANDS:
        label = name + (f" ({', '.join(aliases)})" if aliases else "")
        lines.append(f"  {label:<22} {summary}")
    return "\n".join(lines)


def apply_help(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Give every run option its text, the usage line, the commands and examples; sort the
    options into sections only when help is printed (it costs ~1 ms a parse otherwise).

    Options another module added without an entry here keep their own help, under "other
    options" (tests/cli/test_dispatch.py fails until they get an entry)."""
    parser.usage = USAGE
    parser.description = DESCRIPTION
    parser.formatter_class = _Formatter
    for action in parser._actions:
        entry = OPTION_HELP.get(action.dest)
        if entry is not None:
            action.help = entry[1]
            if action.metavar is None and action.dest in METAVARS:
                action.metavar = METAVARS[action.dest]
    plain_format_help = parser.format_help

    def format_help() -> str:
        if parser.epilog is None:
            _sections(parser)
            parser.epilog = commands_text() + "\n\n" + EXAMPLES
        return plain_format_help()

    parser.format_help = format_help  # type: ignore[method-assign]
    return parser


def _sections(parser: argparse.ArgumentParser) -> None:
    groups = {name: parser.add_argument_group(name + " options") for name in SECTIONS}
    for action in list(parser._actions):
        entry = OPTION_HELP.get(action.dest)
        if entry is None:
            continue
        if action.dest == "prompt_words":
            action.metavar = "PROMPT"
            continue  # positionals stay where argparse shows them
        for container in (parser._optionals, parser._positionals):
            if action in container._group_actions:
                container._group_actions.remove(action)
        groups[entry[0]]._group_actions.append(action)
    parser._optionals.title = "other options"


class _Formatter(argparse.RawDescriptionHelpFormatter):
    """Keeps the description and epilog as written; wider option column than the default."""

    def __init__(self, prog: str) -> None:
        super().__init__(prog, max_help_position=34, width=100)
