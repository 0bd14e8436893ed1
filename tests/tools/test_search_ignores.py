"""Grep and Glob as users expect them: ignore files respected, `.git` skipped, newest first,
ripgrep's answer re-checked by tether (deny rules, look-around patterns ripgrep cannot read)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from tether.tools import ripgrep
from tether.tools.search import GlobTool, GrepTool

from .support import run_tool


@pytest.fixture
def node_project(tmp_path: Path) -> Path:
    root = tmp_path / "proj"
    files = {
        ".gitignore": "node_modules/\n*.log\n",
        "lib/.ignore": "generated.js\n",
        "src/a.js": "const needle = 1;\n",
        "src/b.js": "const other = 2;\n",
        "lib/generated.js": "needle()\n",
        "lib/kept.js": "needle()\n",
        "debug.log": "needle in a log\n",
        ".hidden/conf.js": "needle hidden\n",
        ".git/HEAD": "needle in git\n",
        "node_modules/pkg/index.js": "needle in a dependency\n",
    }
    for index, (name, text) in enumerate(files.items()):
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        os.utime(path, (1_000_000 + index, 1_000_000 + index))
    return root


def test_rg_ships_with_tether() -> None:
    assert ripgrep.rg_binary() is not None


def test_glob_skips_ignored_files_and_git_and_sorts_newest_first(node_project: Path) -> None:
    output = run_tool(GlobTool(), {"pattern": "**/*.js"}, node_project).output
    names = [line.removeprefix(str(node_project) + "/") for line in output.splitlines()]
    assert names == [".hidden/conf.js", "lib/kept.js", "src/b.js", "src/a.js"]


def test_grep_skips_ignored_files_in_every_mode(node_project: Path) -> None:
    files = run_tool(GrepTool(), {"pattern": "needle"}, node_project).output
    assert "node_modules" not in files and "debug.log" not in files and ".git/" not in files
    assert "generated.js" not in files and "kept.js" in files and "conf.js" in files
    content = run_tool(GrepTool(), {"pattern": "needle", "output_mode": "content"}, node_project)
    assert "dependency" not in content.output and "src/a.js:1:const needle = 1;" in content.output


def test_an_ignored_folder_named_as_the_path_is_searched(node_project: Path) -> None:
    output = run_tool(GrepTool(), {"pattern": "needle", "path": "node_modules"}, node_project).output
    assert "node_modules/pkg/index.js" in output
    output = run_tool(GlobTool(), {"pattern": "node_modules/**/*.js"}, node_project).output
    assert output.endswith("node_modules/pkg/index.js")


def test_patterns_ripgrep_cannot_read_are_still_searched_by_re(node_project: Path) -> None:
    output = run_tool(GrepTool(), {"pattern": r"needle(?= =)", "output_mode": "content"}, node_project)
    assert "src/a.js:1:const needle = 1;" in output.output and "kept.js" not in output.output
    output = run_tool(GrepTool(), {"pattern": "NEEDLE", "-i": True}, node_project).output
    assert "src/a.js" in output


def test_deny_rules_still_apply_to_what_ripgrep_found(node_project: Path) -> None:
    def denied(path: Path) -> bool:
        return path.name == "a.js"

    output = run_tool(GrepTool(), {"pattern": "needle"}, node_project, services={"read_denied": denied})
    assert "src/a.js" not in output.output and "kept.js" in output.output


def test_a_file_swapped_for_a_link_after_listing_is_not_read(node_project: Path, tmp_path: Path) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("needle SECRET\n")
    (node_project / "src" / "a.js").unlink()
    (node_project / "src" / "a.js").symlink_to(secret)
    output = run_tool(GrepTool(), {"pattern": "needle", "output_mode": "content"}, node_project).output
    assert "SECRET" not in output
