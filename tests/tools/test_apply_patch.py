"""ApplyPatch: V4A patches on real files, all-or-nothing, and the paths permissions see."""

from __future__ import annotations

from pathlib import Path

import pytest

from tether.tools.apply_patch import ApplyPatchTool

from .support import run_tool

THREE_FILES = """\
*** Begin Patch
*** Update File: a.py
@@ def main():
     x = 1
-    print("hi")
+    print("hello")
     return x
*** Add File: new/b.txt
+one
+two
*** Delete File: c.txt
*** End Patch
"""


def _tree(tmp_path: Path) -> Path:
    tmp_path = tmp_path / "work"
    tmp_path.mkdir()
    (tmp_path / "a.py").write_text('import os\n\ndef main():\n    x = 1\n    print("hi")\n    return x\n')
    (tmp_path / "c.txt").write_text("bye\n")
    return tmp_path


def test_patch_touching_three_files_applies(tmp_path: Path) -> None:
    tmp_path = _tree(tmp_path)
    result = run_tool(ApplyPatchTool(), {"input": THREE_FILES}, tmp_path)
    assert not result.is_error, result.output
    assert (tmp_path / "a.py").read_text().splitlines()[4] == '    print("hello")'
    assert (tmp_path / "new/b.txt").read_text() == "one\ntwo\n"
    assert not (tmp_path / "c.txt").exists()
    assert "M a.py" in result.output and "A new/b.txt" in result.output


@pytest.mark.parametrize(
    "bad_hunk",
    [
        "@@ def main():\n-    print('nope')\n+    print('x')\n",  # removed line not in file
        "@@ def missing():\n     x = 1\n",  # anchor not in file
    ],
)
def test_bad_hunk_leaves_every_file_unchanged(tmp_path: Path, bad_hunk: str) -> None:
    tmp_path = _tree(tmp_path)
    before = {p.name: p.read_text() for p in tmp_path.iterdir()}
    patch = (
        "*** Begin Patch\n*** Add File: added.txt\n+x\n*** Delete File: c.txt\n"
        f"*** Update File: a.py\n{bad_hunk}*** End Patch"
    )
    result = run_tool(ApplyPatchTool(), {"input": patch}, tmp_path)
    assert result.is_error
    assert "Hunk 1 of a.py did not apply" in result.output
    assert {p.name: p.read_text() for p in tmp_path.iterdir()} == before


def test_move_and_context_with_trailing_whitespace(tmp_path: Path) -> None:
    (tmp_path / "old.txt").write_text("alpha  \nbeta\ngamma\n")
    patch = (
        "*** Begin Patch\n*** Update File: old.txt\n*** Move to: sub/new.txt\n@@\n alpha\n-beta\n"
        "+BETA\n*** End Patch"
    )
    result = run_tool(ApplyPatchTool(), {"input": patch}, tmp_path)
    assert not result.is_error, result.output
    assert not (tmp_path / "old.txt").exists()
    assert (tmp_path / "sub/new.txt").read_text() == "alpha  \nBETA\ngamma\n"


@pytest.mark.parametrize(
    ("patch", "message"),
    [
        ("no markers", "must start with '*** Begin Patch'"),
        ("*** Begin Patch\n*** Update File: a.py\n", "must end with '*** End Patch'"),
        ("*** Begin Patch\n*** Frobnicate: a\n*** End Patch", "expected '*** Add File:'"),
        ("*** Begin Patch\n*** Add File: a.py\n+x\n*** End Patch", "already exists"),
        ("*** Begin Patch\n*** Update File: zz\n@@\n-a\n*** End Patch", "does not exist"),
        ("*** Begin Patch\n*** Add File: q\nno plus\n*** End Patch", "starts with '+'"),
    ],
)
def test_malformed_patches_name_the_problem(tmp_path: Path, patch: str, message: str) -> None:
    tmp_path = _tree(tmp_path)
    result = run_tool(ApplyPatchTool(), {"input": patch}, tmp_path)
    assert result.is_error and message in result.output, result.output
    assert not (tmp_path / "q").exists()


def test_paths_are_every_touched_file(tmp_path: Path) -> None:
    tool = ApplyPatchTool()
    paths = tool.paths({"input": THREE_FILES}, tmp_path)
    assert paths == [tmp_path / "a.py", tmp_path / "new/b.txt", tmp_path / "c.txt"]
    moved = "*** Begin Patch\n*** Update File: x\n*** Move to: /etc/y\n*** End Patch"
    assert tool.paths({"input": moved}, tmp_path) == [tmp_path / "x", Path("/etc/y")]
    assert tool.paths({"input": 5}, tmp_path) == []


def test_symlink_out_of_workspace_is_refused(tmp_path: Path) -> None:
    outside = tmp_path / "outside.txt"
    outside.write_text("secret\n")
    work = tmp_path / "work"
    work.mkdir()
    (work / "link.txt").symlink_to(outside)
    patch = "*** Begin Patch\n*** Update File: link.txt\n@@\n-secret\n+owned\n*** End Patch"
    result = run_tool(ApplyPatchTool(), {"input": patch}, work)
    assert result.is_error and "symlink" in result.output
    assert outside.read_text() == "secret\n"
