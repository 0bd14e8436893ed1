"""End to end: memory that persists (MemFS, the memory tool, prompt cache) and skills."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.support import DIALECTS, run_tether, tether_env
from tether.testing.fake_provider import FakeProvider

ANTHROPIC = "anthropic/claude-test"
FACT = "The user's name is Ada Lovelace."




def system_of(body: dict[str, Any]) -> str:
    """The system prompt as each dialect carries it."""
    if "system" in body:
        return "".join(part["text"] for part in body["system"])
    if "systemInstruction" in body:  # Gemini
        return "".join(part["text"] for part in body["systemInstruction"]["parts"])
    if "instructions" in body:
        return str(body["instructions"])
    first = body["messages"][0]
    assert first["role"] == "system"
    return str(first["content"])


def memory_create(text: str = FACT) -> dict[str, Any]:
    return {"name": "memory", "arguments": {
        "command": "create", "reason": "Remember the user's name", "path": "system/human.md",
        "description": "Who the user is", "file_text": text}}


def memory_patch_create(text: str = FACT) -> dict[str, Any]:
    """The same file as `memory_create`, as the codex toolsets write it (memory_apply_patch)."""
    patch = ("*** Begin Patch\n*** Add File: system/human.md\n+---\n+description: Who the user is\n"
             f"+---\n+{text}\n*** End Patch")
    return {"name": "memory_apply_patch", "arguments": {"input": patch}}


def codex_toolset(model: str) -> bool:
    """`--toolset auto` gives OpenAI models Codex's tools, memory_apply_patch among them."""
    return model.split("/", 1)[0] in ("openai", "openai-chat")


def memory_root(home: Path, agent_id: str) -> Path:
    return home / "agents" / agent_id / "memory"


def git(root: Path, *args: str) -> str:
    return subprocess.run(["git", "-c", "user.name=u", "-c", "user.email=u@x", *args], cwd=root,
                          check=True, capture_output=True, text=True).stdout


@pytest.mark.parametrize("model", list(DIALECTS))
def test_memory_written_in_one_step_is_in_the_next_system_prompt(
    model: str, workdir: Path, tether_home: Path
) -> None:
    tool = memory_patch_create() if codex_toolset(model) else memory_create()
    script = [{"tool_calls": [tool]}, {"text": "I will remember."}]
    with FakeProvider(script) as fake:
        run = run_tether(
            ["-p", "my name is Ada", "--model", model, "--output-format", "stream-json", "--yolo",
             "--memfs-startup", "skip", "--no-memfs"],
            env=tether_env(fake.url, model), cwd=workdir,
        )
        assert fake.violations == []
        bodies = [r["body"] for r in fake.requests]
    assert run.code == 0, run.stderr
    init = run.events[0]
    assert tool["name"] in init["tools"] and "Skill" in init["tools"]
    assert ({"memory", "memory_apply_patch"} - {tool["name"]}).isdisjoint(init["tools"])
    returns = run.of_type("message", "tool_return_message")
    assert returns[0]["status"] == "success", returns
    assert "system/human.md" in returns[0]["tool_return"]
    assert len(bodies) == 2
    assert FACT not in system_of(bodies[0]) and "<memory>" in system_of(bodies[0])
    second = system_of(bodies[1])
    if model.startswith("openai-chat/"):
        # Hosted Chat Completions: the cached prompt prefix stays, the change arrives as the
        # last system message (reference §4.5's <memory_update>).
        assert second == system_of(bodies[0])
        last = bodies[1]["messages"][-1]
        assert last["role"] == "system" and last["content"].startswith("<memory_update")
        second = last["content"]
    assert '<block path="system/human.md" description="Who the user is">' in second
    assert FACT in second
    root = memory_root(tether_home, init["agent_id"])
    subject = ("memory_apply_patch: A system/human.md" if codex_toolset(model)
               else "Remember the user's name")
    assert git(root, "log", "-1", "--format=%s").strip() == subject
    assert git(root, "status", "--porcelain") == ""


