"""memory_apply_patch: a V4A patch to the memory repo, one commit, all or nothing."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from tether.core.permissions.checker import DEFAULT_ALLOWED
from tether.core.tools import Effect, ToolResult, ToolRunContext
from tether.memory.memfs import MemFS
from tether.tools.memory_patch import MemoryPatchTool
from tether.tools.toolsets import memory_tool_names

from .support import call, commit_count, git, open_memfs


@pytest.fixture
def memfs(tether_home: Path) -> MemFS:
    m = open_memfs(tether_home)
    r = call(m, {"command": "create", "reason": "seed", "path": "system/human.md",
                 "description": "About the user", "file_text": "Name: Ada\nLikes: tea\n"})
    assert not r.is_error, r.output
    return m


def patch(memfs: MemFS, text: str) -> ToolResult:
    ctx = ToolRunContext(cwd=memfs.root.parent, tool_call_id="call-1")
    return asyncio.run(MemoryPatchTool(memfs).run({"input": text}, ctx))


def snapshot(memfs: MemFS) -> dict[str, str]:
    out = {}
    for dirpath, dirs, names in os.walk(memfs.root):
        dirs[:] = [d for d in dirs if d != ".git"]
        for n in names:
            p = Path(dirpath) / n
            out[p.relative_to(memfs.root).as_posix()] = p.read_text()
    return out


def test_contract_and_which_toolsets_offer_it(memfs: MemFS) -> None:
    tool = MemoryPatchTool(memfs)
    assert tool.name == "memory_apply_patch" and tool.effect is Effect.WRITE
    assert tool.parameters["required"] == ["input"]
    assert tool.paths({"input": "x"}, Path.cwd()) == [memfs.root]
    assert "memory_apply_patch" in DEFAULT_ALLOWED  # the reference's step-11 allow-list
    assert memory_tool_names("codex", None) == ["memory_apply_patch"]
    assert memory_tool_names("codex_snake", None) == ["memory_apply_patch"]
    assert memory_tool_names("auto", "openai/gpt-5") == ["memory_apply_patch"]
    assert memory_tool_names("auto", "anthropic/claude") == ["memory"]
    assert memory_tool_names("default", "openai/gpt-5") == ["memory"]
    assert memory_tool_names("codex", None, ["Bash", "memory"]) == ["memory"]
    assert memory_tool_names("default", None, ["Read"]) == []


def test_add_update_delete_move_in_one_commit(memfs: MemFS) -> None:
    r = call(memfs, {"command": "create", "reason": "old", "path": "notes/old.md",
                     "description": "Old notes", "file_text": "stale\n"})
    assert not r.is_error
    before = commit_count(memfs)
    r = patch(memfs, """*** Begin Patch
*** Update File: system/human.md
@@
 Name: Ada
-Likes: tea
+Likes: coffee
*** Add File: projects/tether.md
+---
+description: The tether codebase
+---
+Tests: ./scripts/test
*** Delete File: notes/old.md
*** End Patch""")
    assert not r.is_error, r.output
    assert "M system/human.md" in r.output and "A projects/tether.md" in r.output
    assert commit_count(memfs) == before + 1
    subject = git(memfs.root, "log", "-1", "--format=%s").strip()
    assert subject == ("memory_apply_patch: M system/human.md, A projects/tether.md, "
                       "D notes/old.md")
    assert "Likes: coffee" in (memfs.read_head("system/human.md") or "")
    assert memfs.read_head("projects/tether.md", ) == (
        "---\ndescription: The tether codebase\n---\nTests: ./scripts/test\n")
    assert memfs.read_head("notes/old.md") is None
    assert git(memfs.root, "status", "--porcelain") == ""
    r = patch(memfs, """*** Begin Patch
