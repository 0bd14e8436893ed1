"""End to end: each toolset's names and schemas in the first request, and its tools doing real
work through the real `tether` script against the fake provider (issue 19)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.support import run_tether, tether_env
from tests.e2e.test_bidirectional import Client, is_control
from tether.testing.fake_provider import FakeProvider

CLAUDE = "anthropic/claude-test"
OPENAI = "openai/gpt-test"
FIRST_REQUEST_LIMIT = 25_000


def _run(fake: FakeProvider, workdir: Path, model: str, *extra: str) -> Any:
    run = run_tether(
        ["-p", "go", "--model", model, "--output-format", "stream-json", *extra],
        env=tether_env(fake.url, model),
        cwd=workdir,
    )
    assert fake.violations == []
    return run


def _tool_names(body: dict[str, Any]) -> list[str]:
    return [t.get("name") or t.get("function", {}).get("name") for t in body.get("tools", [])]


def _returns(run: Any) -> list[dict[str, Any]]:
    return run.of_type("message", "tool_return_message")


@pytest.mark.parametrize(
    ("model", "args", "present", "absent"),
    [
        (CLAUDE, [], {"Bash", "Read", "Edit", "Monitor", "TaskCreate", "TaskUpdate",
                      "EnterWorktree", "SetWorkingDirectory"}, {"AskUserQuestion", "exec_command"}),
        (OPENAI, [], {"exec_command", "write_stdin", "ApplyPatch", "UpdatePlan", "ViewImage"},
         {"Bash", "Edit", "AskUserQuestion"}),
        (CLAUDE, ["--toolset", "codex"], {"exec_command", "ApplyPatch"}, {"Bash"}),
        (CLAUDE, ["--toolset", "codex_snake"], {"exec_command", "apply_patch", "update_plan",
                                                "view_image"}, {"ApplyPatch", "Bash"}),
        (CLAUDE, ["--toolset", "gemini"], {"run_shell_command", "read_file", "replace",
                                           "search_file_content", "write_todos"}, {"Bash", "Read"}),
        (CLAUDE, ["--base-tools", "Read,Grep"], {"Read", "Grep"}, {"Bash", "Write"}),
        (OPENAI, ["--tools", "Read,Grep,Agent"], {"Read", "Grep", "Agent"}, {"exec_command", "Bash"}),
    ],
)  # fmt: skip
def test_toolset_names_and_first_request_size(
    workdir: Path, model: str, args: list[str], present: set[str], absent: set[str]
) -> None:
    with FakeProvider([{"text": "hi"}]) as fake:
        run = _run(fake, workdir, model, *args)
        body = fake.requests[0]["body"]
    assert run.code == 0, run.stderr
    names = set(_tool_names(body))
    assert present <= names, sorted(names)
    assert not (absent & names), sorted(absent & names)
    size = len(json.dumps(body))
    assert size < FIRST_REQUEST_LIMIT, size


def test_bad_toolset_is_a_clear_usage_error(workdir: Path) -> None:
    with FakeProvider([]) as fake:
        run = _run(fake, workdir, CLAUDE, "--toolset", "vim")
        bad = _run(fake, workdir, CLAUDE, "--base-tools", "Read,Frobnicate")
    assert run.code == 1 and "--toolset 'vim' is not valid" in run.stderr
    assert bad.code == 1 and "unknown tools: Frobnicate" in bad.stderr


THREE_FILE_PATCH = """*** Begin Patch
*** Update File: app.py
@@ def main():
-    return 1
+    return 2
*** Add File: docs/notes.md
+# Notes
*** Delete File: old.txt
*** End Patch"""


def _patch_tree(workdir: Path) -> None:
    (workdir / "app.py").write_text("def main():\n    return 1\n")
    (workdir / "old.txt").write_text("old\n")


def test_apply_patch_touching_three_files(workdir: Path) -> None:
    _patch_tree(workdir)
    script = [{"tool_calls": [{"name": "ApplyPatch", "arguments": {"input": THREE_FILE_PATCH}}]},
              {"text": "patched"}]  # fmt: skip
    with FakeProvider(script) as fake:
        run = _run(fake, workdir, OPENAI, "--permission-mode", "acceptEdits")
    assert run.code == 0, run.stderr
    assert _returns(run)[0]["status"] == "success", _returns(run)
    assert (workdir / "app.py").read_text() == "def main():\n    return 2\n"
    assert (workdir / "docs/notes.md").read_text() == "# Notes\n"
    assert not (workdir / "old.txt").exists()


def test_apply_patch_bad_hunk_changes_nothing(workdir: Path) -> None:
    _patch_tree(workdir)
    bad = THREE_FILE_PATCH.replace("-    return 1", "-    return 99")
    script = [{"tool_calls": [{"name": "ApplyPatch", "arguments": {"input": bad}}]}, {"text": "x"}]
    with FakeProvider(script) as fake:
        run = _run(fake, workdir, OPENAI, "--permission-mode", "acceptEdits")
    result = _returns(run)[0]
    assert result["status"] == "error" and "Hunk 1 of app.py did not apply" in result["tool_return"]
    assert (workdir / "app.py").read_text() == "def main():\n    return 1\n"
    assert (workdir / "old.txt").exists() and not (workdir / "docs").exists()


def test_apply_patch_is_judged_per_path(workdir: Path, tmp_path: Path) -> None:
    """acceptEdits admits edits inside the workspace only: a patch that also touches a file
    outside it asks (and one-shot headless denies), so nothing is written anywhere."""
    _patch_tree(workdir)
    outside = tmp_path / "outside.txt"
    patch = THREE_FILE_PATCH.replace("*** End Patch", f"*** Add File: {outside}\n+x\n*** End Patch")
    script = [{"tool_calls": [{"name": "ApplyPatch", "arguments": {"input": patch}}]}, {"text": "x"}]
    with FakeProvider(script) as fake:
        run = _run(fake, workdir, OPENAI, "--permission-mode", "acceptEdits")
    assert _returns(run)[0]["status"] == "error"
    assert not outside.exists() and (workdir / "app.py").read_text() == "def main():\n    return 1\n"


def test_exec_command_drives_interactive_python(workdir: Path) -> None:
    script = [
        {"tool_calls": [{"name": "exec_command", "arguments": {
            "cmd": "python3 -q", "description": "python", "tty": True, "yield_time_ms": 1500}}]},
        {"tool_calls": [{"name": "write_stdin", "arguments": {
            "session_id": 1, "chars": "print(6 * 7)\n", "yield_time_ms": 1000}}]},
        {"tool_calls": [{"name": "write_stdin", "arguments": {
            "session_id": 1, "chars": "exit()\n", "yield_time_ms": 3000}}]},
        {"text": "done"},
    ]  # fmt: skip
    with FakeProvider(script) as fake:
        run = _run(fake, workdir, OPENAI, "--yolo")
    assert run.code == 0, run.stderr
    outputs = [r["tool_return"] for r in _returns(run)]
    assert "Process running with session ID 1" in outputs[0]
    assert "42" in outputs[1]
    assert "Process exited with code 0" in outputs[2]


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout


def test_worktree_entered_edited_left(workdir: Path, tether_home: Path) -> None:
    _git(workdir, "init", "-q")
    (workdir / "a.txt").write_text("main\n")
    _git(workdir, "add", "a.txt")
    _git(workdir, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "init")
    script = [
        {"tool_calls": [{"name": "EnterWorktree", "arguments": {"name": "feature"}}]},
        {"tool_calls": [{"name": "Write", "arguments": {"file_path": "a.txt", "content": "tree\n"}}]},
        {"tool_calls": [{"name": "ExitWorktree", "arguments": {"action": "keep"}}]},
        {"tool_calls": [{"name": "Read", "arguments": {"file_path": "a.txt"}}]},
        {"text": "done"},
    ]
    with FakeProvider(script) as fake:
        run = _run(fake, workdir, CLAUDE, "--yolo")
    assert run.code == 0, run.stderr
    results = _returns(run)
    assert all(r["status"] == "success" for r in results), [r["tool_return"] for r in results]
    trees = list(tether_home.glob("worktrees/*/feature"))
    assert len(trees) == 1, list(tether_home.rglob("worktrees"))
    assert (trees[0] / "a.txt").read_text() == "tree\n"
    assert (workdir / "a.txt").read_text() == "main\n"  # the main checkout is untouched
    assert "main" in results[3]["tool_return"]  # back in the original directory
    assert "tether/feature" in _git(workdir, "branch")


def test_ask_user_question_answered_through_the_sdk(workdir: Path) -> None:
    question = {"question": "Which colour?", "header": "Colour",
                "options": [{"label": "red"}, {"label": "blue"}], "multiSelect": False}  # fmt: skip
    script = [{"tool_calls": [{"name": "AskUserQuestion", "arguments": {"questions": [question]}}]},
              {"text": "blue it is"}]  # fmt: skip
    with FakeProvider(script) as fake:
        c = Client(fake.url, workdir)
        c.user("ask me")
        req = c.wait_for(is_control("can_use_tool"))
        assert req["request"]["tool_name"] == "AskUserQuestion"
        answered = {"questions": [question], "answers": {"Which colour?": "blue"}}
        c.send({"type": "control_response", "response": {
            "subtype": "success", "request_id": req["request_id"],
            "response": {"behavior": "allow", "updatedInput": answered}}})  # fmt: skip
        result = c.result()
        assert c.close() == 0
        first, second = (json.dumps(r["body"]) for r in fake.requests[:2])
    assert result["subtype"] == "success"
    assert len(first) < FIRST_REQUEST_LIMIT, len(first)  # the default toolset with AskUserQuestion
    assert '\\"Which colour?\\"=\\"blue\\"' in second, second[-800:]


def test_task_list_survives_a_resume(workdir: Path) -> None:
    create = {"name": "TaskCreate", "arguments": {"subject": "Port the parser", "description": "d"}}
    with FakeProvider([{"tool_calls": [create]}, {"text": "made"}]) as fake:
        first = _run(fake, workdir, CLAUDE, "--yolo")
    assert first.code == 0, first.stderr
    conversation = first.of_type("system")[0]["conversation_id"]
    listing = {"name": "TaskList", "arguments": {}}
    with FakeProvider([{"tool_calls": [listing]}, {"text": "listed"}]) as fake:
        second = _run(fake, workdir, CLAUDE, "--yolo", "--conversation", conversation)
    assert second.code == 0, second.stderr
    assert _returns(second)[0]["tool_return"] == "#1 [pending] Port the parser"


@pytest.fixture
def bwrap() -> None:
    from tests.requirements import need_bwrap

    need_bwrap(seccomp=True)


@pytest.mark.usefixtures("bwrap")
def test_exec_command_runs_inside_the_workspace_sandbox(workdir: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside.txt"
    calls = [{"name": "exec_command", "arguments": {"cmd": f"touch {outside}", "description": "out"}},
             {"name": "exec_command", "arguments": {"cmd": "touch inside", "description": "in",
                                                    "tty": True}}]  # fmt: skip
    with FakeProvider([{"tool_calls": calls}, {"text": "done"}]) as fake:
        run = run_tether(
            ["-p", "go", "--model", OPENAI, "--yolo", "--output-format", "stream-json"],
            env=tether_env(fake.url, OPENAI, {"TETHER_FS_SANDBOX": "1"}),
            cwd=workdir,
        )
    assert run.code == 0, run.stderr
    out, inside = (r["tool_return"] for r in _returns(run))
    assert "Read-only file system" in out and "Process exited with code 1" in out
    assert not outside.exists()
    assert "Process exited with code 0" in inside and (workdir / "inside").exists()


def test_ask_user_question_in_unrestricted_mode_still_asks_the_sdk(workdir: Path) -> None:
    question = {"question": "Ship it?", "header": "Ship", "options": [{"label": "yes"}, {"label": "no"}],
                "multiSelect": False}  # fmt: skip
    script = [{"tool_calls": [{"name": "AskUserQuestion", "arguments": {"questions": [question]}}]},
              {"text": "ok"}]  # fmt: skip
    with FakeProvider(script) as fake:
        c = Client(fake.url, workdir, "--yolo")
        c.user("ask")
        req = c.wait_for(is_control("can_use_tool"))
        assert req["request"]["tool_name"] == "AskUserQuestion"
        assert req["request"]["input"]["questions"][0]["question"] == "Ship it?"
        c.send({"type": "control_response", "response": {
            "subtype": "success", "request_id": req["request_id"],
            "response": {"behavior": "allow", "updatedInput": {"answers": {"Ship it?": "no"}}}}})  # fmt: skip
        result = c.result()
        assert c.close() == 0
        second = json.dumps(fake.requests[1]["body"])
    assert result["subtype"] == "success"
    assert '\\"Ship it?\\"=\\"no\\"' in second


@pytest.mark.usefixtures("bwrap")
def test_the_sandbox_follows_the_working_directory_into_a_worktree(workdir: Path, tether_home: Path) -> None:
    _git(workdir, "init", "-q")
    (workdir / "a.txt").write_text("main\n")
    _git(workdir, "add", "a.txt")
    _git(workdir, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "init")
    script = [
        {"tool_calls": [{"name": "EnterWorktree", "arguments": {"name": "boxed"}}]},
        {"tool_calls": [{"name": "Bash", "arguments": {"command": "touch made-in-tree && touch "
                                                        f"{workdir}/made-in-main", "description": "t"}}]},
        {"tool_calls": [{"name": "Edit", "arguments": {"file_path": "a.txt", "old_string": "main",
                                                       "new_string": "edited"}}]},
        {"text": "done"},
    ]  # fmt: skip
    with FakeProvider(script) as fake:
        run = run_tether(
            ["-p", "go", "--model", CLAUDE, "--yolo", "--output-format", "stream-json"],
            env=tether_env(fake.url, CLAUDE, {"TETHER_FS_SANDBOX": "1"}),
            cwd=workdir,
        )
    assert run.code == 0, run.stderr
    (tree,) = tether_home.glob("worktrees/*/boxed")
    outputs = [r["tool_return"] for r in _returns(run)]
    assert (tree / "made-in-tree").exists(), outputs
    assert not (workdir / "made-in-main").exists(), outputs  # the old root is no longer writable
    assert "Read-only file system" in outputs[1]
    assert (tree / "a.txt").read_text() == "edited\n" and (workdir / "a.txt").read_text() == "main\n"


def test_set_working_directory_moves_later_calls_and_stays_inside(workdir: Path, tmp_path: Path) -> None:
    (workdir / "pkg").mkdir()
    script = [
        {"tool_calls": [{"name": "SetWorkingDirectory", "arguments": {"path": "pkg"}}]},
        {"tool_calls": [{"name": "Write", "arguments": {"file_path": "here.txt", "content": "x\n"}},
                        {"name": "Bash", "arguments": {"command": "pwd", "description": "where"}}]},
        {"tool_calls": [{"name": "SetWorkingDirectory", "arguments": {"path": str(tmp_path)}}]},
        {"text": "done"},
    ]  # fmt: skip
    with FakeProvider(script) as fake:
        run = _run(fake, workdir, CLAUDE, "--yolo")
    assert run.code == 0, run.stderr
    moved, wrote, pwd, outside = _returns(run)
    assert moved["status"] == "success" and (workdir / "pkg" / "here.txt").read_text() == "x\n"
    assert pwd["tool_return"].strip() == str((workdir / "pkg").resolve())
    assert outside["status"] == "error" and "outside the directories" in outside["tool_return"]


def test_gemini_tools_read_and_replace(workdir: Path) -> None:
    (workdir / "a.py").write_text("x = 1\n")
    script = [
        {"tool_calls": [{"name": "read_file", "arguments": {"absolute_path": str(workdir / "a.py")}},
                        {"name": "replace", "arguments": {"file_path": "a.py", "old_string": "x = 1",
                                                          "new_string": "x = 2"}}]},
        {"text": "done"},
    ]  # fmt: skip
    with FakeProvider(script) as fake:
        run = _run(fake, workdir, CLAUDE, "--toolset", "gemini", "--permission-mode", "acceptEdits")
    assert run.code == 0, run.stderr
    read, replaced = _returns(run)
    assert read["status"] == "success" and "x = 1" in read["tool_return"]
    assert replaced["status"] == "success" and (workdir / "a.py").read_text() == "x = 2\n"
