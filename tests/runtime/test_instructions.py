"""Project instructions from the repository root down to the working directory, and the user's
own; SKILL.md frontmatter read as YAML."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tether.runtime.extensions.skills import frontmatter, parse_skill
from tether.runtime.session.instructions import instruction_files, read_project_instructions


def repo(tmp_path: Path) -> Path:
    root = tmp_path / "repo"
    (root / ".git").mkdir(parents=True)
    return root


def test_found_from_the_repository_root_down_nearest_last(tmp_path: Path) -> None:
    root = repo(tmp_path)
    deep = root / "pkg" / "sub"
    deep.mkdir(parents=True)
    (tmp_path / "AGENTS.md").write_text("outside the repository\n")
    (root / "AGENTS.md").write_text("root rules\n")
    (root / "pkg" / "CLAUDE.md").write_text("pkg rules\n")
    (deep / "AGENTS.md").write_text("sub rules\n")
    home = tmp_path / "tether-home"
    home.mkdir()
    (home / "AGENTS.md").write_text("my own rules\n")
    text = read_project_instructions(deep, home)
    order = [text.index(s) for s in ("my own rules", "root rules", "pkg rules", "sub rules")]
    assert order == sorted(order)
    assert "outside the repository" not in text
    assert '<project_instructions source="pkg/CLAUDE.md">' in text
    assert '<project_instructions source="$TETHER_HOME/AGENTS.md">' in text


def test_outside_a_repository_only_the_working_directory(tmp_path: Path) -> None:
    (tmp_path / "AGENTS.md").write_text("parent\n")
    work = tmp_path / "work"
    work.mkdir()
    (work / "AGENTS.md").write_text("here\n")
    assert [label for label, _ in instruction_files(work, None)] == ["AGENTS.md"]


def test_a_symlink_out_of_the_repository_is_not_read(tmp_path: Path) -> None:
    root = repo(tmp_path)
    secret = tmp_path / "id_rsa"
    secret.write_text("PRIVATE KEY\n")
    (root / "AGENTS.md").symlink_to(secret)
    (root / "CLAUDE.md").symlink_to(root / ".git")  # a directory: nothing to read
    assert read_project_instructions(root, None) == ""


def test_a_total_cap_drops_the_most_general_first(tmp_path: Path) -> None:
    root = repo(tmp_path)
    sub = root / "a"
    sub.mkdir()
    (root / "AGENTS.md").write_text("R" * 39_000)
    (root / "CLAUDE.md").write_text("C" * 39_000)
    (sub / "AGENTS.md").write_text("A" * 39_000)
    (sub / "CLAUDE.md").write_text("N" * 39_000)
    text = read_project_instructions(sub, None)
    assert "N" * 100 in text and "A" * 100 in text and "R" * 100 not in text


@pytest.mark.parametrize(
    ("head", "description"),
    [
        ("description: >-\n  Folded onto\n  one line.", "Folded onto one line."),
        ("description: |\n  Literal\n  lines", "Literal lines"),
        ('description: "Quoted: with a colon"', "Quoted: with a colon"),
        ("description: plain text: with a colon", "plain text: with a colon"),
        ("description: Use when\n  the line wraps", "Use when the line wraps"),
        ("description: kept # a comment", "kept"),
    ],
)
def test_skill_frontmatter_is_yaml(head: str, description: str) -> None:
    text = f"---\nname: my-skill\n{head}\n---\n# Body\n"
    skill = parse_skill(text, "fallback", "project", "/x")
    assert not isinstance(skill, str)
    assert (skill.name, skill.description) == ("my-skill", description)


def test_flat_frontmatter_does_not_import_yaml() -> None:
    code = (
        "import sys\nfrom tether.runtime.extensions.skills import frontmatter\n"
        "print(frontmatter('---\\nname: a\\ndescription: How: to do it\\n---\\nbody'))\n"
        "print('yaml' in sys.modules)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.splitlines() == [str({"name": "a", "description": "How: to do it"}), "False"]


def test_lists_and_scalars_become_text() -> None:
    meta = frontmatter("---\nname: x\nallowed-tools: [Bash, Read]\nversion: 2\nbeta: true\n---\n")
    assert meta == {"name": "x", "allowed-tools": "Bash, Read", "version": "2", "beta": "true"}
    assert json.dumps(frontmatter("no fence")) == "{}"


def test_the_real_script_sends_them_to_the_model(tmp_path: Path, tether_home: Path) -> None:
    from tests.e2e.support import run_tether, tether_env
    from tether.testing.fake_provider import FakeProvider

    root = repo(tmp_path)
    work = root / "service"
    skill = work / ".agents" / "skills" / "deploy"
    skill.mkdir(parents=True)
    (skill / "SKILL.md").write_text("---\nname: deploy\ndescription: >-\n  Ship the service\n  safely.\n---\nSteps\n")
    (root / "AGENTS.md").write_text("Repository rule: run make check.\n")
    (work / "CLAUDE.md").write_text("Service rule: never touch prod.\n")
    tether_home.mkdir(parents=True)
    (tether_home / "AGENTS.md").write_text("Personal rule: be brief.\n")
    model = "anthropic/claude-test"
    with FakeProvider([{"text": "ok"}]) as fake:
        run = run_tether(["-p", "hi", "--model", model], env=tether_env(fake.url, model), cwd=work)
        system = json.dumps(fake.requests[0]["body"]["system"])
    assert run.code == 0, run.stderr
    order = [system.index(s) for s in ("Personal rule", "Repository rule", "Service rule")]
    assert order == sorted(order)
    assert "deploy: Ship the service safely." in system


def test_a_bundled_skill_with_files_is_loaded_with_its_folder(tmp_path: Path) -> None:
    from tether.runtime.extensions.skills import discover_skills

    catalog = discover_skills(home=tmp_path, cwd=tmp_path, sources=frozenset({"bundled"}),
                              project_trusted=False)
    with_script = catalog.load("self-configuration")
    assert with_script is not None and with_script.directory is not None
    assert (with_script.directory / "scripts").is_dir()
    only_text = catalog.load("remembering")
    assert only_text is not None and only_text.directory is None
