from __future__ import annotations

import os
from pathlib import Path

import pytest

from tether.core.tools import Effect
from tether.tools.search import GlobTool, GrepTool

from .support import run_tool


def tree(root: Path, files: dict[str, str]) -> None:
    for index, (name, text) in enumerate(files.items()):
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        # Distinct, increasing mtimes: later entries are newer.
        os.utime(path, (1_000_000 + index * 10, 1_000_000 + index * 10))


def glob(cwd: Path, **args: object) -> tuple[str, bool]:
    result = run_tool(GlobTool(), args, cwd)
    return result.output, result.is_error


def grep(cwd: Path, **args: object) -> tuple[str, bool]:
    result = run_tool(GrepTool(), args, cwd)
    return result.output, result.is_error


@pytest.fixture
def project(tmp_path: Path) -> Path:
    tree(
        tmp_path,
        {
            "old.py": "import os\n",
            "src/app.py": "def main():\n    print('hello')\n    return 0\n",
            "src/util/helpers.py": "def helper():\n    return 'HELLO'\n",
            "src/web/index.ts": "export const hello = 1;\n",
            "README.md": "# Hello\nSay hello.\n",
            ".git/config": "hello = from git\n",
            "new.py": "print('newest')\n",
        },
    )
    (tmp_path / "image.bin").write_bytes(b"hello\x00\x01binary")
    return tmp_path


def test_glob_recursive_sorted_newest_first(project: Path) -> None:
    output, is_error = glob(project, pattern="**/*.py")
    assert not is_error
    assert output.split("\n") == [
        str(project / "new.py"),
        str(project / "src/util/helpers.py"),
        str(project / "src/app.py"),
        str(project / "old.py"),
    ]


def test_glob_pattern_forms(project: Path) -> None:
    assert glob(project, pattern="*.md")[0] == str(project / "README.md")
    output, _ = glob(project, pattern="src/*.py")
    assert output == str(project / "src/app.py")
    output, _ = glob(project, pattern="src/**/*.{py,ts}")
    assert set(output.split("\n")) == {
        str(project / "src/app.py"),
        str(project / "src/util/helpers.py"),
        str(project / "src/web/index.ts"),
    }
    output, _ = glob(project, pattern=f"{project}/src/web/*")
    assert output == str(project / "src/web/index.ts")
    output, _ = glob(project, pattern="*.py", path="src/util")
    assert output == str(project / "src/util/helpers.py")
    assert glob(project, pattern="**/config") == ("No files found", False)  # .git skipped
    assert glob(project, pattern="*.rs") == ("No files found", False)


def test_glob_caps_results(tmp_path: Path) -> None:
    tree(tmp_path, {f"f{i:03}.txt": "" for i in range(150)})
    output, _ = glob(tmp_path, pattern="*.txt")
    lines = output.split("\n")
    assert len(lines) == 101
    assert lines[0] == str(tmp_path / "f149.txt")
    assert "Results are truncated" in lines[-1] and "150" in lines[-1]


def test_glob_errors(tmp_path: Path) -> None:
    output, is_error = glob(tmp_path, pattern="*", path="missing")
    assert is_error and output.startswith("Directory does not exist")
    (tmp_path / "f").write_text("")
    output, is_error = glob(tmp_path, pattern="*", path="f")
    assert is_error and "not a directory" in output
    output, is_error = glob(tmp_path, pattern=3)
    assert is_error and "`pattern` must be a string" in output


def test_grep_files_with_matches_default(project: Path) -> None:
    output, is_error = grep(project, pattern="hello")
    assert not is_error
    lines = output.split("\n")
    assert lines[0] == "Found 3 files"
    assert lines[1:] == [
        str(project / "README.md"),
        str(project / "src/web/index.ts"),
        str(project / "src/app.py"),
    ]  # newest first; binary and .git skipped


def test_grep_case_insensitive_type_and_glob(project: Path) -> None:
    output, _ = grep(project, pattern="hello", **{"-i": True}, type="py")
    assert output.split("\n")[1:] == [
        str(project / "src/util/helpers.py"),
        str(project / "src/app.py"),
    ]
    output, _ = grep(project, pattern="hello", glob="*.{ts,md}")
    assert output.split("\n")[0] == "Found 2 files"
    assert grep(project, pattern="zzz") == ("No matches found", False)


