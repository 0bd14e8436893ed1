"""Skills: `SKILL.md` folders the model can load by name, and where they are found (§1.2).

A skill is a folder holding `SKILL.md` (YAML frontmatter `name`, `description`; the body is the
instructions) and any files it refers to. Frontmatter of flat `key: value` lines is read
directly; anything else (`description: >-`, quoted or multi-line values, lists) is parsed with
PyYAML, imported only then so a plain start never pays its ~17 ms. Sources, highest precedence first when two share a
name:

    project   `--skills DIR` if given; else `.agents/skills/` and (trusted folders only)
              `.tether/skills/` in the working directory
    agent     `skills/<name>/SKILL.md` committed in the agent's memory (MemFS HEAD)
    global    `$TETHER_HOME/skills/`
    bundled   shipped with tether (`tether/runtime/extensions/bundled_skills/`)

`--skill-sources` picks sources (`all` = every one), `--no-bundled-skills` drops the bundled
ones, `--no-skills` turns skills off. Only names and descriptions reach the system prompt
(`<available_skills>`); the `Skill` tool returns a body when the model asks for it. The agent's
own skills are read from MemFS HEAD each time, so a skill committed mid-run is loadable at once.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from tether.memory import blocks
from tether.sandbox.armed import PROJECT_SKILL_FOLDERS
from tether.tools.skill import LoadedSkill

if TYPE_CHECKING:
    from tether.memory.memfs import MemFS

SOURCES = ("bundled", "global", "agent", "project")
SKILL_FILE = "SKILL.md"
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,63}$")
_PRECEDENCE = {"project": 0, "agent": 1, "global": 2, "bundled": 3}
_BODY_CAP = 100_000


@dataclass(frozen=True, slots=True)
class Skill:
    name: str
    description: str
    source: str  # one of SOURCES
    location: str  # a folder on disk, `bundled:<name>`, or `memory:skills/<name>`

    @property
    def directory(self) -> Path | None:
        """The skill's folder on disk (bundled ones too); None for skills in memory."""
        kind, _, rest = self.location.partition(":")
        if kind == "bundled":
            return _bundled_root() / rest
        return None if ":" in self.location.split("/", 1)[0] else Path(self.location)


def resolve_sources(
    *, skill_sources: Sequence[str] | None, no_skills: bool, no_bundled: bool
) -> frozenset[str]:
    """The enabled sources from the flags (`--skill-sources` already validated)."""
    if no_skills:
        return frozenset()
    chosen = set(SOURCES) if not skill_sources or "all" in skill_sources else set(skill_sources)
    if no_bundled:
        chosen.discard("bundled")
    return frozenset(chosen & set(SOURCES))


def parse_skill(text: str, fallback_name: str, source: str, location: str) -> Skill | str:
    """The skill, or why it was skipped."""
    meta = frontmatter(text)
    name = (meta.get("name") or fallback_name).strip()
    if not _NAME.match(name):
        return f"{location}: skill name {name!r} is not a simple name (letters, digits, . _ - :)"
    return Skill(name, blocks.one_line(meta.get("description", "")), source, location)


_FENCE = re.compile(r"\A---[ \t]*\r?\n(.*?)\r?\n---[ \t]*(?:\r?\n|\Z)", re.DOTALL)
_FLAT_LINE = re.compile(r"^([A-Za-z_][A-Za-z0-9_-]*):[ \t]+(\S.*?)[ \t]*$")
_YAML_STARTS = tuple(">|[{&*!'\"%@`#")  # a value starting so means more than its text


def frontmatter(text: str) -> dict[str, str]:
    """A SKILL.md's frontmatter as text values (lists joined with ", "); {} without one."""
    match = _FENCE.match(text)
    if match is None:
        return {}
    raw = match.group(1)
    flat = _flat_frontmatter(raw)
    if flat is not None:
        return flat
    import yaml  # here only: frontmatter the flat reader cannot read

    try:
        doc = yaml.safe_load(raw)
    except yaml.YAMLError:
        doc = None
    if not isinstance(doc, dict):
        # Not YAML (often `description: Use when: ...`, an unquoted colon): read it line by line,
        # as the reference's own frontmatter reader would.
        return {k: v for k, v in blocks.parse(text).meta if k}
    out: dict[str, str] = {}
    for key, value in doc.items():
        if isinstance(value, list):
            value = ", ".join(str(v) for v in value if isinstance(v, str | int | float))
        if isinstance(value, bool):
            value = "true" if value else "false"
        if isinstance(value, str | int | float):
            out[str(key)] = str(value)
    return out


def _flat_frontmatter(raw: str) -> dict[str, str] | None:
    """Flat `key: plain value` lines read directly (None when any line needs YAML)."""
    out: dict[str, str] = {}
    for line in raw.splitlines():
        if not line.strip():
            continue
        match = _FLAT_LINE.match(line)
        if match is None:
            return None
        value = match.group(2)
        if value.startswith(_YAML_STARTS) or " #" in value:
            return None
        out[match.group(1)] = value
    return out