def test_prompt_reused_across_runs_until_memory_changes(workdir: Path, tether_home: Path) -> None:
    env_args = ["--model", ANTHROPIC, "--output-format", "stream-json"]
    with FakeProvider([{"text": "one"}, {"text": "two"}, {"text": "three"}]) as fake:
        env = tether_env(fake.url, ANTHROPIC)
        first = run_tether(["-p", "hi", *env_args], env=env, cwd=workdir)
        assert first.code == 0, first.stderr
        init = first.events[0]
        conv_dir = next(tether_home.glob("conversations/*/system-prompt.json")).parent
        cache = conv_dir / "system-prompt.json"
        record = json.loads(cache.read_text())
        mtime = cache.stat().st_mtime_ns

        second = run_tether(["-p", "again", "--conversation", init["conversation_id"], *env_args],
                            env=env, cwd=workdir)
        assert second.code == 0, second.stderr
        assert cache.stat().st_mtime_ns == mtime  # not rewritten: nothing was recompiled
        assert json.loads(cache.read_text())["compiledAt"] == record["compiledAt"]

        # a commit in the memory repo between runs is a new revision: recompiled
        root = memory_root(tether_home, init["agent_id"])
        (root / "system" / "style.md").write_text("---\ndescription: style\n---\nAnswer tersely.\n")
        git(root, "add", "-A")
        git(root, "commit", "-qm", "style")
        third = run_tether(["-p", "once more", "--conversation", init["conversation_id"], *env_args],
                           env=env, cwd=workdir)
        assert third.code == 0, third.stderr
        systems = [system_of(r["body"]) for r in fake.requests]
    assert systems[0] == systems[1] == record["content"]
    assert "Answer tersely." in systems[2] and "Answer tersely." not in systems[1]
    updated = json.loads(cache.read_text())
    assert updated["memfsRevision"] == git(root, "rev-parse", "HEAD").strip()
    assert updated["rawSystemHash"] == record["rawSystemHash"]


def test_a_second_run_renders_memory_without_reading_the_tree(
    workdir: Path, tether_home: Path, tmp_path: Path
) -> None:
    # Every `tether -p` is a new conversation; the memory's render at an unchanged commit is
    # reused from the agent's memory-render.json, so git never lists the tree again.
    real_git = shutil.which("git")
    assert real_git is not None
    bin_dir, log = tmp_path / "bin", tmp_path / "git-argv.log"
    bin_dir.mkdir()
    wrapper = bin_dir / "git"
    wrapper.write_text(f'#!/bin/sh\nprintf "%s\\n" "$*" >> "{log}"\nexec "{real_git}" "$@"\n')
    wrapper.chmod(0o755)
    args = ["--model", ANTHROPIC, "--output-format", "stream-json"]
    with FakeProvider([{"text": "one"}, {"text": "two"}]) as fake:
        env = tether_env(fake.url, ANTHROPIC)
        env["PATH"] = f"{bin_dir}:{env.get('PATH', '')}"
        first = run_tether(["-p", "hi", *args], env=env, cwd=workdir)
        assert first.code == 0, first.stderr
        first_git = log.read_text().splitlines()
        log.unlink()
        second = run_tether(["-p", "again", *args], env=env, cwd=workdir)
        assert second.code == 0, second.stderr
        systems = [system_of(r["body"]) for r in fake.requests]
    assert any(" ls-tree " in line for line in first_git), first_git  # the wrapper is in use
    second_git = log.read_text().splitlines() if log.exists() else []
    assert not any(" ls-tree " in line or " cat-file " in line for line in second_git), second_git
    one, two = first.events[0], second.events[0]
    assert one["agent_id"] == two["agent_id"] and one["conversation_id"] != two["conversation_id"]
    assert "<memory>" in systems[1]
    assert systems[0].split("<memory_metadata>")[0] == systems[1].split("<memory_metadata>")[0]
    assert f"CONVERSATION_ID: {two['conversation_id']}" in systems[1]
    agent_dir = tether_home / "agents" / one["agent_id"]
    render = json.loads((agent_dir / "memory-render.json").read_text())
    assert render["revision"] == git(agent_dir / "memory", "rev-parse", "HEAD").strip()


