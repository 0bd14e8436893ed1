from __future__ import annotations

import os
from pathlib import Path

import pytest

from tether.core.tools import Effect
from tether.memory import blocks
from tether.memory.memfs import MemFS
from tether.tools.memory import MEMORY_PARAMETERS, MemoryTool

from .support import call, commit_count, git, open_memfs


@pytest.fixture
def memfs(tether_home: Path) -> MemFS:
    return open_memfs(tether_home)


def create(memfs: MemFS, path: str = "system/human.md", text: str = "Name: Ada\n") -> None:
    r = call(memfs, {"command": "create", "reason": f"create {path}", "path": path,
                     "description": "About the user", "file_text": text})
    assert not r.is_error, r.output


def head_subject(memfs: MemFS) -> str:
    return git(memfs.root, "log", "-1", "--format=%s").strip()


def test_tool_contract(memfs: MemFS) -> None:
    tool = MemoryTool(memfs)
    assert tool.name == "memory" and tool.effect is Effect.WRITE
    assert MEMORY_PARAMETERS["required"] == ["command", "reason"]
    assert tool.paths({}, Path.cwd()) == [memfs.root]


def test_create_commits_with_the_reason(memfs: MemFS) -> None:
    r = call(memfs, {"command": "create", "reason": "Remember the user's name", "path": "system/human",
                     "description": "About the user", "file_text": "Name: Ada"})
    assert not r.is_error and "system/human.md" in r.output and "commit" in r.output
    assert head_subject(memfs) == "Remember the user's name"
    committed = memfs.read_head("system/human.md")
    assert committed == "---\ndescription: About the user\n---\nName: Ada\n"
    assert commit_count(memfs) == 2
    again = call(memfs, {"command": "create", "reason": "x", "path": "system/human.md", "description": "d"})
    assert again.is_error and "already exists" in again.output
    assert commit_count(memfs) == 2


def test_str_replace_insert_update_description(memfs: MemFS) -> None:
    create(memfs, text="Name: Ada\nLikes: tea\n")
    r = call(memfs, {"command": "str_replace", "reason": "coffee now", "path": "system/human.md",
                     "old_string": "tea", "new_string": "coffee"})
    assert not r.is_error, r.output
    r = call(memfs, {"command": "insert", "reason": "heading", "path": "system/human.md",
                     "insert_line": 0, "insert_text": "# Human"})
    assert not r.is_error, r.output
    r = call(memfs, {"command": "insert", "reason": "last", "path": "system/human.md",
                     "insert_line": 3, "insert_text": "Tz: UTC\n"})
    assert not r.is_error, r.output
    r = call(memfs, {"command": "update_description", "reason": "sharper", "path": "system/human.md",
                     "description": "The user: name, tastes"})
    assert not r.is_error, r.output
    f = blocks.parse(memfs.read_head("system/human.md") or "")
    assert f.body == "# Human\nName: Ada\nLikes: coffee\nTz: UTC\n"
    assert f.description == "The user: name, tastes"
    assert [c.subject for c in memfs.log(4)] == ["sharper", "last", "heading", "coffee now"]


def test_str_replace_errors(memfs: MemFS) -> None:
    create(memfs, text="a a\n")
    before = commit_count(memfs)
    r = call(memfs, {"command": "str_replace", "reason": "r", "path": "system/human.md",
                     "old_string": "zzz", "new_string": "b"})
    assert r.is_error and "not found" in r.output
    r = call(memfs, {"command": "str_replace", "reason": "r", "path": "system/human.md",
                     "old_string": "a", "new_string": "b"})
    assert r.is_error and "occurs 2 times" in r.output
    r = call(memfs, {"command": "str_replace", "reason": "r", "path": "system/human.md",
                     "old_string": "a a", "new_string": "a a"})
    assert not r.is_error and "nothing committed" in r.output
    r = call(memfs, {"command": "str_replace", "reason": "r", "path": "system/nope.md",
                     "old_string": "a", "new_string": "b"})
    assert r.is_error and "does not exist" in r.output
    assert commit_count(memfs) == before


def test_insert_errors(memfs: MemFS) -> None:
    create(memfs, text="one\n")
    for line in (-1, 5, "2", True):
        r = call(memfs, {"command": "insert", "reason": "r", "path": "system/human.md",
                         "insert_line": line, "insert_text": "x"})
        assert r.is_error and "insert_line" in r.output


def test_delete_and_rename(memfs: MemFS) -> None:
    create(memfs)
    create(memfs, "notes/a.md")
    create(memfs, "notes/deep/b.md")
    r = call(memfs, {"command": "rename", "reason": "move", "old_path": "system/human.md",
                     "new_path": "system/user.md"})
    assert not r.is_error, r.output
    assert memfs.head_paths("system") == ["system/user.md"]
    r = call(memfs, {"command": "rename", "reason": "clash", "old_path": "system/user.md",
                     "new_path": "notes/a.md"})
    assert r.is_error and "already exists" in r.output
    r = call(memfs, {"command": "delete", "reason": "obsolete", "path": "notes"})
    assert not r.is_error, r.output
    assert memfs.head_paths() == ["system/user.md"] and not (memfs.root / "notes").exists()
    r = call(memfs, {"command": "delete", "reason": "gone", "path": "system/user"})
    assert not r.is_error and memfs.head_paths() == []
    assert head_subject(memfs) == "gone"


