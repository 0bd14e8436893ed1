"""The conversation-state tools of the toolsets: the task list (on disk, surviving a resume),
UpdatePlan, SetWorkingDirectory, worktrees, Monitor, AskUserQuestion, ViewImage and the Gemini
adapters."""

from __future__ import annotations

import asyncio
import json
import struct
import subprocess
import zlib
from pathlib import Path
from typing import Any

import pytest

from tether.tools.ask_user import AskUserQuestionTool
from tether.tools.gemini import gemini_tools
from tether.tools.monitor import MonitorTool
from tether.tools.task_list import task_list_tools
from tether.tools.update_plan import UpdatePlanTool
from tether.tools.view_image import ViewImageTool
from tether.tools.working_dir import SetWorkingDirectoryTool, WorkingDirectory
from tether.tools.worktree import EnterWorktreeTool, ExitWorktreeTool

from .support import make_ctx, run_tool

CONVERSATION = {"TETHER_CONVERSATION_ID": "conv-1", "TETHER_AGENT_ID": "agent-1"}


def _task_tools() -> dict[str, Any]:
    return {name: make() for name, make in task_list_tools().items()}


def test_task_list_lives_on_disk_and_survives_a_new_process(tmp_path: Path, tether_home: Path) -> None:
    tools = _task_tools()
    created = run_tool(tools["TaskCreate"], {"subject": "Write tests", "description": "d"}, tmp_path,
                       env=CONVERSATION)  # fmt: skip
    assert created.output == "Task #1 created: Write tests"
    run_tool(tools["TaskCreate"], {"subject": "Ship", "description": "d"}, tmp_path, env=CONVERSATION)
    updated = run_tool(tools["TaskUpdate"], {"taskId": "2", "addBlockedBy": ["1"], "status": "in_progress"},
                       tmp_path, env=CONVERSATION)  # fmt: skip
    assert not updated.is_error, updated.output
    files = list(tether_home.glob("task-lists/*.json"))
    assert len(files) == 1
    on_disk = json.loads(files[0].read_text())
    assert [t["status"] for t in on_disk] == ["pending", "in_progress"]
    assert on_disk[0]["blocks"] == ["2"] and on_disk[1]["blockedBy"] == ["1"]
    resumed = _task_tools()  # a new run of the same conversation
    listing = run_tool(resumed["TaskList"], {}, tmp_path, env=CONVERSATION)
    assert listing.output == "#1 [pending] Write tests\n#2 [in_progress] Ship (blocked by 1)"
    other = run_tool(resumed["TaskList"], {}, tmp_path, env={**CONVERSATION, "TETHER_CONVERSATION_ID": "c2"})
    assert other.output == "No tasks."
    run_tool(resumed["TaskUpdate"], {"taskId": "1", "status": "deleted"}, tmp_path, env=CONVERSATION)
    got = run_tool(resumed["TaskGet"], {"taskId": "2"}, tmp_path, env=CONVERSATION)
    assert json.loads(got.output)["blockedBy"] == []
    missing = run_tool(resumed["TaskGet"], {"taskId": "1"}, tmp_path, env=CONVERSATION)
    assert missing.is_error and "No task with id '1'" in missing.output
    bad = run_tool(resumed["TaskUpdate"], {"taskId": "2", "status": "done"}, tmp_path, env=CONVERSATION)
    assert bad.is_error and "`status`" in bad.output


def test_update_plan_validates_and_keeps_the_plan(tmp_path: Path) -> None:
    plan: list[dict[str, str]] = []
    ok = run_tool(UpdatePlanTool(), {"plan": [{"step": "a", "status": "completed"},
                                              {"step": "b", "status": "in_progress"}]},
                  tmp_path, services={"plan": plan})  # fmt: skip
    assert ok.output == "Plan updated" and [s["step"] for s in plan] == ["a", "b"]
    two = run_tool(UpdatePlanTool(), {"plan": [{"step": "a", "status": "in_progress"}] * 2}, tmp_path)
    assert two.is_error and "At most one step" in two.output


