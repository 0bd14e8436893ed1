"""`tether memory backup | backups | restore | resolve | tokens`: no committed memory change is
ever lost (a restore that would drop commits needs --force and backs them up first)."""

from __future__ import annotations

import json
from pathlib import Path

from tests.cli.manage_support import git, tether, tether_json


def make_agent(workdir: Path, home: Path) -> tuple[str, Path]:
    agent = tether_json("agents", "create", "--block", "persona=v1", cwd=workdir)["id"]
    return agent, home / "agents" / agent / "memory"


def commit(repo: Path, path: str, text: str, message: str) -> str:
    (repo / path).parent.mkdir(parents=True, exist_ok=True)
    (repo / path).write_text(text)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", message)
    return git(repo, "rev-parse", "HEAD").strip()


def test_restore_refuses_to_drop_commits_and_force_keeps_them(workdir: Path, tether_home: Path) -> None:
    agent, repo = make_agent(workdir, tether_home)
    taken = tether_json("memory", "backup", "--agent", agent, cwd=workdir)
    assert Path(taken["path"]).is_file() and taken["head"] == git(repo, "rev-parse", "HEAD").strip()
    later = commit(repo, "system/persona.md", "v2\n", "persona v2")
    refused = tether("memory", "restore", "--agent", agent, "--from", taken["id"], cwd=workdir)
    assert refused.code == 1 and "would drop 1 commit" in refused.stderr and "persona v2" in refused.stderr
    assert git(repo, "rev-parse", "HEAD").strip() == later
    done = tether_json("memory", "restore", "--agent", agent, "--from", "latest", "--force", cwd=workdir)
    assert done["restored"] and done["head"] == taken["head"]
    assert done["dropped_commits"] == [{"sha": later, "subject": "persona v2"}]
    assert "v1" in (repo / "system/persona.md").read_text()
    # the dropped commit is in the safety backup, and restoring it brings it back without --force
    safety = done["safety_backup"]["id"]
    assert [b["id"] for b in tether_json("memory", "backups", "--agent", agent, cwd=workdir)] == [
        taken["id"], safety]
    back = tether_json("memory", "restore", "--agent", agent, "--from", safety, cwd=workdir)
    assert back["restored"] and back["dropped_commits"] == []
    assert git(repo, "rev-parse", "HEAD").strip() == later


def test_restore_refuses_uncommitted_changes_even_forced(workdir: Path, tether_home: Path) -> None:
    agent, repo = make_agent(workdir, tether_home)
    tether_json("memory", "backup", "--agent", agent, cwd=workdir)
    (repo / "system" / "persona.md").write_text("half-written\n")
    run = tether("memory", "restore", "--agent", agent, "--from", "latest", "--force", cwd=workdir)
    assert run.code == 1 and "uncommitted changes" in run.stderr
    assert (repo / "system" / "persona.md").read_text() == "half-written\n"
    unknown = tether("memory", "restore", "--agent", agent, "--from", "nope", cwd=workdir)
    assert unknown.code == 1 and "not a backup id" in unknown.stderr
    no_from = tether("memory", "restore", "--agent", agent, cwd=workdir)
    assert no_from.code == 1 and "--from" in no_from.stderr


def conflicted(workdir: Path, home: Path) -> tuple[str, Path, str]:
    """An agent whose memory has a reflection branch that conflicts with main."""
    agent, repo = make_agent(workdir, home)
    branch = "tether/reflection/20261205-000000-abcdef"
    git(repo, "branch", branch)
    commit(repo, "system/persona.md", "main side\n", "main edit")
    git(repo, "checkout", "-q", branch)
    commit(repo, "system/persona.md", "branch side\n", "reflection edit")
    commit(repo, "system/notes.md", "new notes\n", "reflection notes")
    git(repo, "checkout", "-q", "main")
    return agent, repo, branch


