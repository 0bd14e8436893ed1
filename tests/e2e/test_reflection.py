"""End to end: reflection passes (reference §15) with a real child `tether` editing a worktree.

The child is scripted on the fake provider to Write a memory file in its cwd (the worktree) and
commit it with Bash; the parent run (or `tether dream`) merges the branch into the memory's main.
"""

from __future__ import annotations

import json
import os
from dataclasses import replace
from pathlib import Path

from tests.e2e.support import run_tether, tether_env
from tether.backends.local.store import LocalStore
from tether.memory.memfs import MemFS, memory_dir
from tether.testing.fake_provider import FakeProvider

MODEL = "anthropic/claude-test"
LEAN = ["--system-custom", "You are terse.", "--tools", ""]
NOTES = "---\ndescription: notes\n---\nlearned X\n"




def write_call(content: str = NOTES, path: str = "system/notes.md") -> dict:
    return {"tool_calls": [{"name": "Write", "arguments": {"file_path": path, "content": content}}]}


def bash_call(command: str) -> dict:
    return {
        "tool_calls": [{"name": "Bash", "arguments": {"command": command, "description": "commit"}}]
    }


COMMIT = bash_call("git add -A && git commit -q -m reflect")
REFLECT = [write_call(), COMMIT, {"text": "recorded X"}]


def turn(workdir: Path, fake: FakeProvider, prompt: str, *extra: str, env: dict | None = None):
    args = ["-p", prompt, "--model", MODEL, "--output-format", "stream-json", *LEAN, *extra]
    run = run_tether(args, env=tether_env(fake.url, MODEL, env), cwd=workdir, timeout=120)
    assert run.code == 0, run.stderr
    assert fake.violations == []
    return run


def first_agent(workdir: Path) -> str:
    with FakeProvider([{"text": "hello"}]) as fake:
        run = turn(workdir, fake, "remember that I like X", "--reflection-trigger", "off")
    return run.events[-1]["agent_id"]


def dream(workdir: Path, script: list[dict], agent: str, *extra: str):
    with FakeProvider(script) as fake:
        run = run_tether(
            ["dream", "--agent", agent, *extra],
            env=tether_env(fake.url, MODEL),
            cwd=workdir,
            timeout=120,
        )
        assert fake.violations == []
        requests = list(fake.requests)
    return run, requests


def memfs(home: Path, agent: str) -> MemFS:
    return MemFS(memory_dir(home, agent), agent_id=agent)


def state(home: Path, agent: str) -> dict:
    return json.loads((memory_dir(home, agent).parent / "reflection.json").read_text())


def assert_cleaned_up(home: Path, agent: str) -> None:
    repo = memfs(home, agent)
    worktrees = memory_dir(home, agent).parent / "memory-worktrees"
    assert not worktrees.exists() or list(worktrees.iterdir()) == []
    branches = repo._git("branch", "--format=%(refname:short)").decode().split()
    assert branches == ["main"]
    assert "memory-worktrees" not in repo._git("worktree", "list").decode()


def test_dream_merges_the_childs_commit_into_main(workdir, tether_home) -> None:
    agent = first_agent(workdir)
    run, requests = dream(workdir, REFLECT, agent)
    assert run.code == 0, run.stderr
    result = json.loads(run.stdout)
    assert result["result"] == "merged" and result["branch"].startswith("tether/reflection/")
    repo = memfs(tether_home, agent)
    assert repo.read_head("system/notes.md") == NOTES
    assert result["commit"] == repo.revision() and repo.status_lines() == []
    assert (repo.root / "system" / "notes.md").read_text() == NOTES  # main's working tree too
    prompt = json.dumps(requests[0]["body"]["messages"])
    assert "remember that I like X" in prompt and "git worktree" in prompt
    log = (memory_dir(tether_home, agent).parent / "reflection.log").read_text()
    init = json.loads(log.splitlines()[0])
    assert "/memory-worktrees/reflection-" in init["cwd"] and init["agent_id"] != agent
    assert state(tether_home, agent)["last_result"] == "merged"
    assert_cleaned_up(tether_home, agent)


def test_dream_with_no_edits_is_no_changes(workdir, tether_home) -> None:
    agent = first_agent(workdir)
    before = memfs(tether_home, agent).revision()
    run, _ = dream(workdir, [{"text": "nothing worth recording"}], agent)
    assert run.code == 0, run.stderr
    assert json.loads(run.stdout)["result"] == "no_changes"
    assert memfs(tether_home, agent).revision() == before
    assert_cleaned_up(tether_home, agent)


