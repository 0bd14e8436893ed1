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
