"""Project instructions for the system prompt: AGENTS.md / CLAUDE.md as people write them.

Found, most general first and nearest last (so the nearest file has the last word):

    $TETHER_HOME/AGENTS.md, $TETHER_HOME/CLAUDE.md     the user's own, for every project
    <repository root>/AGENTS.md, CLAUDE.md              then each folder down to ...
    <working directory>/AGENTS.md, CLAUDE.md            ... the working directory

The repository root is the nearest folder upwards holding `.git`; outside a repository only the
working directory is read (never the home folder or `/` by accident). They are text for the
model, not configuration that runs, so they load without trust. A file is read only if it
resolves inside the folder tree it was found in (its repository, or TETHER_HOME): a symlinked
AGENTS.md cannot pull `~/.ssh/id_rsa` into a prompt sent to a provider.
"""

from __future__ import annotations

from pathlib import Path

INSTRUCTION_FILES = ("AGENTS.md", "CLAUDE.md")
FILE_CAP = 40_000  # characters per instruction file
TOTAL_CAP = 120_000  # characters of all of them: the nearest files are kept first


def instruction_files(cwd: Path, home: Path | None) -> list[tuple[str, Path]]:
    """(label, path) of every instruction file that exists, most general first."""
    found: list[tuple[str, Path]] = []
    if home is not None:
        found += [(f"$TETHER_HOME/{name}", home / name) for name in INSTRUCTION_FILES
                  if _inside(home / name, home)]
    cwd = cwd.resolve()
    root = repository_root(cwd)
    folders = [cwd] if root is None else [cwd, *cwd.parents[: len(cwd.parents) - len(root.parents)]]
    boundary = root or cwd
    for folder in reversed(folders):  # root first, working directory last
        rel = folder.relative_to(boundary)
        for name in INSTRUCTION_FILES:
            path = folder / name
            if _inside(path, boundary):
                found.append(((rel / name).as_posix(), path))
    return found


def repository_root(cwd: Path) -> Path | None:
    for folder in (cwd, *cwd.parents):
        if (folder / ".git").exists():
            return folder
    return None


def read_project_instructions(cwd: Path, home: Path | None = None) -> str:
    """Each instruction file in its own `<project_instructions source=…>` tag ("" if none)."""
    parts: list[str] = []
    for label, path in instruction_files(cwd, home):
        try:
            text = path.read_text(encoding="utf-8", errors="replace").strip()
        except OSError:  # vanished, unreadable, a directory: nothing to say
            continue
        if not text:
            continue
        if len(text) > FILE_CAP:
            text = text[:FILE_CAP] + f"\n[{label} truncated at {FILE_CAP} characters]"
        parts.append(f'<project_instructions source="{label}">\n{text}\n</project_instructions>')
    while parts and sum(map(len, parts)) > TOTAL_CAP:
        parts.pop(0)  # the most general goes first: the nearest instructions matter most
    return "\n\n".join(parts)


def _inside(path: Path, boundary: Path) -> bool:
    """A regular file whose real location is inside `boundary` (symlinks resolved)."""
    try:
        real = path.resolve(strict=True)
    except (OSError, RuntimeError):
        return False
    return real.is_file() and real.is_relative_to(boundary.resolve())