def test_uncommitted_edits_are_reported_and_discarded(workdir, tether_home) -> None:
    agent = first_agent(workdir)
    before = memfs(tether_home, agent).revision()
    run, _ = dream(workdir, [write_call(), {"text": "forgot to commit"}], agent)
    assert run.code == 1
    assert json.loads(run.stdout)["result"] == "dirty_uncommitted"
    assert "dirty_uncommitted" in run.stderr and "system/notes.md" in run.stderr
    assert memfs(tether_home, agent).revision() == before
    saved = state(tether_home, agent)
    assert saved["pending"] is True and saved["failures"] == 1 and "retry_after" in saved
    assert_cleaned_up(tether_home, agent)


def test_a_conflicting_change_on_main_gives_merge_conflict_and_leaves_main_alone(
    workdir, tether_home
) -> None:
    agent = first_agent(workdir)
    main = memory_dir(tether_home, agent)
    # While the child works, main gets a different version of the same file.
    concurrent = bash_call(
        "git add -A && git commit -q -m reflect && "
        f"cd {main} && mkdir -p system && printf 'main side\\n' > system/notes.md && "
        "git add -A && git commit -q -m concurrent"
    )
    run, _ = dream(workdir, [write_call(), concurrent, {"text": "done"}], agent)
    assert run.code == 1, run.stdout
    assert json.loads(run.stdout)["result"] == "merge_conflict"
    assert "merge_conflict" in run.stderr
    repo = memfs(tether_home, agent)
    assert repo.log(1)[0].subject == "concurrent"
    assert repo.read_head("system/notes.md") == "main side\n"
    assert (main / "system" / "notes.md").read_text() == "main side\n"
    assert repo.status_lines() == [] and not (main / ".git" / "MERGE_HEAD").exists()
    # the child's commit is kept on its branch until `tether memory resolve` merges it
    branches = repo.git("branch", "--format=%(refname:short)").decode().split()
    assert branches[0] == "main" and branches[1].startswith("tether/reflection/")
    env = tether_env("http://127.0.0.1:9", MODEL)
    listed = run_tether(["memory", "resolve", "--agent", agent], env=env, cwd=workdir)
    assert listed.code == 0, listed.stderr
    assert json.loads(listed.stdout)["pending"][0]["conflicts"] == ["system/notes.md"]
    resolved = run_tether(["memory", "resolve", "--agent", agent, "--resolutions",
                           json.dumps({"system/notes.md": {"take": "theirs"}})], env=env, cwd=workdir)
    assert resolved.code == 0, resolved.stderr
    assert memfs(tether_home, agent).read_head("system/notes.md") == NOTES  # the child's side
    assert "concurrent" in [c.subject for c in repo.log(5)]  # and main's commit is still there
    assert_cleaned_up(tether_home, agent)


def test_dream_reports_a_failed_child(workdir, tether_home) -> None:
    agent = first_agent(workdir)
    fault = {
        "fault": {
            "status": 400,
            "body": {
                "type": "error",
                "error": {"type": "invalid_request_error", "message": "no reflection today"},
            },
        }
    }
    run, _ = dream(workdir, [fault], agent)
    assert run.code == 1
    assert json.loads(run.stdout)["result"] == "failed"
    assert "reflection failed" in run.stderr
    assert_cleaned_up(tether_home, agent)


def test_dream_without_an_agent_says_what_to_do(workdir) -> None:
    run = run_tether(["dream"], env=tether_env("http://127.0.0.1:9", MODEL), cwd=workdir)
    assert run.code == 1 and "--agent" in run.stderr


def test_bad_reflection_flags_are_clear_errors(workdir) -> None:
    env = tether_env("http://127.0.0.1:9", MODEL)
    run = run_tether(["-p", "x", "--reflection-trigger", "sometimes"], env=env, cwd=workdir)
    assert (
        run.code == 1 and "--reflection-trigger" in run.stderr and "compaction-event" in run.stderr
    )
    run = run_tether(["-p", "x", "--reflection-step-count", "0"], env=env, cwd=workdir)
    assert run.code == 1 and "--reflection-step-count" in run.stderr


