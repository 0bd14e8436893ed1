from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tether.core.tools import Effect, ToolRunContext
from tether.memory.memfs import MemFS
from tether.runtime.extensions.skills import (
    SOURCES,
    discover_skills,
    render_available,
    resolve_sources,
)
from tether.tools.skill import SkillTool

from .support import git, open_memfs

ALL = frozenset(SOURCES)


def write_skill(root: Path, folder: str, description: str, body: str = "Do the thing.", name: str | None = None) -> Path:
    d = root / folder
    d.mkdir(parents=True, exist_ok=True)
    head = f"name: {name}\n" if name else ""
    (d / "SKILL.md").write_text(f"---\n{head}description: {description}\n---\n{body}\n")
    return d


def run_skill(tool: SkillTool, args: dict[str, object], cwd: Path):  # type: ignore[no-untyped-def]
    return asyncio.run(tool.run(args, ToolRunContext(cwd=cwd, tool_call_id="c1")))


@pytest.fixture
def project(tmp_path: Path) -> Path:
    d = tmp_path / "project"
    d.mkdir()
    return d


def test_resolve_sources() -> None:
    assert resolve_sources(skill_sources=None, no_skills=False, no_bundled=False) == ALL
    assert resolve_sources(skill_sources=["all"], no_skills=False, no_bundled=True) == ALL - {"bundled"}
    assert resolve_sources(skill_sources=["global", "agent"], no_skills=False, no_bundled=False) == {"global", "agent"}
    assert resolve_sources(skill_sources=None, no_skills=True, no_bundled=False) == frozenset()


def test_bundled_skill_ships(tether_home: Path, project: Path) -> None:
    catalog = discover_skills(home=tether_home, cwd=project, sources=frozenset({"bundled"}), project_trusted=False)
    skills = catalog.all()
    assert "remembering" in skills and skills["remembering"].source == "bundled"
    loaded = catalog.load("remembering")
    assert loaded is not None and "memory" in loaded.body and not loaded.body.startswith("---")


def test_sources_and_precedence(tether_home: Path, project: Path) -> None:
    memfs = open_memfs(tether_home)
    write_skill(tether_home / "skills", "shared", "global version")
    write_skill(tether_home / "skills", "only-global", "g")
    write_skill(memfs.root / "skills", "shared", "agent version")
    git(memfs.root, "add", "-A")
    git(memfs.root, "commit", "-qm", "agent skill")
    write_skill(project / ".agents" / "skills", "shared", "project version")
    write_skill(project / ".agents" / "skills", "proj", "p", name="renamed-proj")
    catalog = discover_skills(home=tether_home, cwd=project, sources=ALL, project_trusted=False, memfs=memfs)
    skills = catalog.all()
    assert skills["shared"].description == "project version"
    assert skills["only-global"].source == "global"
    assert "renamed-proj" in skills and "proj" not in skills
    without_project = discover_skills(home=tether_home, cwd=project, sources=ALL - {"project"},
                                      project_trusted=False, memfs=memfs)
    assert without_project.all()["shared"].description == "agent version"
    only_global = discover_skills(home=tether_home, cwd=project, sources=frozenset({"global"}),
                                  project_trusted=False, memfs=memfs)
    assert only_global.all()["shared"].description == "global version"
    assert sorted(only_global.all()) == ["only-global", "shared"]


def test_dot_tether_skills_need_trust(tether_home: Path, project: Path) -> None:
    write_skill(project / ".tether" / "skills", "secret-sauce", "from .tether")
    untrusted = discover_skills(home=tether_home, cwd=project, sources=ALL, project_trusted=False)
    trusted = discover_skills(home=tether_home, cwd=project, sources=ALL, project_trusted=True)
    assert "secret-sauce" not in untrusted.all()
    assert "secret-sauce" in trusted.all()


def test_skills_dir_flag_replaces_project_folders(tether_home: Path, project: Path, tmp_path: Path) -> None:
    write_skill(project / ".agents" / "skills", "from-agents-dir", "a")
    explicit = tmp_path / "my-skills"
    write_skill(explicit, "explicit", "e")
    catalog = discover_skills(home=tether_home, cwd=project, sources=ALL, project_trusted=False,
                              skills_dir=explicit)
    assert "explicit" in catalog.all() and "from-agents-dir" not in catalog.all()


