from __future__ import annotations

import os
import stat
from pathlib import Path

from tether.core.tools import Effect
from tether.tools.files import EMPTY_FILE_NOTE, ReadTool, WriteTool

from .support import run_tool


def read(cwd: Path, **args: object) -> tuple[str, bool]:
    result = run_tool(ReadTool(), args, cwd)
    return result.output, result.is_error


def test_read_numbers_lines_like_cat_n(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("alpha\n\tbeta\r\ngamma")
    output, is_error = read(tmp_path, file_path="a.txt")
    assert not is_error
    assert output == "     1\talpha\n     2\t\tbeta\n     3\tgamma"


def test_read_offset_and_limit(tmp_path: Path) -> None:
    (tmp_path / "n.txt").write_text("".join(f"line {i}\n" for i in range(1, 11)))
    output, _ = read(tmp_path, file_path=str(tmp_path / "n.txt"), offset=4, limit=3)
    lines = output.split("\n")
    assert lines[:3] == ["     4\tline 4", "     5\tline 5", "     6\tline 6"]
    assert "Showing lines 4-6 of 10" in output
    assert "offset=7" in output
    output, _ = read(tmp_path, file_path="n.txt", offset=9)
    assert output == "     9\tline 9\n    10\tline 10"
    output, is_error = read(tmp_path, file_path="n.txt", offset=50)
    assert not is_error and "only 10 lines" in output


def test_read_defaults_to_2000_lines(tmp_path: Path) -> None:
    (tmp_path / "big.txt").write_text("".join(f"{i}\n" for i in range(1, 2501)))
    output, _ = read(tmp_path, file_path="big.txt")
    body = output.split("\n\n")[0].split("\n")
    assert len(body) == 2000
    assert body[-1] == "  2000\t2000"
    assert "Showing lines 1-2000 of 2500" in output and "offset=2001" in output


def test_read_cuts_long_lines_and_caps_total_output(tmp_path: Path) -> None:
    (tmp_path / "wide.txt").write_text("x" * 5000 + "\nshort\n")
    output, _ = read(tmp_path, file_path="wide.txt")
    first = output.split("\n")[0]
    assert first == "     1\t" + "x" * 2000
    assert "longer than 2000 characters" in output

    (tmp_path / "many.txt").write_text(("y" * 1000 + "\n") * 100)
    output, _ = read(tmp_path, file_path="many.txt")
    assert len(output) <= 30_000
    assert "Output capped at 30000 characters" in output
    shown = [line for line in output.split("\n") if "\ty" in line]
    assert f"offset={len(shown) + 1}" in output


def test_read_errors(tmp_path: Path) -> None:
    output, is_error = read(tmp_path, file_path="nope.txt")
    assert is_error and output.startswith(f"File does not exist: {tmp_path / 'nope.txt'}")
    output, is_error = read(tmp_path, file_path=str(tmp_path))
    assert is_error and "is a directory" in output and "LS" in output
    (tmp_path / "blob.bin").write_bytes(b"\x89PNG\x00\x01\x02")
    output, is_error = read(tmp_path, file_path="blob.bin")
    assert is_error and "binary" in output
    output, is_error = read(tmp_path, file_path="x", offset="ten")
    assert is_error and "`offset` must be a number" in output
    output, is_error = read(tmp_path, file_path="x", limit=0)
    assert is_error and "`limit` must be at least 1" in output
    output, is_error = read(tmp_path, file_path=42)
    assert is_error and "`file_path` must be a string" in output


def test_read_empty_file(tmp_path: Path) -> None:
    (tmp_path / "empty").write_text("")
    assert read(tmp_path, file_path="empty") == (EMPTY_FILE_NOTE, False)
    assert "empty" in EMPTY_FILE_NOTE


def test_write_creates_parents_and_overwrites_keeping_mode(tmp_path: Path) -> None:
    target = tmp_path / "deep" / "er" / "f.sh"
    result = run_tool(WriteTool(), {"file_path": "deep/er/f.sh", "content": "one\n"}, tmp_path)
    assert not result.is_error
    assert result.output.startswith(f"File created successfully at: {target}")
    assert target.read_text() == "one\n"
    os.chmod(target, 0o750)
    result = run_tool(WriteTool(), {"file_path": str(target), "content": "two"}, tmp_path)
    assert not result.is_error and "overwritten" in result.output
    assert target.read_text() == "two"
    assert stat.S_IMODE(target.stat().st_mode) == 0o750
    assert [p.name for p in target.parent.iterdir()] == ["f.sh"]  # no temp file left behind


def test_write_through_a_symlink_changes_the_target(tmp_path: Path) -> None:
    real = tmp_path / "real.txt"
    real.write_text("old")
    (tmp_path / "link.txt").symlink_to(real)
    run_tool(WriteTool(), {"file_path": "link.txt", "content": "new"}, tmp_path)
    assert (tmp_path / "link.txt").is_symlink()
    assert real.read_text() == "new"


def test_write_errors(tmp_path: Path) -> None:
    result = run_tool(WriteTool(), {"file_path": str(tmp_path), "content": "x"}, tmp_path)
    assert result.is_error and "is a directory" in result.output
    (tmp_path / "file").write_text("")
    result = run_tool(WriteTool(), {"file_path": "file/child", "content": "x"}, tmp_path)
    assert result.is_error and result.output.startswith("Could not write")
    result = run_tool(WriteTool(), {"file_path": "ok", "content": None}, tmp_path)
    assert result.is_error and "`content`" in result.output


def test_contract_surface(tmp_path: Path) -> None:
    assert ReadTool().effect is Effect.READ and WriteTool().effect is Effect.WRITE
    assert ReadTool().paths({"file_path": "a/../b.txt"}, tmp_path) == [tmp_path / "b.txt"]
    assert WriteTool().paths({"file_path": "/etc/x"}, tmp_path) == [Path("/etc/x")]
    assert WriteTool().paths({}, tmp_path) == []
    assert ReadTool().parameters["required"] == ["file_path"]
    assert set(ReadTool().parameters["properties"]) == {"file_path", "offset", "limit"}
    assert WriteTool().parameters["required"] == ["file_path", "content"]