def test_set_working_directory_stays_inside_allowed_roots(tmp_path: Path) -> None:
    work = tmp_path / "work"
    (work / "sub").mkdir(parents=True)
    moved: list[Path] = []
    wd = WorkingDirectory(work)
    wd.listeners.append(moved.append)
    tool = SetWorkingDirectoryTool()
    ok = run_tool(tool, {"path": "sub"}, work, services={"working_directory": wd})
    assert not ok.is_error and wd.current == (work / "sub").resolve() and moved == [wd.current]
    out = run_tool(tool, {"path": str(tmp_path)}, work, services={"working_directory": wd})
    assert out.is_error and "outside the directories" in out.output and wd.current == (work / "sub").resolve()
    none = run_tool(tool, {"path": "sub"}, work)
    assert none.is_error and "fixed working directory" in none.output


def _git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout


def test_worktree_enter_and_remove_refuses_dirty_tree(tmp_path: Path, tether_home: Path) -> None:
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q")
    (repo / "f").write_text("x\n")
    _git(repo, "add", "f")
    _git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "i")
    wd = WorkingDirectory(repo)
    services = {"working_directory": wd}
    entered = run_tool(EnterWorktreeTool(), {"name": "exp"}, repo, services=services, env=CONVERSATION)
    assert not entered.is_error, entered.output
    tree = wd.current
    assert tree.is_relative_to(tether_home.resolve()) and (tree / "f").read_text() == "x\n"
    (tree / "f").write_text("changed\n")
    dirty = run_tool(ExitWorktreeTool(), {"action": "remove"}, tree, services=services, env=CONVERSATION)
    assert dirty.is_error and "uncommitted changes" in dirty.output and wd.current == tree
    gone = run_tool(ExitWorktreeTool(), {"action": "remove", "discard_changes": True}, tree,
                    services=services, env=CONVERSATION)  # fmt: skip
    assert not gone.is_error, gone.output
    assert wd.current == repo.resolve() and not tree.exists()
    again = run_tool(ExitWorktreeTool(), {}, repo, services=services, env=CONVERSATION)
    assert again.is_error and "not a worktree" in again.output


def test_monitor_waits_for_a_condition_and_times_out(tmp_path: Path) -> None:
    flag = tmp_path / "ready"
    watcher = f"until [ -e {flag} ]; do sleep 0.05; done; echo seen"

    async def scenario() -> None:
        ctx = make_ctx(tmp_path)
        waiting = asyncio.ensure_future(MonitorTool().run(
            {"description": "ready file", "command": watcher, "timeout_ms": 5000}, ctx))  # fmt: skip
        await asyncio.sleep(0.3)
        flag.touch()
        met = await waiting
        assert not met.is_error and met.output.startswith("Condition met") and "seen" in met.output
        late = await MonitorTool().run(
            {"description": "never", "command": "sleep 30", "timeout_ms": 300}, ctx)
        assert late.is_error and "timed out after 300ms" in late.output
        both = await MonitorTool().run({"description": "x", "command": "true", "task_id": "bash_1"}, ctx)
        assert both.is_error and "exactly one" in both.output

    asyncio.run(scenario())


QUESTION = {"question": "Which?", "header": "Pick", "options": [{"label": "a"}, {"label": "b"}],
            "multiSelect": True}  # fmt: skip


def test_ask_user_question_formats_answers_and_says_when_nobody_answered(tmp_path: Path) -> None:
    tool = AskUserQuestionTool()
    answered = run_tool(tool, {"questions": [QUESTION], "answers": {"Which?": ["a", "b"]}}, tmp_path)
    assert answered.output.startswith('User has answered your questions: "Which?"="a, b"')
    unanswered = run_tool(tool, {"questions": [QUESTION]}, tmp_path)
    assert unanswered.is_error and "did not answer" in unanswered.output

    async def ask(questions: list[dict[str, Any]]) -> dict[str, str]:
        return {questions[0]["question"]: "b"}

    served = run_tool(tool, {"questions": [QUESTION]}, tmp_path, services={"ask_user": ask})
    assert '"Which?"="b"' in served.output
    bad = run_tool(tool, {"questions": [{**QUESTION, "options": []}]}, tmp_path)
    assert bad.is_error and "options" in bad.output


def _png(width: int, height: int) -> bytes:
    def chunk(kind: bytes, data: bytes) -> bytes:
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))

    header = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IEND", b"")


def test_view_image_reads_real_images_only(tmp_path: Path) -> None:
    (tmp_path / "a.png").write_bytes(_png(3, 2))
    (tmp_path / "t.txt").write_text("text")
    seen = run_tool(ViewImageTool(), {"path": "a.png"}, tmp_path)
    assert not seen.is_error and "image/png, 3x2" in seen.output
    text = run_tool(ViewImageTool("view_image"), {"path": "t.txt"}, tmp_path)
    assert text.is_error and "not a PNG" in text.output


