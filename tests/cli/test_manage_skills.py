"""`tether skills list | install | delete` and `tether install`: a skill goes into the agent's
memory as one commit (or into $TETHER_HOME/skills with --global)."""

from __future__ import annotations

import os
from pathlib import Path

from tests.cli.manage_support import git, tether, tether_json

SKILL = "---\nname: greet\ndescription: say hello nicely\n---\nSay hello.\n"


def skill_dir(root: Path, text: str = SKILL) -> Path:
    root.mkdir(parents=True)
    (root / "SKILL.md").write_text(text)
    (root / "scripts").mkdir()
    (root / "scripts" / "hi.sh").write_text("echo hi\n")
    return root


def test_install_into_memory_list_and_delete(workdir: Path, tether_home: Path, tmp_path: Path) -> None:
    agent = tether_json("agents", "create", cwd=workdir)["id"]
    src = skill_dir(tmp_path / "src" / "greeting")
    done = tether_json("skills", "install", str(src), "--agent", agent, cwd=workdir)
    assert done["name"] == "greet" and done["source"] == "agent" and done["files"] == 2
    repo = tether_home / "agents" / agent / "memory"
    assert git(repo, "show", "HEAD:skills/greet/scripts/hi.sh") == "echo hi\n"
    assert git(repo, "log", "-1", "--format=%s").startswith("skills: install greet")
    listed = tether_json("skills", "list", "--agent", agent, cwd=workdir)
    assert {"name": "greet", "description": "say hello nicely", "source": "agent",
            "location": "memory:skills/greet"} in listed
    again = tether("skills", "install", str(src), "--agent", agent, cwd=workdir)
    assert again.code == 1 and "already has a skill 'greet'" in again.stderr
    gone = tether_json("skills", "delete", "greet", "--agent", agent, cwd=workdir)
    assert gone["deleted"] and git(repo, "ls-tree", "-r", "HEAD", "--name-only").count("skills/") == 0
    missing = tether("skills", "delete", "greet", "--agent", agent, cwd=workdir)
    assert missing.code == 1 and "no skill 'greet'" in missing.stderr


def test_install_from_git_and_global(workdir: Path, tether_home: Path, tmp_path: Path) -> None:
    src = skill_dir(tmp_path / "repo")
    git(src, "init", "-q", "-b", "main")
    git(src, "add", "-A")
    git(src, "commit", "-q", "-m", "skill")
    done = tether_json("install", f"git:{src}#main", "--global", cwd=workdir)
    target = tether_home / "skills" / "greet"
    assert done["location"] == str(target) and (target / "scripts" / "hi.sh").is_file()
    assert not (target / ".git").exists()
    assert any(s["name"] == "greet" and s["source"] == "global"
               for s in tether_json("skills", "list", cwd=workdir))
    tether_json("skills", "delete", "greet", "--global", cwd=workdir)
    assert not target.exists()


def test_bad_sources_are_refused_with_nothing_written(workdir: Path, tether_home: Path, tmp_path: Path) -> None:
    agent = tether_json("agents", "create", cwd=workdir)["id"]
    repo = tether_home / "agents" / agent / "memory"
    head = git(repo, "rev-parse", "HEAD")
    no_skill = tmp_path / "empty"
    no_skill.mkdir()
    run = tether("skills", "install", str(no_skill), "--agent", agent, cwd=workdir)
    assert run.code == 1 and "no SKILL.md there" in run.stderr
    linked = skill_dir(tmp_path / "linked")
    os.symlink("/etc/passwd", linked / "passwd")
    run = tether("skills", "install", str(linked), "--agent", agent, cwd=workdir)
    assert run.code == 1 and "no symlinks" in run.stderr
    bad_name = skill_dir(tmp_path / "bad", SKILL.replace("name: greet", "name: ../up"))
    run = tether("skills", "install", str(bad_name), "--agent", agent, cwd=workdir)
    assert run.code == 1 and "not a simple name" in run.stderr
    run = tether("install", "npm:@x/y", cwd=workdir)
    assert run.code == 1 and "Python packages" in run.stderr
    run = tether("skills", "install", "git:/nonexistent/repo", "--agent", agent, cwd=workdir)
    assert run.code == 1 and "could not clone" in run.stderr
    assert git(repo, "rev-parse", "HEAD") == head and git(repo, "status", "--porcelain") == ""


def test_list_creates_nothing_and_names_an_unknown_agent(workdir: Path, tether_home: Path) -> None:
    agent = tether_json("agents", "create", "--no-memfs", cwd=workdir)["id"]
    listed = tether_json("skills", "list", "--agent", agent, cwd=workdir)
    assert all(s["source"] != "agent" for s in listed)
    assert not (tether_home / "agents" / agent).exists()
    unknown = tether("skills", "list", "--agent", "agent-local-nope", cwd=workdir)
    assert unknown.code == 1 and "No agent 'agent-local-nope'" in unknown.stderr