def test_skill_listed_and_loaded_by_name(workdir: Path) -> None:
    skill = workdir / ".agents" / "skills" / "changelog"
    skill.mkdir(parents=True)
    (skill / "SKILL.md").write_text(
        "---\nname: changelog\ndescription: Write a changelog entry\n---\nUse Keep-a-Changelog headings.\n"
    )
    (workdir / "AGENTS.md").write_text("Always run the tests.\n")
    script = [{"tool_calls": [{"name": "Skill", "arguments": {"skill": "changelog"}}]}, {"text": "done"}]
    with FakeProvider(script) as fake:
        run = run_tether(["-p", "update the changelog", "--model", ANTHROPIC, "--output-format",
                          "stream-json", "--yolo"], env=tether_env(fake.url, ANTHROPIC), cwd=workdir)
        bodies = [r["body"] for r in fake.requests]
    assert run.code == 0, run.stderr
    first = system_of(bodies[0])
    assert "<available_skills>" in first and "- changelog: Write a changelog entry" in first
    assert "Use Keep-a-Changelog headings." not in first
    assert '<project_instructions source="AGENTS.md">\nAlways run the tests.' in first
    ret = run.of_type("message", "tool_return_message")[0]
    assert ret["status"] == "success"
    assert ret["tool_return"] == "<changelog>\nUse Keep-a-Changelog headings.\n</changelog>"
    assert "Use Keep-a-Changelog headings." in json.dumps(bodies[1]["messages"])


def test_skill_flags(workdir: Path, tmp_path: Path) -> None:
    trusted_only = workdir / ".tether" / "skills" / "house-style"
    trusted_only.mkdir(parents=True)
    (trusted_only / "SKILL.md").write_text("---\ndescription: House style\n---\nbody\n")
    elsewhere = tmp_path / "extra-skills" / "extra"
    elsewhere.mkdir(parents=True)
    (elsewhere / "SKILL.md").write_text("---\ndescription: Extra skill\n---\nbody\n")
    base = ["-p", "hi", "--model", ANTHROPIC, "--output-format", "stream-json"]
    runs = {
        "plain": [],
        "trusted": ["--trust"],
        "no-skills": ["--no-skills"],
        "no-bundled": ["--no-bundled-skills"],
        "global-only": ["--skill-sources", "global"],
        "dir": ["--skills", str(elsewhere.parent)],
    }
    systems: dict[str, str] = {}
    tools: dict[str, list[str]] = {}
    with FakeProvider([{"text": "ok"} for _ in runs]) as fake:
        env = tether_env(fake.url, ANTHROPIC)
        for name, extra in runs.items():
            run = run_tether([*base, *extra], env=env, cwd=workdir)
            assert run.code == 0, (name, run.stderr)
            tools[name] = run.events[0]["tools"]
            systems[name] = system_of(fake.requests[-1]["body"])
        bad = run_tether([*base, "--skills", str(tmp_path / "missing")], env=env, cwd=workdir)
    assert "house-style" not in systems["plain"] and "- remembering:" in systems["plain"]
    assert "- house-style: House style" in systems["trusted"]
    assert "<available_skills>" not in systems["no-skills"] and "Skill" not in tools["no-skills"]
    assert "remembering" not in systems["no-bundled"]
    assert "<available_skills>" not in systems["global-only"]  # no global skills exist
    assert "- extra: Extra skill" in systems["dir"]
    assert bad.code == 1 and "--skills" in bad.stderr and "not a directory" in bad.stderr


