"""Reflection state, triggers and pass finalisation (runtime/agents/reflection.py), against real git.

The child here is a function (the e2e tests run a real `tether` child): it edits the worktree
the pass created, the way a reflection subagent would.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
from pathlib import Path

import pytest

from tether.backends.local.store import LocalStore
from tether.cli.flags import parse_run_flags
from tether.errors import StoreError, UsageError
from tether.memory.memfs import MemFS, memory_dir
from tether.protocol.messages import AssistantMessage, TextPart, ToolResultMessage, UserMessage
from tether.protocol.tool_calls import ToolCall
from tether.runtime.agents import reflection as r
from tether.runtime.agents import reflection_pass as rp

AGENT = "agent-local-test"
NOTES = "---\ndescription: notes\n---\nlearned X\n"


def git(cwd: Path, *args: str) -> str:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
    env.update(
        GIT_CONFIG_GLOBAL=os.devnull,
        GIT_CONFIG_NOSYSTEM="1",
        GIT_AUTHOR_NAME="t",
        GIT_AUTHOR_EMAIL="t@t",
        GIT_COMMITTER_NAME="t",
        GIT_COMMITTER_EMAIL="t@t",
    )
    proc = subprocess.run(
        ["git", *args], cwd=cwd, env=env, capture_output=True, text=True, check=True
    )
    return proc.stdout


def write_and_commit(where: Path, rel: str, text: str, message: str = "reflect") -> None:
    (where / rel).parent.mkdir(parents=True, exist_ok=True)
    (where / rel).write_text(text)
    git(where, "add", "-A")
    git(where, "commit", "-q", "-m", message)


def child(edit=None, ok: bool = True):
    seen: list[rp.ChildJob] = []

    async def run(job: rp.ChildJob, abort: asyncio.Event | None) -> rp.ChildOutcome:
        seen.append(job)
        assert job.worktree.is_dir() and (job.worktree / ".git").is_file()
        assert git(job.worktree, "branch", "--show-current").strip() == job.branch
        if edit is not None:
            edit(job)
        return rp.ChildOutcome(ok, "done" if ok else "boom", "agent-local-child")

    run.seen = seen  # type: ignore[attr-defined]
    return run


def reflect(home: Path, kid, messages=()) -> rp.PassResult:
    return asyncio.run(
        rp.run_pass(
            home,
            AGENT,
            agent_name="t",
            messages=list(messages),
            model="anthropic/claude-test",
            child=kid,
        )
    )


@pytest.fixture
def repo(tether_home: Path) -> MemFS:
    return MemFS.open(tether_home, AGENT)


def assert_clean(repo: MemFS) -> None:
    worktrees = repo.root.parent / "memory-worktrees"
    assert not worktrees.exists() or list(worktrees.iterdir()) == []
    assert git(repo.root, "branch", "--format=%(refname:short)").split() == ["main"]
    assert len(git(repo.root, "worktree", "list").splitlines()) == 1


# --- passes -------------------------------------------------------------------------------------


def test_committed_work_is_merged_fast_forward(tether_home, repo) -> None:
    kid = child(lambda job: write_and_commit(job.worktree, "system/notes.md", NOTES))
    result = reflect(tether_home, kid, [UserMessage("u1", (TextPart("I like X"),), 1)])
    assert result.result == "merged" and result.ok and "fast-forward" in result.message
    assert repo.read_head("system/notes.md") == NOTES and result.commit == repo.revision()
    assert (repo.root / "system/notes.md").read_text() == NOTES
    job = kid.seen[0]
    assert job.worktree.name == f"reflection-{result.pass_id}"
    assert job.worktree.parent == repo.root.parent / "memory-worktrees"
    assert job.branch == f"tether/reflection/{result.pass_id}" and "I like X" in job.prompt
    assert result.child_agent_id == "agent-local-child"
    assert_clean(repo)


def test_main_moving_on_elsewhere_gives_a_merge_commit(tether_home, repo) -> None:
    def edit(job: rp.ChildJob) -> None:
        write_and_commit(job.worktree, "system/notes.md", NOTES)
        write_and_commit(repo.root, "other.md", "other\n", "concurrent")

    result = reflect(tether_home, child(edit))
    assert result.result == "merged" and "(merge)" in result.message
    assert repo.read_head("system/notes.md") == NOTES and repo.read_head("other.md") == "other\n"
    assert_clean(repo)


def test_nothing_committed_is_no_changes(tether_home, repo) -> None:
    before = repo.revision()
    result = reflect(tether_home, child())
    assert result.result == "no_changes" and result.ok and repo.revision() == before
    assert_clean(repo)


def test_uncommitted_files_are_dirty_and_discarded(tether_home, repo) -> None:
    before = repo.revision()
    result = reflect(tether_home, child(lambda job: (job.worktree / "notes.md").write_text("x")))
    assert result.result == "dirty_uncommitted" and not result.ok and "notes.md" in result.message
    assert repo.revision() == before and not (repo.root / "notes.md").exists()
    assert_clean(repo)


def test_a_failed_child_is_failed_even_with_commits(tether_home, repo) -> None:
    before = repo.revision()
    kid = child(lambda job: write_and_commit(job.worktree, "a.md", "a\n"), ok=False)
    result = reflect(tether_home, kid)
    assert result.result == "failed" and "boom" in result.message and repo.revision() == before
    assert_clean(repo)


def test_a_dirty_main_repo_is_parent_dirty(tether_home, repo) -> None:
    def edit(job: rp.ChildJob) -> None:
        write_and_commit(job.worktree, "system/notes.md", NOTES)
        (repo.root / "scratch.md").write_text("half-done\n")

    before = repo.revision()
    result = reflect(tether_home, child(edit))
    assert result.result == "parent_dirty" and str(repo.root) in result.message
    assert repo.revision() == before and (repo.root / "scratch.md").read_text() == "half-done\n"
    # the child's commit is kept on its branch for `tether memory resolve`
    assert git(repo.root, "branch", "--format=%(refname:short)").split() == ["main", result.branch]
    assert "memory resolve" in result.message


def test_a_conflict_aborts_the_merge_and_keeps_main(tether_home, repo) -> None:
    write_and_commit(repo.root, "system/notes.md", "v1\n", "v1")

    def edit(job: rp.ChildJob) -> None:
        write_and_commit(job.worktree, "system/notes.md", "child\n")
        write_and_commit(repo.root, "system/notes.md", "main\n", "concurrent")

    result = reflect(tether_home, child(edit))
    assert result.result == "merge_conflict" and "main is unchanged" in result.message
    assert repo.log(1)[0].subject == "concurrent" and repo.read_head("system/notes.md") == "main\n"
    assert repo.status_lines() == [] and not (repo.root / ".git" / "MERGE_HEAD").exists()
    # the child's commit is a memory change: its branch stays for `tether memory resolve`
    assert git(repo.root, "branch", "--format=%(refname:short)").split() == ["main", result.branch]
    assert repo.read_head_tree("system", rev=result.branch)["system/notes.md"] == b"child\n"


def test_an_exception_in_the_child_still_removes_the_worktree(tether_home, repo) -> None:
    async def broken(job: rp.ChildJob, abort: asyncio.Event | None) -> rp.ChildOutcome:
        raise RuntimeError("spawn failed")

    with pytest.raises(RuntimeError):
        reflect(tether_home, broken)
    assert_clean(repo)


def test_one_pass_at_a_time_per_agent(tether_home, repo) -> None:
    def edit(job: rp.ChildJob) -> None:
        with pytest.raises(r.ReflectionBusy, match="already running"):
            reflect(tether_home, child())

    async def outer(job: rp.ChildJob, abort: asyncio.Event | None) -> rp.ChildOutcome:
        await asyncio.to_thread(edit, job)  # a second pass, from another thread, while this runs
        return rp.ChildOutcome(True, "done")

    assert reflect(tether_home, outer).result == "no_changes"


# --- state and triggers -------------------------------------------------------------------------


def test_state_round_trips_atomically(tether_home, repo) -> None:
    store = LocalStore(tether_home)
    assert r.load_state(store, AGENT) == r.ReflectionState()

    def change(state: r.ReflectionState) -> None:
        state.trigger, state.step_count, state.steps_since_success = "step-count", 2, 3
        r.record_result(state, "merge_conflict", 1_000_000.0)

    r.update_state(store, AGENT, change)
    path = r.state_path(tether_home, AGENT)
    data = json.loads(path.read_text())
    assert data["trigger"] == "step-count" and data["last_result"] == "merge_conflict"
    assert data["retry_after"] == r.iso(1_000_000.0 + r.RETRY_BASE_S)
    assert r.load_state(store, AGENT).to_dict() == data
    assert [p.name for p in path.parent.iterdir() if "tmp" in p.name] == []
    r.update_state(store, AGENT, lambda state: r.record_result(state, "merged", 1_000_100.0))
    data = json.loads(path.read_text())
    assert "retry_after" not in data and data["steps_since_success"] == 0 and data["failures"] == 0


@pytest.mark.parametrize(
    "bad",
    [
        [],
        {"trigger": "sometimes"},
        {"step_count": 0},
        {"steps_since_success": -1},
        {"retry_after": "soon"},
    ],
)
def test_bad_state_files_say_how_to_reset(tether_home, repo, bad) -> None:
    r.state_path(tether_home, AGENT).write_text(json.dumps(bad))
    with pytest.raises(StoreError, match="reset reflection"):
        r.load_state(LocalStore(tether_home), AGENT)


def test_trigger_rules() -> None:
    s = r.ReflectionState(trigger="step-count", step_count=2, steps_since_success=1)
    assert not r.pass_due(s, 0)
    s.steps_since_success = 2
    assert r.pass_due(s, 0)
    s.trigger = "off"
    assert not r.pass_due(s, 0)
    s = r.ReflectionState(trigger="compaction-event")
    assert not r.pass_due(s, 0)
    s.pending = True
    assert r.pass_due(s, 0)
    r.record_result(s, "failed", 100.0)  # backs off, doubling
    assert not r.pass_due(s, 100.0 + r.RETRY_BASE_S - 1) and r.pass_due(s, 100.0 + r.RETRY_BASE_S)
    r.record_result(s, "failed", 200.0)
    assert s.retry_after == r.iso(200.0 + 2 * r.RETRY_BASE_S) and s.failures == 2
    r.record_result(s, "no_changes", 300.0)
    assert not s.pending and not r.pass_due(s, 300.0)


def test_last_compaction_id_and_excerpt() -> None:
    entries = [
        {"type": "message", "id": "a"},
        {"type": "compaction", "id": "c1"},
        {"type": "message", "id": "b"},
        {"type": "compaction", "id": "c2"},
        {"type": "message"},
    ]
    assert r.last_compaction_id(entries) == "c2" and r.last_compaction_id(entries[:1]) is None
    messages = [
        UserMessage("u1", (TextPart("old " * 50),), 1),
        UserMessage("u2", (TextPart("please run ls"),), 2),
        AssistantMessage(
            "a1", (TextPart("running"), ToolCall("t1", "Bash", {"command": "ls"})), 3
        ),
        ToolResultMessage("r1", "t1", "Bash", (TextPart("a.txt"),), True, 4),
    ]
    text = rp.transcript_excerpt(messages)
    assert text.index("user: please run ls") < text.index('assistant called Bash({"command":"ls"})')
    assert "tool Bash (error): a.txt" in text
    short = rp.transcript_excerpt(messages, limit=120)
    assert short.startswith("[earlier messages omitted]") and "old old" not in short
    assert "a.txt" in short
    assert rp.excerpt_budget({}) == r.EXCERPT_CHARS
    assert rp.excerpt_budget({"TETHER_CONTEXT_WINDOW": "2048"}) == 2048


def test_child_stream_reading() -> None:
    init = b'{"type":"system","subtype":"init","agent_id":"agent-local-c"}\n'
    ok = rp.read_child_stream(
        init + b'{"type":"result","subtype":"success","result":"noted"}\n', b"", 0
    )
    assert ok == rp.ChildOutcome(True, "noted", "agent-local-c")
    bad = rp.read_child_stream(init + b'{"type":"result","subtype":"error","result":""}\n', b"", 1)
    assert not bad.ok and "error" in bad.detail
    lost = rp.read_child_stream(b"not json\n", b"Error: no model\n", 1)
    assert lost == rp.ChildOutcome(False, "Error: no model", None)


def test_reflection_flags_are_parsed_and_validated() -> None:
    flags = parse_run_flags(
        ["-p", "x", "--reflection-trigger", "step-count", "--reflection-step-count", "3"],
        stdin_is_tty=True,
    )
    assert flags.reflection_trigger == "step-count" and flags.reflection_step_count == 3
    assert parse_run_flags(["-p", "x"], stdin_is_tty=True).reflection_trigger is None
    with pytest.raises(UsageError, match="--reflection-trigger 'never'"):
        parse_run_flags(["-p", "x", "--reflection-trigger", "never"], stdin_is_tty=True)
    with pytest.raises(UsageError, match="--reflection-step-count"):
        parse_run_flags(["-p", "x", "--reflection-step-count", "zero"], stdin_is_tty=True)


def test_memory_dir_layout(tether_home) -> None:
    assert (
        r.state_path(tether_home, AGENT)
        == memory_dir(tether_home, AGENT).parent / "reflection.json"
    )


def _trigger(home: Path, trigger: str | None = None, steps: int | None = None) -> r.ReflectionTrigger:
    from types import SimpleNamespace

    prepared = SimpleNamespace(
        flags=SimpleNamespace(reflection_trigger=trigger, reflection_step_count=steps),
        store=LocalStore(home), session=SimpleNamespace(agent=SimpleNamespace(id=AGENT)),
    )
    return r.ReflectionTrigger(prepared, lambda m: None)


def test_a_turn_that_changes_only_an_unread_counter_writes_nothing(tether_home) -> None:
    # compaction-event (the default) never reads the turn counter: no fsynced write per turn
    path = r.state_path(tether_home, AGENT)
    t = _trigger(tether_home)
    assert [t._count_turn("conv-1", None) for _ in range(3)] == [False, False, False]
    assert not path.exists() and t.unsaved_steps == 3
    assert t._count_turn("conv-1", "c1") is True  # a compaction: written, with every turn counted
    saved = r.load_state(LocalStore(tether_home), AGENT)
    assert saved.steps_since_success == 4 and saved.pending and saved.compactions_seen == {"conv-1": "c1"}
    assert t.unsaved_steps == 0
    # step-count reads the counter: every turn is written
    s = _trigger(tether_home, "step-count", 3)
    assert s._count_turn("conv-1", "c1") is True  # 5 >= 3
    assert r.load_state(LocalStore(tether_home), AGENT).steps_since_success == 5
    assert r.load_state(LocalStore(tether_home), AGENT).trigger == "step-count"
    # the saved trigger is step-count now: a run without flags writes every turn too
    plain = _trigger(tether_home)
    plain._count_turn("conv-1", "c1")
    assert r.load_state(LocalStore(tether_home), AGENT).steps_since_success == 6 and plain.unsaved_steps == 0
