"""System prompt compilation (pure): the agent's system text plus the session's environment."""

from __future__ import annotations

DEFAULT_SYSTEM = """You are tether, a coding agent working in the user's project through tools.
Work the problem the user gives you: read before you change, make the smallest correct change,
run the project's checks when you can, and say briefly what you did and what remains.
Use the tools for every file and shell action; never claim an action you did not take.
Paths are relative to the working directory unless absolute."""


def compile_system_prompt(agent_system: str, *, cwd: str, platform: str, date: str) -> str:
    """Kept lean on purpose: small local models pay ~5 ms per prompt token on this hardware."""
    base = agent_system.strip() or DEFAULT_SYSTEM
    return f"{base}\n\n<env>\nWorking directory: {cwd}\nPlatform: {platform}\nToday's date: {date}\n</env>"


# The presets `--system` takes: tether's own names, and the ones the Letta Code SDK sends
# (`systemPrompt: "default" | "letta-claude" | "letta-codex" | "letta-gemini" | "claude" |
# "codex" | "gemini"`). The family presets are the harness prompts of those model families: the
# same work rules, told in the tool vocabulary that family's models were trained on (the
# toolsets of `--toolset`); the `letta-*` ones add the agent's persistent memory, the bare ones
# leave memory unmentioned (the vendor harnesses have none).
_FAMILY_TOOLS = {
    "claude": "Use Bash for shell commands, Read before you Edit or Write a file, Grep and Glob "
              "to search, and TodoWrite to track multi-step work.",
    "codex": "Run shell commands with exec_command (write_stdin drives one still running), "
             "change files with ApplyPatch (apply_patch) in its patch format, and keep UpdatePlan "
             "current on multi-step work.",
    "gemini": "Use run_shell_command for shell commands, read_file before replace or "
              "write_file, search_file_content and glob to search, and write_todos to track "
              "multi-step work.",
}
_MEMORY = ("You keep a persistent memory across conversations: record what you learn about the "
           "user and the project in your memory blocks with the memory tools, and keep it "
           "current.")
BLANK_SYSTEM = "You are a helpful assistant with tools."
SYSTEM_PRESETS = ("default", "letta-code", "tether", "blank", "letta-claude", "letta-codex",
                  "letta-gemini", "claude", "codex", "gemini")


def preset_system(preset: str) -> str | None:
    """The system text of a `--system` preset; None for the ones that mean tether's default
    (`default`, `tether`, `letta-code`). An unknown name is a ValueError naming the valid ones."""
    if preset in ("default", "tether", "letta-code"):
        return None
    if preset == "blank":
        return BLANK_SYSTEM
    family = preset.removeprefix("letta-")
    if family not in _FAMILY_TOOLS:
        raise ValueError(f"unknown system prompt preset {preset!r}; choose one of: "
                         f"{', '.join(SYSTEM_PRESETS)}")
    memory = f"\n{_MEMORY}" if preset.startswith("letta-") else ""
    return f"{DEFAULT_SYSTEM}\n{_FAMILY_TOOLS[family]}{memory}"