def test_grep_content_mode_with_line_numbers_and_context(project: Path) -> None:
    app = project / "src/app.py"
    output, _ = grep(project, pattern="print", output_mode="content", path="src")
    assert output == f"{app}:2:    print('hello')"
    output, _ = grep(project, pattern="print", output_mode="content", path="src", **{"-n": False})
    assert output == f"{app}:    print('hello')"
    output, _ = grep(project, pattern="print", output_mode="content", path="src", **{"-C": 1})
    assert output == (f"{app}-1-def main():\n{app}:2:    print('hello')\n{app}-3-    return 0")
    output, _ = grep(project, pattern="print", output_mode="content", path=str(app), **{"-A": 1})
    assert output == "2:    print('hello')\n3-    return 0"  # one file: no path prefix


def test_grep_context_groups_are_separated(tmp_path: Path) -> None:
    (tmp_path / "f.txt").write_text("".join(f"line{i}\n" for i in range(1, 21)))
    output, _ = grep(
        tmp_path, pattern="line(3|4|15)$", output_mode="content", path="f.txt", **{"-B": 1}
    )
    assert output == "2-line2\n3:line3\n4:line4\n--\n14-line14\n15:line15"


def test_grep_count_mode(project: Path) -> None:
    output, _ = grep(project, pattern="hello", output_mode="count", **{"-i": True})
    assert f"{project / 'README.md'}:2" in output
    assert f"{project / 'src/util/helpers.py'}:1" in output
    assert output.endswith("Found 5 matching lines in 4 files.")


def test_grep_head_limit_and_offset(tmp_path: Path) -> None:
    (tmp_path / "f.txt").write_text("".join(f"match {i}\n" for i in range(1, 11)))
    output, _ = grep(
        tmp_path, pattern="match", output_mode="content", path="f.txt", head_limit=3, offset=2
    )
    lines = output.split("\n")
    assert lines[:3] == ["3:match 3", "4:match 4", "5:match 5"]
    assert "offset=5" in output
    output, _ = grep(tmp_path, pattern="match", head_limit=1)
    assert output == f"Found 1 file\n{tmp_path / 'f.txt'}"


def test_grep_multiline(tmp_path: Path) -> None:
    (tmp_path / "f.py").write_text("class A:\n    pass\nclass B:\n    x = 1\n")
    output, _ = grep(
        tmp_path, pattern=r"class B:.*x = 1", output_mode="content", path="f.py", multiline=True
    )
    assert output == "3:class B:\n4:    x = 1"
    assert grep(tmp_path, pattern=r"B:.*x", path="f.py") == ("No matches found", False)


def test_grep_caps_output(tmp_path: Path) -> None:
    (tmp_path / "big.txt").write_text("".join(f"needle {i} {'x' * 80}\n" for i in range(2000)))
    output, _ = grep(tmp_path, pattern="needle", output_mode="content")
    assert len(output) <= 10_000
    assert "Output capped at 10000 characters" in output
    shown = output.count("needle")
    assert f"offset={shown}" in output


def test_grep_errors(project: Path) -> None:
    output, is_error = grep(project, pattern="(unclosed")
    assert is_error and output.startswith("Invalid regex pattern '(unclosed'")
    output, is_error = grep(project, pattern="x", output_mode="lines")
    assert is_error and "`output_mode` must be one of content, files_with_matches, count" in output
    output, is_error = grep(project, pattern="x", type="cobol")
    assert is_error and "Unknown file type 'cobol'" in output
    output, is_error = grep(project, pattern="x", **{"-A": "two"})
    assert is_error and "`-A` must be a number" in output
    output, is_error = grep(project, pattern="x", head_limit=-1)
    assert is_error and "`head_limit` must be at least 0" in output
    output, is_error = grep(project, pattern="x", path="nowhere")
    assert is_error and output.startswith("Path does not exist")


def test_contract_surface(tmp_path: Path) -> None:
    for tool in (GlobTool(), GrepTool()):
        assert tool.effect is Effect.READ
        assert tool.paths({"pattern": "x"}, tmp_path) == [tmp_path]
        assert tool.paths({"pattern": "x", "path": "sub"}, tmp_path) == [tmp_path / "sub"]
    props = GrepTool().parameters["properties"]
    assert set(props) == {
        "pattern",
        "path",
        "glob",
        "output_mode",
        "-A",
        "-B",
        "-C",
        "-n",
        "-i",
        "type",
        "head_limit",
        "offset",
        "multiline",
    }
    assert props["output_mode"]["enum"] == ["content", "files_with_matches", "count"]
    assert GlobTool().parameters["required"] == ["pattern"]
    # The search root a permission check sees is where the pattern really looks.
    assert GlobTool().paths({"pattern": "/etc/**/*.conf"}, tmp_path) == [Path("/etc")]
    assert GlobTool().paths({"pattern": "../up/*.py", "path": "a"}, tmp_path) == [tmp_path / "up"]
    assert GlobTool().paths({"pattern": "**/*.py", "path": "a"}, tmp_path) == [tmp_path / "a"]