def test_step_count_trigger_fires_after_n_turns(workdir, tether_home) -> None:
    flags = ["--reflection-trigger", "step-count", "--reflection-step-count", "2"]
    with FakeProvider([{"text": "one"}]) as fake:
        run = turn(workdir, fake, "turn one", *flags)
        assert len(fake.requests) == 1  # no pass yet
    agent = run.events[-1]["agent_id"]
    assert state(tether_home, agent)["steps_since_success"] == 1
    conversation = run.events[-1]["conversation_id"]
    with FakeProvider([{"text": "two"}, *REFLECT]) as fake:
        run = turn(workdir, fake, "turn two", "--conversation", conversation, *flags)
        assert len(fake.requests) == 4  # the turn, then the child's three calls
        assert "turn two" in json.dumps(fake.requests[1]["body"]["messages"])
    assert run.events[-1]["result"] == "two"  # the turn's result is untouched
    assert memfs(tether_home, agent).read_head("system/notes.md") == NOTES
    saved = state(tether_home, agent)
    assert saved["last_result"] == "merged" and saved["steps_since_success"] == 0
    assert saved["trigger"] == "step-count" and saved["step_count"] == 2
    assert_cleaned_up(tether_home, agent)
    # The agent keeps its trigger without the flags: one turn is not enough for another pass.
    with FakeProvider([{"text": "three"}]) as fake:
        turn(workdir, fake, "turn three", "--conversation", conversation)
        assert len(fake.requests) == 1
    assert state(tether_home, agent)["steps_since_success"] == 1


def small_window(home: Path, agent: str) -> None:
    """A 2,048-token window for this agent only (its record's model_settings): TETHER_CONTEXT_WINDOW
    would also reach the child, whose tool schemas alone fill most of such a window."""
    store = LocalStore(home)
    record = store.get_agent(agent)
    store.save_agent(
        replace(record, model_settings={**record.model_settings, "context_window_limit": 2048})
    )


def test_compaction_event_trigger_fires_after_a_compaction(workdir, tether_home) -> None:
    agent = first_agent(workdir)
    small_window(tether_home, agent)
    for n in range(2):  # with the first turn, ~1,250 tokens of the 2,048: no compaction yet
        with FakeProvider([{"text": f"noted {n}"}]) as fake:
            run = turn(
                workdir,
                fake,
                f"part {n}: " + "lorem ipsum " * 150,
                "--agent",
                agent,
                "--conversation",
                "default",
                "--reflection-trigger",
                "compaction-event",
            )
            assert len(fake.requests) == 1
    conversation = run.events[-1]["conversation_id"]
    assert state(tether_home, agent)["trigger"] == "compaction-event"
    script = [{"text": "SUMMARY: two long parts."}, {"text": "third"}, *REFLECT]
    with FakeProvider(script) as fake:
        run = turn(
            workdir,
            fake,
            "part 2: " + "dolor sit " * 300,
            "--agent",
            agent,
            "--conversation",
            "default",
        )
        assert len(fake.requests) == 5, [r["body"]["messages"] for r in fake.requests]
        assert "SUMMARY: two long parts." in json.dumps(fake.requests[2]["body"]["messages"])
    assert run.events[-1]["result"] == "third"
    assert any(e.get("event_type") == "compaction" for e in run.events)
    assert memfs(tether_home, agent).read_head("system/notes.md") == NOTES
    saved = state(tether_home, agent)
    assert saved["last_result"] == "merged" and saved["pending"] is False
    assert list(saved["compactions_seen"]) == [conversation]
    # The same compaction does not fire again.
    with FakeProvider([{"text": "short"}]) as fake:
        turn(workdir, fake, "short one", "--agent", agent, "--conversation", "default")
        assert len(fake.requests) == 1


def test_a_hung_child_times_out_and_is_killed(workdir, tether_home) -> None:
    agent = first_agent(workdir)
    with FakeProvider([{"fault": {"hang": True}}]) as fake:
        env = tether_env(fake.url, MODEL, {"TETHER_REFLECTION_TIMEOUT": "3"})
        run = run_tether(["dream", "--agent", agent], env=env, cwd=workdir, timeout=60)
    assert run.code == 1
    result = json.loads(run.stdout)
    assert result["result"] == "failed" and "timed out after 3s" in result["message"]
    assert_cleaned_up(tether_home, agent)
    assert processes_in(tether_home / "agents") == []  # the child's process group is gone


def processes_in(root: Path) -> list[str]:
    found = []
    for proc in Path("/proc").iterdir():
        try:
            cwd = os.readlink(proc / "cwd")
        except OSError:
            continue
        if cwd.startswith(str(root)):
            found.append(f"{proc.name}: {cwd}")
    return found
