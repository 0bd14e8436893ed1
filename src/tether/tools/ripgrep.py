"""Listing a tree's files the way users expect, with ripgrep: `.gitignore`, `.ignore` and
`.rgignore` respected (in a git repository or not), hidden files included, VCS metadata skipped,
symlinks never followed.

`rg` comes with the `ripgrep` package (next to the interpreter); without it the pure-Python walk
of `globbing.walk_files` is used (no ignore files). ripgrep only finds candidates: every file it
names is checked here again (a regular file, not a link, inside the root, not hidden by the
`ReadBoundary`, not denied) before a tool shows or opens it, and Grep still reads each file
through `confined.open_regular` and matches it with Python's `re`, so rg never decides alone.
"""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import sys
import sysconfig
from collections.abc import Callable, Iterator
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    from tether.tools.boundary import ReadBoundary

_BASE_ARGS = (
    "--hidden", "--no-require-git", "--no-config", "--no-messages", "--null",
    "-g", "!.git", "-g", "!.hg", "-g", "!.svn",
)  # fmt: skip
_READ_CHUNK = 1 << 16


class ListedFile(NamedTuple):
    relative: str  # from the search root, `/`-separated
    path: str  # the root joined with `relative`
    real: str
    mtime: float
    size: int


@cache
def rg_binary() -> str | None:
    """The `rg` of the `ripgrep` package (the interpreter's scripts dir), else one on PATH."""
    for folder in (sysconfig.get_path("scripts"), os.path.dirname(sys.executable)):
        candidate = os.path.join(folder, "rg")
        if os.access(candidate, os.X_OK):
            return candidate
    return shutil.which("rg")


def run_rg(args: list[str], cwd: Path, should_stop: Callable[[], bool]) -> tuple[list[str], int, str]:
    """rg's NUL-separated output lines, exit code and stderr; killed early on `should_stop`."""
    binary = rg_binary()
    assert binary is not None
    proc = subprocess.Popen(
        [binary, *_BASE_ARGS, *args], cwd=cwd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
        stderr=subprocess.PIPE, env={"PATH": os.environ.get("PATH", ""), "HOME": os.environ.get("HOME", "/")},
    )  # fmt: skip
    assert proc.stdout is not None and proc.stderr is not None
    data = bytearray()
    try:
        while chunk := os.read(proc.stdout.fileno(), _READ_CHUNK):
            data += chunk
            if should_stop():
                proc.kill()
                break
        err = proc.stderr.read().decode("utf-8", "replace")
    finally:
        proc.stdout.close()
        proc.stderr.close()
        code = proc.wait()
    names = [n.decode("utf-8", "surrogateescape") for n in bytes(data).split(b"\0") if n]
    return names, code, err


def vetted(root: Path, relatives: list[str], boundary: ReadBoundary | None) -> Iterator[ListedFile]:
    """The regular files among `relatives` that the boundary lets a tool show, with their stat."""
    top = os.path.realpath(root)
    base = os.fspath(root)
    for relative in relatives:
        relative = relative.removeprefix("./")
        path = os.path.join(base, relative)
        try:
            info = os.lstat(path)
        except OSError:
            continue
        if not stat.S_ISREG(info.st_mode):
            continue  # links (never followed), FIFOs, devices
        real = os.path.join(top, relative)
        if boundary is not None and boundary.why_hidden(real) is not None:
            continue
        yield ListedFile(relative, path, real, info.st_mtime, info.st_size)


def list_files(
    root: Path, should_stop: Callable[[], bool], boundary: ReadBoundary | None
) -> list[ListedFile] | None:
    """Every file below `root` a search may consider; None when rg is not installed."""
    if rg_binary() is None:
        return None
    names, _, _ = run_rg(["--files"], root, should_stop)
    return list(vetted(root, names, boundary))


def files_matching(
    root: Path,
    pattern: str,
    *,
    ignore_case: bool,
    should_stop: Callable[[], bool],
    boundary: ReadBoundary | None,
    max_bytes: int,
) -> list[ListedFile] | None:
    """Files rg says may match `pattern` (a superset check is left to the caller's `re`);
    None when rg is missing or cannot read the pattern (then search every listed file)."""
    if rg_binary() is None:
        return None
    args = ["--files-with-matches", "--crlf", f"--max-filesize={max_bytes}"]
    if ignore_case:
        args.append("--ignore-case")
    names, code, err = run_rg([*args, "--regexp", pattern], root, should_stop)
    if code == 2 and not names and err.strip():
        return None  # a regex rg's engine does not take (look-around, backreferences)
    return list(vetted(root, names, boundary))