def test_agent_skills_come_from_head_only(tether_home: Path, project: Path) -> None:
    memfs = open_memfs(tether_home)
    write_skill(memfs.root / "skills", "draft", "not committed")
    catalog = discover_skills(home=tether_home, cwd=project, sources=ALL, project_trusted=False, memfs=memfs)
    assert "draft" not in catalog.all()
    git(memfs.root, "add", "-A")
    git(memfs.root, "commit", "-qm", "skill")
    assert catalog.all()["draft"].source == "agent"  # read on demand: no rediscovery needed
    loaded = catalog.load("draft")
    assert loaded is not None and loaded.body == "Do the thing."


def test_bad_skill_names_are_reported(tether_home: Path, project: Path) -> None:
    write_skill(tether_home / "skills", "bad", "d", name="has spaces")
    catalog = discover_skills(home=tether_home, cwd=project, sources=ALL, project_trusted=False)
    assert "has spaces" not in catalog.all()
    assert any("not a simple name" in m for m in catalog.ignored)


def test_no_sources_means_no_skills(tether_home: Path, project: Path) -> None:
    catalog = discover_skills(home=tether_home, cwd=project, sources=frozenset(), project_trusted=True)
    assert not catalog.enabled and catalog.all() == {}
    assert render_available([]) == ""


def test_render_available_lists_names_and_descriptions(tether_home: Path, project: Path) -> None:
    write_skill(tether_home / "skills", "deploy", "Ship a release")
    catalog = discover_skills(home=tether_home, cwd=project, sources=frozenset({"global"}), project_trusted=False)
    text = render_available(catalog.all().values())
    assert text.startswith("<available_skills>") and text.endswith("</available_skills>")
    assert "- deploy: Ship a release" in text and "Do the thing" not in text


def test_skill_tool_loads_by_name(tether_home: Path, project: Path) -> None:
    d = write_skill(project / ".agents" / "skills", "lint", "Lint the code", body="Run <SKILL_DIR>/lint.sh")
    (d / "lint.sh").write_text("#!/bin/sh\n")
    write_skill(tether_home / "skills", "plain", "p", body="Plain body.")
    catalog = discover_skills(home=tether_home, cwd=project, sources=ALL, project_trusted=False)
    tool = SkillTool(catalog)
    assert tool.name == "Skill" and tool.effect is Effect.READ and tool.parameters["required"] == ["skill"]
    r = run_skill(tool, {"skill": "lint"}, project)
    assert not r.is_error
    assert r.output.startswith("<lint>\n") and r.output.endswith("\n</lint>")
    assert f"Run {d.resolve()}/lint.sh" in r.output and f"Skill directory: {d.resolve()}" in r.output
    r = run_skill(tool, {"skill": "plain", "args": "fast"}, project)
    assert r.output == "<plain>\nArguments: fast\n\nPlain body.\n</plain>"
    r = run_skill(tool, {"skill": "nope"}, project)
    assert r.is_error and 'Skill "nope" not found' in r.output and "lint" in r.output
    r = run_skill(tool, {"skill": ""}, project)
    assert r.is_error


def test_skill_tool_sees_a_skill_committed_mid_run(tether_home: Path, project: Path) -> None:
    memfs: MemFS = open_memfs(tether_home)
    catalog = discover_skills(home=tether_home, cwd=project, sources=ALL, project_trusted=False, memfs=memfs)
    tool = SkillTool(catalog)
    assert run_skill(tool, {"skill": "fresh"}, project).is_error
    write_skill(memfs.root / "skills", "fresh", "new", body="Fresh steps.")
    git(memfs.root, "add", "-A")
    git(memfs.root, "commit", "-qm", "fresh skill")
    r = run_skill(tool, {"skill": "fresh"}, project)
    assert r.output == "<fresh>\nFresh steps.\n</fresh>"