*** Update File: projects/tether.md
*** Move to: projects/tether-runtime.md
@@
-Tests: ./scripts/test
+Tests: ./scripts/test (about 15 minutes)
*** End Patch""")
    assert not r.is_error, r.output
    assert memfs.read_head("projects/tether.md") is None
    assert "15 minutes" in (memfs.read_head("projects/tether-runtime.md") or "")


@pytest.mark.parametrize("text, why", [
    ("*** Begin Patch\n*** Update File: system/human.md\n@@\n-Likes: milk\n+Likes: x\n*** End Patch",
     "did not"),  # the hunk does not match
    ("*** Begin Patch\n*** Add File: system/human.md\n+again\n*** End Patch", "already exists"),
    ("*** Begin Patch\n*** Update File: nope.md\n@@\n-a\n+b\n*** End Patch", "does not exist"),
    ("*** Begin Patch\n*** Add File: ../escaped.md\n+x\n*** End Patch", ".."),
    ("*** Begin Patch\n*** Add File: /tmp/escaped.md\n+x\n*** End Patch", "relative"),
    ("*** Begin Patch\n*** Add File: .git/hooks/post-commit\n+#!/bin/sh\n*** End Patch", ".git"),
    ("*** Begin Patch\n*** Update File: system/human.md\n*** Move to: ../../out.md\n@@\n-Likes: tea\n"
     "+Likes: x\n*** End Patch", ".."),
    ("not a patch", "Begin Patch"),
])
def test_a_patch_that_fails_changes_nothing(memfs: MemFS, text: str, why: str) -> None:
    # a good first change in the same patch must not be written either
    good = "*** Begin Patch\n*** Add File: notes/first.md\n+first\n"
    full = good + text.removeprefix("*** Begin Patch\n") if text.startswith("*** Begin") else text
    before, commits = snapshot(memfs), commit_count(memfs)
    r = patch(memfs, full)
    assert r.is_error and why in r.output, r.output
    assert "No memory file was changed" in r.output
    assert snapshot(memfs) == before and commit_count(memfs) == commits
    assert not (memfs.root.parent / "escaped.md").exists() and not Path("/tmp/escaped.md").exists()


def test_read_only_files_refuse_patches(memfs: MemFS) -> None:
    path = memfs.root / "system" / "persona.md"
    path.write_text("---\ndescription: Who I am\nread_only: true\n---\nI am careful.\n")
    git(memfs.root, "add", "system/persona.md")
    git(memfs.root, "commit", "-qm", "persona")
    commits = commit_count(memfs)
    for body in (
        "*** Update File: system/persona.md\n@@\n-I am careful.\n+I am careless.\n",
        "*** Update File: system/persona.md\n@@\n-read_only: true\n+read_only: false\n",
        "*** Delete File: system/persona.md\n",
    ):
        r = patch(memfs, f"*** Begin Patch\n{body}*** End Patch")
        assert r.is_error and "read_only" in r.output, r.output
    # dropping the flag in the working tree (a shell edit) does not unlock the committed file
    path.write_text("---\ndescription: Who I am\n---\nI am careful.\n")
    r = patch(memfs, "*** Begin Patch\n*** Update File: system/persona.md\n@@\n-I am careful.\n"
                     "+I am careless.\n*** End Patch")
    assert r.is_error and "read_only" in r.output
    assert commit_count(memfs) == commits
    assert "careless" not in (memfs.read_head("system/persona.md") or "")


def test_a_symlink_in_memory_is_never_followed(memfs: MemFS, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "target.md").write_text("secret plans\n")
    os.symlink(outside, memfs.root / "linked")
    r = patch(memfs, "*** Begin Patch\n*** Update File: linked/target.md\n@@\n-secret plans\n"
                     "+overwritten\n*** End Patch")
    assert r.is_error and "symlink" in r.output
    r = patch(memfs, "*** Begin Patch\n*** Add File: linked/new.md\n+planted\n*** End Patch")
    assert r.is_error and "symlink" in r.output
    assert (outside / "target.md").read_text() == "secret plans\n"
    assert sorted(p.name for p in outside.iterdir()) == ["target.md"]


@pytest.mark.parametrize("value", [None, "", "   ", 7, "x\0y", "x" * 500_001])
def test_bad_input_is_an_error_naming_the_argument(memfs: MemFS, value: object) -> None:
    ctx = ToolRunContext(cwd=memfs.root.parent, tool_call_id="call-1")
    r = asyncio.run(MemoryPatchTool(memfs).run({"input": value}, ctx))
    assert r.is_error and "`input`" in r.output