@pytest.mark.parametrize(
    ("name", "args", "check"),
    [
        ("read_file", {"absolute_path": "f.txt", "offset": 1, "limit": 1}, "2\ttwo"),
        ("search_file_content", {"pattern": "tw", "include": "*.txt"}, "f.txt:2:two"),
        ("glob", {"pattern": "*.txt"}, "f.txt"),
        ("list_directory", {"path": "."}, "f.txt"),
        ("read_many_files", {"paths": ["*.txt"]}, "three"),
        ("run_shell_command", {"command": "pwd", "directory": "sub"}, "/sub"),
    ],
)
def test_gemini_tools_run_tethers_tools(tmp_path: Path, name: str, args: dict[str, Any], check: str) -> None:
    work = tmp_path / "w"
    (work / "sub").mkdir(parents=True)
    (work / "f.txt").write_text("one\ntwo\nthree\n")
    result = run_tool(gemini_tools()[name](), args, work)
    assert not result.is_error and check in result.output, result.output


def test_gemini_replace_and_write_go_through_tethers_writer(tmp_path: Path) -> None:
    work = tmp_path / "w"
    work.mkdir()
    (work / "f.txt").write_text("a a\n")
    tools = gemini_tools()
    replaced = run_tool(tools["replace"](), {"file_path": "f.txt", "old_string": "a", "new_string": "b",
                                             "expected_replacements": 2}, work)  # fmt: skip
    assert not replaced.is_error and (work / "f.txt").read_text() == "b b\n"
    (work / "link").symlink_to(tmp_path / "outside.txt")
    refused = run_tool(tools["write_file"](), {"file_path": "link", "content": "x"}, work)
    assert refused.is_error and not (tmp_path / "outside.txt").exists()
    named = run_tool(tools["read_file"](), {"absolute_path": "a\0b"}, work)
    assert named.is_error and "`absolute_path`" in named.output
    assert tools["read_file"]().paths({"absolute_path": "f.txt"}, work) == [work / "f.txt"]


def test_ask_through_the_sdk_client_when_no_approval_carried_answers(tmp_path: Path) -> None:
    from tether.tools.ask_user import ask_through_client

    sent: list[tuple[str, dict[str, Any]]] = []

    async def client(request_id: str, request: dict[str, Any]) -> dict[str, Any]:
        sent.append((request_id, request))
        answers = {request["input"]["questions"][0]["question"]: "a"}
        return {"subtype": "success", "request_id": request_id,
                "response": {"behavior": "allow", "updatedInput": {**request["input"], "answers": answers}}}  # fmt: skip

    async def refusing(request_id: str, request: dict[str, Any]) -> dict[str, Any]:
        return {"response": {"behavior": "deny", "message": "no"}}

    answered = run_tool(AskUserQuestionTool(), {"questions": [QUESTION]}, tmp_path,
                        services={"ask_user": ask_through_client(client)})  # fmt: skip
    assert '"Which?"="a"' in answered.output
    assert sent[0][0] == "ask-1" and sent[0][1]["subtype"] == "can_use_tool"
    assert sent[0][1]["tool_name"] == "AskUserQuestion"
    refused = run_tool(AskUserQuestionTool(), {"questions": [QUESTION]}, tmp_path,
                       services={"ask_user": ask_through_client(refusing)})  # fmt: skip
    assert refused.is_error and "did not answer" in refused.output


def test_tui_question_service_returns_the_dialogs_answers() -> None:
    from tether.tui.approvals import ApprovalRequest, Choice, question_service

    shown: list[ApprovalRequest] = []

    def show(request: ApprovalRequest) -> asyncio.Future[Choice]:
        shown.append(request)
        future: asyncio.Future[Choice] = asyncio.get_running_loop().create_future()
        future.set_result(Choice("answer", answers={"Which?": "b"}))
        return future

    def skipped(request: ApprovalRequest) -> asyncio.Future[Choice]:
        future: asyncio.Future[Choice] = asyncio.get_running_loop().create_future()
        future.set_result(Choice("interrupt"))
        return future

    assert asyncio.run(question_service(show)([QUESTION])) == {"Which?": "b"}
    assert shown[0].tool_name == "AskUserQuestion" and shown[0].args == {"questions": [QUESTION]}
    assert asyncio.run(question_service(skipped)([QUESTION])) is None