@dataclass
class SkillCatalog:
    """The skills found outside memory at start-up, plus the agent's (read from MemFS HEAD)."""

    external: list[Skill] = field(default_factory=list)
    sources: frozenset[str] = frozenset(SOURCES)
    memfs: MemFS | None = None
    ignored: list[str] = field(default_factory=list)  # skipped SKILL.md files, with why

    @property
    def enabled(self) -> bool:
        return bool(self.sources)

    def agent_skills(self, files: Mapping[str, bytes] | None = None) -> list[Skill]:
        """The agent's skills at MemFS HEAD (or in `files`, a HEAD tree already read)."""
        memfs = self.memfs
        if memfs is None or "agent" not in self.sources:
            return []
        return skills_in_memory(memfs.read_head_tree("skills") if files is None else files)

    @property
    def includes_agent(self) -> bool:
        """Whether the agent's own skills (from its memory) are part of this catalog."""
        return self.memfs is not None and "agent" in self.sources

    def all(self, agent: Iterable[Skill] | None = None) -> dict[str, Skill]:
        """Name -> skill, the highest-precedence source winning; sorted by name."""
        merged: dict[str, Skill] = {}
        pool = [*self.external, *(self.agent_skills() if agent is None else agent)]
        for skill in sorted(pool, key=lambda s: _PRECEDENCE[s.source]):
            merged.setdefault(skill.name, skill)
        return dict(sorted(merged.items()))

    def names(self) -> list[str]:
        return list(self.all())

    def load(self, name: str) -> LoadedSkill | None:
        """The skill called `name` with its body (frontmatter removed), or None."""
        skill = self.all().get(name)
        if skill is None:
            return None
        directory = skill.directory
        if directory is not None and not any(p.name != SKILL_FILE for p in directory.iterdir()):
            directory = None
        return LoadedSkill(skill.name, read_body(skill, self.memfs), directory)


def read_body(skill: Skill, memfs: MemFS | None) -> str:
    kind, _, rest = skill.location.partition(":")
    if skill.directory is not None:
        text = (skill.directory / SKILL_FILE).read_text(encoding="utf-8", errors="replace")
    elif kind == "bundled":
        text = _bundled_root().joinpath(rest, SKILL_FILE).read_text(encoding="utf-8")
    else:
        text = (memfs.read_head(f"{rest}/{SKILL_FILE}") if memfs is not None else None) or ""
    body = blocks.parse(text).body.strip()
    if len(body) > _BODY_CAP:
        body = body[:_BODY_CAP] + f"\n[skill truncated at {_BODY_CAP} characters]"
    return body


def skills_in_memory(files: Mapping[str, bytes]) -> list[Skill]:
    """The `skills/<name>/SKILL.md` skills in a memory tree (path -> bytes), by path."""
    found: list[Skill] = []
    for path, data in sorted(files.items()):
        parts = path.split("/")
        if len(parts) != 3 or parts[2] != SKILL_FILE:
            continue
        skill = parse_skill(
            data.decode("utf-8", errors="replace"), parts[1], "agent", f"memory:skills/{parts[1]}"
        )
        if isinstance(skill, Skill):
            found.append(skill)
    return found


def render_available(skills: Iterable[Skill]) -> str:
    """The `<available_skills>` block for the system prompt ("" when there are none)."""
    items = list(skills)
    if not items:
        return ""
    lines = [
        "<available_skills>",
        "When a task matches one of these, load its instructions with the Skill tool "
        "(argument `skill`: the name) before starting.",
    ]
    for skill in items:
        lines.append(f"- {skill.name}: {skill.description}" if skill.description else f"- {skill.name}")
    lines.append("</available_skills>")
    return "\n".join(lines)


def discover_skills(
    *,
    home: Path,
    cwd: Path,
    sources: frozenset[str],
    project_trusted: bool,
    skills_dir: Path | None = None,
    memfs: MemFS | None = None,
) -> SkillCatalog:
    """Scan every enabled source outside memory once; agent skills are read on demand."""
    catalog = SkillCatalog(sources=sources, memfs=memfs)
    if not sources:
        return catalog
    if "bundled" in sources:
        root = _bundled_root()
        if root.is_dir():
            for entry in sorted(root.iterdir(), key=lambda e: e.name):
                skill_md = entry.joinpath(SKILL_FILE)
                if entry.is_dir() and skill_md.is_file():
                    _add(catalog, skill_md.read_text(encoding="utf-8"), entry.name, "bundled",
                         f"bundled:{entry.name}")
    if "global" in sources:
        _scan(catalog, home / "skills", "global")
    if "project" in sources:
        if skills_dir is not None:
            _scan(catalog, skills_dir, "project")  # named on the command line: no trust needed
        else:
            # the folders the sandbox's armed-names guard keeps sandboxed commands from planting
            for folder in PROJECT_SKILL_FOLDERS:
                if project_trusted or not folder.startswith(".tether/"):
                    _scan(catalog, cwd / folder, "project")
    return catalog


def _scan(catalog: SkillCatalog, directory: Path, source: str) -> None:
    if not directory.is_dir():
        return
    for entry in sorted(directory.iterdir()):
        skill_md = entry / SKILL_FILE
        if not skill_md.is_file():
            continue
        try:
            text = skill_md.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            catalog.ignored.append(f"{skill_md}: cannot read ({exc})")
            continue
        _add(catalog, text, entry.name, source, str(entry.resolve()))


def _add(catalog: SkillCatalog, text: str, fallback: str, source: str, location: str) -> None:
    skill = parse_skill(text, fallback, source, location)
    if isinstance(skill, str):
        catalog.ignored.append(skill)
    elif all(s.name != skill.name for s in catalog.external if s.source == source):
        catalog.external.append(skill)


def _bundled_root() -> Path:
    return Path(__file__).with_name("bundled_skills")  # package data, next to this module
