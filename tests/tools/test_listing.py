from __future__ import annotations

from pathlib import Path

from tether.core.tools import Effect
from tether.tools.listing import LSTool

from .support import run_tool


def ls(cwd: Path, **args: object) -> tuple[str, bool]:
    result = run_tool(LSTool(), args, cwd)
    return result.output, result.is_error


def test_ls_tree(tmp_path: Path) -> None:
    tmp_path = tmp_path / "project"
    for name in ("b.txt", "a/x.py", "a/deeper/y.py", ".hidden/z", "__pycache__/c.pyc", "run.log"):
        path = tmp_path / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("")
    (tmp_path / "empty").mkdir()
    output, is_error = ls(tmp_path)
    assert not is_error
    assert output == "\n".join(
        [
            f"- {tmp_path}/",
            "  - a/",
            "    - deeper/",
            "      - y.py",
            "    - x.py",
            "  - b.txt",
            "  - empty/",
            "  - run.log",
        ]
    )
    output, _ = ls(tmp_path, path="a", ignore=["deeper"])
    assert output == f"- {tmp_path / 'a'}/\n  - x.py"
    output, _ = ls(tmp_path, ignore=["*.log", "a"])
    assert "run.log" not in output and "x.py" not in output and "b.txt" in output


def test_ls_caps_breadth_first(tmp_path: Path) -> None:
    tmp_path = tmp_path / "project"
    for i in range(1100):
        (tmp_path / "many" / f"d{i:04}").mkdir(parents=True)
    (tmp_path / "top.txt").write_text("")
    output, _ = ls(tmp_path)
    assert "  - top.txt" in output
    assert "Listing cut at 1000 entries" in output
    assert output.count("\n") <= 1005


def test_ls_errors(tmp_path: Path) -> None:
    output, is_error = ls(tmp_path, path="missing")
    assert is_error and output.startswith("Directory does not exist")
    (tmp_path / "f").write_text("")
    output, is_error = ls(tmp_path, path="f")
    assert is_error and "not a directory" in output and "Read" in output
    output, is_error = ls(tmp_path, ignore="*.log")
    assert is_error and "`ignore` must be a list of strings" in output
    empty = tmp_path / "e"
    empty.mkdir()
    assert ls(empty) == (f"- {empty}/\n  (empty directory)", False)


def test_contract_surface(tmp_path: Path) -> None:
    tool = LSTool()
    assert tool.effect is Effect.READ
    assert tool.paths({}, tmp_path) == [tmp_path]
    assert set(tool.parameters["properties"]) == {"path", "ignore"}
