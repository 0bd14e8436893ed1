"""The `Skill` tool: load one skill's instructions by name (§6.2: `skill*`).

The system prompt lists the skills (`<available_skills>`, names and descriptions only); this
tool returns the chosen one's `SKILL.md` body, wrapped in a tag naming it so the model can see
which skills it already loaded. A skill folder with more files than `SKILL.md` gets its path,
and `<SKILL_DIR>` in the body is replaced by it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from tether.core.tools import Effect, ToolResult, ToolRunContext
from tether.tools.output import error_result


@dataclass(frozen=True, slots=True)
class LoadedSkill:
    name: str
    body: str  # SKILL.md without its frontmatter
    directory: Path | None = None  # set when the folder holds more than SKILL.md


class SkillLoader(Protocol):
    """Where skills come from (`tether.runtime.extensions.skills.SkillCatalog`)."""

    def load(self, name: str) -> LoadedSkill | None: ...

    def names(self) -> list[str]: ...

SKILL_DESCRIPTION = """\
Load a skill: instructions for a kind of task, listed in <available_skills> in your system \
prompt. When a task matches a skill's description, call this with the skill's name before \
starting, then follow the instructions it returns. Do not load a skill that is already loaded \
in this conversation."""

SKILL_PARAMETERS: dict[str, Any] = {
    "type": "object",
    "properties": {
        "skill": {"type": "string", "description": "The skill's name, as listed"},
        "args": {"type": "string", "description": "Optional arguments for the skill"},
    },
    "required": ["skill"],
    "additionalProperties": False,
}


class SkillTool:
    name = "Skill"
    description = SKILL_DESCRIPTION
    parameters = SKILL_PARAMETERS
    effect = Effect.READ

    def __init__(self, catalog: SkillLoader) -> None:
        self.catalog = catalog

    def paths(self, args: Mapping[str, Any], cwd: Path) -> list[Path]:
        return []

    async def run(self, args: Mapping[str, Any], ctx: ToolRunContext) -> ToolResult:
        name = args.get("skill")
        if not isinstance(name, str) or not name.strip():
            return error_result("Skill: 'skill' must be the non-empty name of a listed skill")
        name = name.strip()
        skill = await asyncio.to_thread(self.catalog.load, name)
        if skill is None:
            known = ", ".join(await asyncio.to_thread(self.catalog.names)) or "none"
            return error_result(
                f'Skill "{name}" not found. Available skills: {known}. Use a name from '
                "<available_skills>."
            )
        body, header = skill.body, ""
        if skill.directory is not None:
            body = body.replace("<SKILL_DIR>", str(skill.directory))
            header = f"Skill directory: {skill.directory}\n\n"
        extra = args.get("args")
        if isinstance(extra, str) and extra.strip():
            header += f"Arguments: {extra.strip()}\n\n"
        return ToolResult(f"<{skill.name}>\n{header}{body}\n</{skill.name}>")
