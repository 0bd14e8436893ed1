from __future__ import annotations

from pathlib import Path

from tether.core.tools import Effect
from tether.tools.edit import EditTool, MultiEditTool

from .support import run_tool


def edit(cwd: Path, **args: object) -> tuple[str, bool]:
    result = run_tool(EditTool(), args, cwd)
    return result.output, result.is_error


def test_edit_replaces_a_unique_string(tmp_path: Path) -> None:
    f = tmp_path / "m.py"
    f.write_text("def a():\n    return 1\n")
    output, is_error = edit(
        tmp_path, file_path="m.py", old_string="return 1", new_string="return 2"
    )
    assert not is_error
    assert f.read_text() == "def a():\n    return 2\n"
    assert output.startswith(f"The file {f} has been updated (1 occurrence replaced)")
    assert "     2\t    return 2" in output


def test_edit_refuses_ambiguous_match_unless_replace_all(tmp_path: Path) -> None:
    f = tmp_path / "m.txt"
    f.write_text("x = 1\ny = 1\nz = 1\n")
    output, is_error = edit(tmp_path, file_path="m.txt", old_string="= 1", new_string="= 2")
    assert is_error
    assert "Found 3 matches" in output and "replace_all" in output and "context" in output
    assert f.read_text() == "x = 1\ny = 1\nz = 1\n"
    output, is_error = edit(
        tmp_path, file_path="m.txt", old_string="= 1", new_string="= 2", replace_all=True
    )
    assert not is_error and "3 occurrences replaced" in output
    assert f.read_text() == "x = 2\ny = 2\nz = 2\n"


def test_edit_errors(tmp_path: Path) -> None:
    f = tmp_path / "m.txt"
    f.write_text("hello\n")
    output, is_error = edit(tmp_path, file_path="m.txt", old_string="bye", new_string="x")
    assert is_error and output.startswith("String to replace not found in file.\nString: bye")
    output, is_error = edit(tmp_path, file_path="m.txt", old_string="hello", new_string="hello")
    assert is_error and "exactly the same" in output
    output, is_error = edit(tmp_path, file_path="gone.txt", old_string="a", new_string="b")
    assert is_error and output.startswith(f"File does not exist: {tmp_path / 'gone.txt'}")
    output, is_error = edit(tmp_path, file_path="m.txt", old_string="", new_string="x")
    assert is_error and "already has content" in output
    output, is_error = edit(
        tmp_path, file_path="m.txt", old_string="hello", new_string="x", replace_all="yes"
    )
    assert is_error and "`replace_all` must be a boolean" in output
    (tmp_path / "bin").write_bytes(b"a\x00b")
    output, is_error = edit(tmp_path, file_path="bin", old_string="a", new_string="b")
    assert is_error and "binary" in output
    assert f.read_text() == "hello\n"


def test_edit_with_empty_old_string_creates_a_missing_file(tmp_path: Path) -> None:
    output, is_error = edit(tmp_path, file_path="new/file.txt", old_string="", new_string="hi\n")
    assert not is_error and "created" in output
    assert (tmp_path / "new" / "file.txt").read_text() == "hi\n"


def test_edit_matches_lf_strings_in_crlf_files(tmp_path: Path) -> None:
    f = tmp_path / "w.txt"
    f.write_bytes(b"one\r\ntwo\r\nthree\r\n")
    output, is_error = edit(tmp_path, file_path="w.txt", old_string="one\ntwo", new_string="1\n2")
    assert not is_error, output
    assert f.read_bytes() == b"1\r\n2\r\nthree\r\n"


def multi(cwd: Path, **args: object) -> tuple[str, bool]:
    result = run_tool(MultiEditTool(), args, cwd)
    return result.output, result.is_error


def test_multiedit_applies_in_order(tmp_path: Path) -> None:
    f = tmp_path / "c.py"
    f.write_text("a = 1\nb = a\nprint(a)\n")
    output, is_error = multi(
        tmp_path,
        file_path="c.py",
        edits=[
            {"old_string": "a = 1", "new_string": "alpha = 1"},
            {"old_string": "alpha = 1\nb = a", "new_string": "alpha = 1\nb = alpha"},
            {"old_string": "print(a)", "new_string": "print(alpha, b)", "replace_all": True},
        ],
    )
    assert not is_error, output
    assert "Applied 3 edits" in output
    assert f.read_text() == "alpha = 1\nb = alpha\nprint(alpha, b)\n"


def test_multiedit_is_all_or_nothing(tmp_path: Path) -> None:
    f = tmp_path / "c.txt"
    f.write_text("one two three\n")
    before = f.stat().st_mtime_ns
    output, is_error = multi(
        tmp_path,
        file_path="c.txt",
        edits=[
            {"old_string": "one", "new_string": "1"},
            {"old_string": "missing", "new_string": "x"},
            {"old_string": "three", "new_string": "3"},
        ],
    )
    assert is_error
    assert output.startswith("Edit at index 1 (edit 2 of 3) failed: String to replace not found")
    assert "No edits were applied; the file is unchanged." in output
    assert f.read_text() == "one two three\n"
    assert f.stat().st_mtime_ns == before


def test_multiedit_argument_errors(tmp_path: Path) -> None:
    (tmp_path / "c.txt").write_text("abc")
    output, is_error = multi(tmp_path, file_path="c.txt", edits="old->new")
    assert is_error and "`edits` must be a list" in output
    output, is_error = multi(tmp_path, file_path="c.txt", edits=[])
    assert is_error and "`edits` is empty" in output
    output, is_error = multi(tmp_path, file_path="c.txt", edits=[{"old_string": "a"}])
    assert is_error and "edits[0]" in output and "`new_string`" in output
    output, is_error = multi(tmp_path, file_path="c.txt", edits=["a"])
    assert is_error and "edits[0] must be an object" in output
    output, is_error = multi(
        tmp_path, file_path="c.txt", edits=[{"old_string": "a", "new_string": "a"}]
    )
    assert is_error and "index 0" in output and "exactly the same" in output
    assert (tmp_path / "c.txt").read_text() == "abc"


def test_multiedit_can_create_a_file(tmp_path: Path) -> None:
    output, is_error = multi(
        tmp_path,
        file_path="n.txt",
        edits=[
            {"old_string": "", "new_string": "hello world"},
            {"old_string": "world", "new_string": "there"},
        ],
    )
    assert not is_error, output
    assert (tmp_path / "n.txt").read_text() == "hello there"


def test_contract_surface(tmp_path: Path) -> None:
    for tool in (EditTool(), MultiEditTool()):
        assert tool.effect is Effect.WRITE
        assert tool.paths({"file_path": "x.py"}, tmp_path) == [tmp_path / "x.py"]
    assert EditTool().parameters["required"] == ["file_path", "old_string", "new_string"]
    assert MultiEditTool().parameters["required"] == ["file_path", "edits"]
    item = MultiEditTool().parameters["properties"]["edits"]["items"]
    assert item["required"] == ["old_string", "new_string"]