def test_read_only_files_refuse_every_change(memfs: MemFS) -> None:
    (memfs.root / "system" / "rules.md").write_text("---\ndescription: d\nread_only: true\n---\nkeep\n")
    (memfs.root / "system" / "sub").mkdir()
    (memfs.root / "system" / "sub" / "x.md").write_text("---\nread_only: true\n---\nx\n")
    git(memfs.root, "add", "-A")
    git(memfs.root, "commit", "-qm", "seed")
    before = commit_count(memfs)
    attempts = [
        {"command": "str_replace", "path": "system/rules.md", "old_string": "keep", "new_string": "x"},
        {"command": "insert", "path": "system/rules.md", "insert_line": 0, "insert_text": "x"},
        {"command": "update_description", "path": "system/rules.md", "description": "x"},
        {"command": "delete", "path": "system/rules.md"},
        {"command": "rename", "old_path": "system/rules.md", "new_path": "system/r2.md"},
        {"command": "delete", "path": "system/sub"},
    ]
    for args in attempts:
        r = call(memfs, {**args, "reason": "try"})
        assert r.is_error and "read_only" in r.output, (args, r.output)
    # dropping the flag in the working tree without committing does not unlock it
    (memfs.root / "system" / "rules.md").write_text("---\ndescription: d\n---\nkeep\n")
    r = call(memfs, {"command": "delete", "path": "system/rules.md", "reason": "try"})
    assert r.is_error and "read_only" in r.output
    assert commit_count(memfs) == before


@pytest.mark.parametrize(
    "args",
    [
        {"command": "create", "path": "../escape.md", "description": "d"},
        {"command": "create", "path": "/tmp/escape.md", "description": "d"},
        {"command": "create", "path": ".git/hooks/pre-commit", "description": "d"},
        {"command": "rename", "old_path": "system/human.md", "new_path": "../../x.md"},
        {"command": "delete", "path": "system/../../.."},
    ],
)
def test_paths_stay_inside_the_repo(memfs: MemFS, args: dict[str, object]) -> None:
    create(memfs)
    r = call(memfs, {**args, "reason": "escape"})
    assert r.is_error and r.output.startswith("memory: ")
    assert not (memfs.root.parent / "escape.md").exists()
    assert memfs.head_paths() == ["system/human.md"]


def test_symlinks_out_are_refused(memfs: MemFS, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "victim.md").write_text("---\ndescription: v\n---\nuntouched\n")
    os.symlink(outside, memfs.root / "link")
    os.symlink(outside / "victim.md", memfs.root / "system" / "victim.md")
    for args in (
        {"command": "create", "path": "link/new.md", "description": "d"},
        {"command": "str_replace", "path": "link/victim.md", "old_string": "untouched", "new_string": "x"},
        {"command": "str_replace", "path": "system/victim.md", "old_string": "untouched", "new_string": "x"},
        {"command": "delete", "path": "system/victim.md"},
    ):
        r = call(memfs, {**args, "reason": "r"})
        assert r.is_error and "symlink" in r.output, r.output
    assert sorted(p.name for p in outside.iterdir()) == ["victim.md"]
    assert "untouched" in (outside / "victim.md").read_text()


@pytest.mark.parametrize(
    ("args", "why"),
    [
        ({"command": "create", "path": "system/a.md", "description": "d"}, "'reason'"),
        ({"command": "create", "path": "system/a.md", "description": "d", "reason": "  "}, "'reason'"),
        ({"command": "frobnicate", "reason": "r"}, "'command' must be one of"),
        ({"command": "create", "reason": "r", "description": "d"}, "'path'"),
        ({"command": "create", "reason": "r", "path": "system/a.md"}, "'description'"),
        ({"command": "create", "reason": "r", "path": "system/a.md", "description": " "}, "description"),
        ({"command": "create", "reason": "r", "path": "system/a.md", "description": "d", "file_text": 3},
         "'file_text' must be a string"),
        ({"command": "str_replace", "reason": "r", "path": "system/a.md", "old_string": "", "new_string": "x"},
         "must not be empty"),
        ({"command": "rename", "reason": "r", "old_path": "system/a.md"}, "'new_path'"),
    ],
)
def test_bad_arguments_are_clear_errors(memfs: MemFS, args: dict[str, object], why: str) -> None:
    (memfs.root / "system" / "a.md").write_text("x\n")
    r = call(memfs, args)
    assert r.is_error and why in r.output, r.output
    assert commit_count(memfs) == 1