def test_memory_cli_status_log_diff_export(workdir: Path, tether_home: Path, tmp_path: Path) -> None:
    script = [{"tool_calls": [memory_create()]}, {"text": "ok"}]
    with FakeProvider(script) as fake:
        env = tether_env(fake.url, ANTHROPIC)
        run = run_tether(["-p", "remember", "--model", ANTHROPIC, "--output-format", "stream-json",
                          "--yolo"], env=env, cwd=workdir)
    assert run.code == 0, run.stderr
    agent = run.events[0]["agent_id"]
    status = run_tether(["memory", "status", "--agent", agent], env=env, cwd=workdir)
    assert status.code == 0, status.stderr
    assert f"agent: {agent}" in status.stdout and "system blocks (1): system/human.md" in status.stdout
    assert "uncommitted: none" in status.stdout
    # without --agent: this folder's last agent
    log = run_tether(["memory", "log"], env=env, cwd=workdir)
    assert log.code == 0 and "Remember the user's name" in log.stdout
    assert "chore: initialize local memory" in log.stdout
    root = memory_root(tether_home, agent)
    (root / "system" / "human.md").write_text("changed by hand\n")
    diff = run_tether(["memfs", "diff", "--agent", agent], env=env, cwd=workdir)
    assert diff.code == 0 and "+changed by hand" in diff.stdout
    assert " M system/human.md" in run_tether(["memory", "status"], env=env, cwd=workdir).stdout
    out = tmp_path / "exported"
    export = run_tether(["memory", "export", "--agent", agent, "--out", str(out)], env=env, cwd=workdir)
    assert export.code == 0, export.stderr
    assert FACT in (out / "system" / "human.md").read_text()  # HEAD, not the working tree
    missing = run_tether(["memory", "export", "--agent", agent], env=env, cwd=workdir)
    assert missing.code == 1 and "--out" in missing.stderr
    unknown = run_tether(["memory", "status", "--agent", "agent-local-nope"], env=env, cwd=workdir)
    assert unknown.code == 1 and "No agent" in unknown.stderr


def test_standard_mode_lets_the_agent_edit_its_own_memory_but_strict_asks(
    workdir: Path, tether_home: Path
) -> None:
    # The reference's default allow-list has `memory`: the tool is confined to the agent's repo.
    script = [{"tool_calls": [memory_create()]}, {"text": "remembered"}]
    with FakeProvider(script) as fake:
        run = run_tether(["-p", "remember", "--model", ANTHROPIC, "--output-format", "stream-json"],
                         env=tether_env(fake.url, ANTHROPIC), cwd=workdir)
    assert run.code == 0, run.stderr
    assert run.of_type("message", "tool_return_message")[0]["status"] == "success"
    script = [{"tool_calls": [memory_create()]}, {"text": "could not"}]
    with FakeProvider(script) as fake:
        run = run_tether(["-p", "remember", "--model", ANTHROPIC, "--output-format", "stream-json",
                          "--permission-mode", "strict", "--new-agent"],
                         env=tether_env(fake.url, ANTHROPIC), cwd=workdir)
    assert run.code == 0, run.stderr
    ret = run.of_type("message", "tool_return_message")[0]
    assert ret["status"] == "error" and "Tool requires approval (headless mode)" in ret["tool_return"]
    root = memory_root(tether_home, run.events[0]["agent_id"])
    assert not (root / "system" / "human.md").exists()


def test_codex_memory_patch_in_standard_mode_stays_inside_the_memory_repo(
    workdir: Path, tether_home: Path
) -> None:
    # A prompt-injected codex model aims the patch out of the memory repo (`..`, an absolute
    # path, .git hooks); each is refused with nothing written, and a good patch still commits.
    model = "openai/gpt-test"
    escapes = [
        f"*** Begin Patch\n*** Add File: ../../../../{workdir.name}/pwned.md\n+x\n*** End Patch",
        f"*** Begin Patch\n*** Add File: {workdir}/pwned.md\n+x\n*** End Patch",
        "*** Begin Patch\n*** Add File: .git/hooks/post-commit\n+#!/bin/sh\n+touch /tmp/x\n*** End Patch",
    ]
    calls = [{"name": "memory_apply_patch", "arguments": {"input": p}} for p in escapes]
    script = [{"tool_calls": calls}, {"tool_calls": [memory_patch_create()]}, {"text": "done"}]
    with FakeProvider(script) as fake:
        run = run_tether(["-p", "remember", "--model", model, "--output-format", "stream-json"],
                         env=tether_env(fake.url, model), cwd=workdir)
        assert fake.violations == []
    assert run.code == 0, run.stderr
    statuses = [r["status"] for r in run.of_type("message", "tool_return_message")]
    assert statuses == ["error", "error", "error", "success"]
    assert not (workdir / "pwned.md").exists()
    root = memory_root(tether_home, run.events[0]["agent_id"])
    assert not (root / ".git" / "hooks" / "post-commit").exists()
    assert FACT in git(root, "show", "HEAD:system/human.md")
    assert git(root, "log", "-1", "--format=%s").strip() == "memory_apply_patch: A system/human.md"