def test_resolve_lists_then_merges_with_the_given_text(workdir: Path, tether_home: Path) -> None:
    agent, repo, branch = conflicted(workdir, tether_home)
    status = tether("memory", "status", "--agent", agent, cwd=workdir)
    assert f"pending merges (1): {branch} (tether memory resolve)" in status.stdout, status
    pending = tether_json("memory", "resolve", "--agent", agent, cwd=workdir)["pending"]
    assert [(p["branch"], p["conflicts"]) for p in pending] == [(branch, ["system/persona.md"])]
    done = tether_json("memory", "resolve", "--agent", agent, "--resolutions",
                       json.dumps({"system/persona.md": "both sides\n"}), cwd=workdir)
    assert done["resolved"] and done["conflicts"] == ["system/persona.md"]
    assert (repo / "system/persona.md").read_text() == "both sides\n"
    assert (repo / "system/notes.md").read_text() == "new notes\n"
    log = git(repo, "log", "--format=%s")
    assert "main edit" in log and "reflection edit" in log  # both histories kept
    assert git(repo, "status", "--porcelain") == "" and branch not in git(repo, "branch")


def test_a_partial_resolution_changes_nothing(workdir: Path, tether_home: Path) -> None:
    agent, repo, branch = conflicted(workdir, tether_home)
    head = git(repo, "rev-parse", "HEAD").strip()
    run = tether("memory", "resolve", "--agent", agent, "--resolutions",
                 json.dumps({"system/notes.md": "x"}), cwd=workdir)
    assert run.code == 1
    assert "no resolution for system/persona.md" in run.stderr and "system/notes.md did not conflict" in run.stderr
    assert git(repo, "rev-parse", "HEAD").strip() == head and git(repo, "status", "--porcelain") == ""
    assert not (repo / ".git" / "MERGE_HEAD").exists() and branch in git(repo, "branch")
    bad = tether("memory", "resolve", "--agent", agent, "--resolutions", "{nope", cwd=workdir)
    assert bad.code == 1 and "--resolutions is not JSON" in bad.stderr
    taken = tether_json("memory", "resolve", "--agent", agent, "--resolutions",
                        json.dumps({"system/persona.md": {"take": "ours"}}), cwd=workdir)
    assert taken["resolved"] and (repo / "system/persona.md").read_text() == "main side\n"


def test_tokens_counts_committed_files(workdir: Path, tether_home: Path) -> None:
    agent, repo = make_agent(workdir, tether_home)
    commit(repo, "notes/long.md", "x" * 400, "notes")
    out = tether_json("memory", "tokens", "--agent", agent, cwd=workdir)
    by_path = {f["path"]: f for f in out["files"]}
    assert by_path["notes/long.md"]["tokens"] == 100 and not by_path["notes/long.md"]["in_prompt"]
    assert by_path["system/persona.md"]["in_prompt"]
    assert out["system_tokens"] == by_path["system/persona.md"]["tokens"]
    assert out["total_tokens"] == out["system_tokens"] + 100


def test_a_lost_memory_comes_back_from_its_backup(workdir: Path, tether_home: Path) -> None:
    import shutil

    agent, repo = make_agent(workdir, tether_home)
    head = commit(repo, "notes/a.md", "kept\n", "notes")
    tether_json("memory", "backup", "--agent", agent, cwd=workdir)
    shutil.rmtree(repo)
    done = tether_json("memory", "restore", "--agent", agent, "--from", "latest", cwd=workdir)
    assert done["restored"] and done["head"] == head and done["safety_backup"] is None
    assert (repo / "notes" / "a.md").read_text() == "kept\n"
    assert git(repo, "rev-parse", "--abbrev-ref", "HEAD").strip() == "main"


def test_a_null_resolution_deletes_the_conflicted_file(workdir: Path, tether_home: Path) -> None:
    agent, repo = make_agent(workdir, tether_home)
    branch = "tether/reflection/20261205-000000-000001"
    git(repo, "branch", branch)
    git(repo, "rm", "-q", "system/persona.md")
    git(repo, "commit", "-q", "-m", "drop persona")
    git(repo, "checkout", "-q", branch)
    commit(repo, "system/persona.md", "edited\n", "edit persona")
    git(repo, "checkout", "-q", "main")
    pending = tether_json("memory", "resolve", "--agent", agent, cwd=workdir)["pending"]
    assert pending[0]["conflicts"] == ["system/persona.md"]
    done = tether_json("memory", "resolve", "--agent", agent, "--branch", branch, "--resolutions",
                       json.dumps({"system/persona.md": None}), cwd=workdir)
    assert done["resolved"] and not (repo / "system" / "persona.md").exists()
    assert "edit persona" in git(repo, "log", "--format=%s") and git(repo, "status", "--porcelain") == ""
