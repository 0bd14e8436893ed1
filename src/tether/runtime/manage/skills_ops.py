"""Skills: list what a run would see, install a skill folder (a directory or a git repository)
into an agent's memory or the global skills, and delete one."""

from __future__ import annotations

import os
import shutil
import stat
import subprocess
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tether.errors import NotFound, UsageError
from tether.runtime.extensions.skills import (
    SKILL_FILE,
    SOURCES,
    Skill,
    discover_skills,
    parse_skill,
)
from tether.runtime.manage.memory_ops import open_memory

if TYPE_CHECKING:
    from tether.backends.store_api import ConversationStore

MAX_FILES = 500
MAX_BYTES = 5_000_000


def list_skills(
    store: ConversationStore, cwd: Path, agent_id: str | None = None, *, project_trusted: bool = False
) -> list[dict[str, Any]]:
    """Every skill a run in `cwd` would offer (the agent's own when `agent_id` is given), the
    highest-precedence source winning a name."""
    memfs = None
    if agent_id:
        from tether.memory.memfs import MemFS, memory_dir

        agent = store.get_agent(agent_id)  # NotFound names it
        found = MemFS(memory_dir(store.home, agent.id), agent_id=agent.id, agent_name=agent.name)
        memfs = found if found.exists else None  # listing creates nothing
    catalog = discover_skills(home=store.home, cwd=cwd, sources=frozenset(SOURCES),
                              project_trusted=project_trusted, memfs=memfs)
    return [_row(s) for s in catalog.all().values()]


def install_skill(
    store: ConversationStore,
    source: str,
    *,
    agent_id: str | None = None,
    subdir: str | None = None,
    force: bool = False,
) -> dict[str, Any]:
    """Copy the skill at `source` (a folder holding SKILL.md, a SKILL.md file, or
    `git:<url>[#<ref>]`) into the agent's memory (`skills/<name>/`, one commit) or, without an
    agent, into `$TETHER_HOME/skills/<name>`. An existing skill of that name needs `force`."""
    with tempfile.TemporaryDirectory(prefix="tether-skill-") as scratch:
        folder = _fetch(source, Path(scratch), subdir)
        text = _read_text(folder / SKILL_FILE)
        skill = parse_skill(text, folder.name if folder.name != "checkout" else "skill",
                            "agent" if agent_id else "global", str(folder))
        if isinstance(skill, str):
            raise UsageError(skill)
        files = _collect(folder)
        if agent_id is not None:
            return _into_memory(store, agent_id, skill, files, source, force)
        return _into_global(store, skill, files, force)


def delete_skill(store: ConversationStore, name: str, *, agent_id: str | None = None) -> dict[str, Any]:
    if agent_id is not None:
        memfs = open_memory(store, agent_id)
        prefix = f"skills/{name}"
        with memfs.writing():
            if not memfs.head_paths(prefix):
                raise NotFound(f"agent {agent_id} has no skill {name!r} in its memory")
            shutil.rmtree(memfs.resolve(prefix), ignore_errors=True)
            commit = memfs.commit([prefix], f"skills: delete {name}")
        return {"name": name, "deleted": True, "source": "agent", "agent_id": agent_id,
                "commit": commit}
    target = store.home / "skills" / name
    if not (target / SKILL_FILE).is_file() or "/" in name or name in (".", ".."):
        raise NotFound(f"no global skill {name!r} in {store.home / 'skills'}")
    shutil.rmtree(target)
    return {"name": name, "deleted": True, "source": "global", "location": str(target)}


def _row(skill: Skill) -> dict[str, Any]:
    return {"name": skill.name, "description": skill.description, "source": skill.source,
            "location": skill.location}


def _fetch(source: str, scratch: Path, subdir: str | None) -> Path:
    if source.startswith("git:"):
        url, _, ref = source[4:].partition("#")
        if not url:
            raise UsageError("git: needs a repository, e.g. git:https://host/owner/repo#main")
        root = scratch / "checkout"
        argv = ["git", "-c", "core.hooksPath=/dev/null", "-c", "protocol.ext.allow=never", "clone",
                "-q", "--depth", "1", "--no-recurse-submodules"]
        if ref:
            argv += ["--branch", ref]
        env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
        env.update(GIT_CONFIG_GLOBAL=os.devnull, GIT_CONFIG_NOSYSTEM="1", GIT_TERMINAL_PROMPT="0")
        proc = subprocess.run([*argv, "--", url, str(root)], capture_output=True, env=env,
                              check=False)
        if proc.returncode != 0:
            why = proc.stderr.decode(errors="replace").strip().splitlines()
            raise UsageError(f"could not clone {url}: {why[-1] if why else 'git failed'}")
    else:
        root = Path(source).expanduser()
        if root.name == SKILL_FILE and root.is_file():
            root = root.parent
        if not root.is_dir():
            raise UsageError(f"{source}: no such folder (a skill is a folder holding {SKILL_FILE}, "
                             "or git:<url>)")
    folder = root / subdir if subdir else root
    if subdir and (".." in Path(subdir).parts or Path(subdir).is_absolute()):
        raise UsageError(f"--path {subdir!r} must be a folder inside the source")
    if not (folder / SKILL_FILE).is_file():
        raise UsageError(f"{source}{'/' + subdir if subdir else ''}: no {SKILL_FILE} there")
    return folder


def _collect(folder: Path) -> dict[str, bytes]:
    """Every regular file of the skill (relative path -> bytes), `.git` left out; a symlink or
    special file is refused, and so is a skill over MAX_FILES files or MAX_BYTES."""
    files: dict[str, bytes] = {}
    total = 0
    for dirpath, dirnames, filenames in os.walk(folder):
        dirnames[:] = sorted(d for d in dirnames if d != ".git")
        for name in [*dirnames, *filenames]:
            path = Path(dirpath) / name
            mode = os.lstat(path).st_mode
            if stat.S_ISLNK(mode) or not (stat.S_ISDIR(mode) or stat.S_ISREG(mode)):
                raise UsageError(f"{path}: a skill may hold only regular files and folders "
                                 "(no symlinks or special files)")
        for name in sorted(filenames):
            path = Path(dirpath) / name
            data = path.read_bytes()
            total += len(data)
            files[path.relative_to(folder).as_posix()] = data
            if len(files) > MAX_FILES or total > MAX_BYTES:
                raise UsageError(f"{folder}: a skill is limited to {MAX_FILES} files and "
                                 f"{MAX_BYTES // 1_000_000} MB")
    return files


def _into_memory(
    store: ConversationStore, agent_id: str, skill: Skill, files: dict[str, bytes], source: str, force: bool
) -> dict[str, Any]:
    memfs = open_memory(store, agent_id, create=True)
    prefix = f"skills/{skill.name}"
    with memfs.writing():
        if any(line[3:].startswith(prefix + "/") for line in memfs.status_lines()):
            raise UsageError(f"{memfs.root}/{prefix} has uncommitted changes; commit or discard "
                             "them first (see `tether memory diff`)")
        if memfs.head_paths(prefix) and not force:
            raise UsageError(f"agent {agent_id} already has a skill {skill.name!r}; pass --force "
                             "to replace it")
        shutil.rmtree(memfs.resolve(prefix), ignore_errors=True)
        for rel, data in files.items():
            target = memfs.resolve(f"{prefix}/{rel}")
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_bytes(data)
        commit = memfs.commit([prefix], f"skills: install {skill.name} from {source}")
    return {**_row(Skill(skill.name, skill.description, "agent", f"memory:{prefix}")),
            "agent_id": agent_id, "files": len(files), "commit": commit}


def _into_global(store: ConversationStore, skill: Skill, files: dict[str, bytes], force: bool) -> dict[str, Any]:
    root = store.home / "skills"
    target = root / skill.name
    if target.exists() and not force:
        raise UsageError(f"{target} already exists; pass --force to replace it")
    root.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{skill.name}-", dir=root))
    try:
        for rel, data in files.items():
            path = staging / rel
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
        old = None
        if target.exists():
            old = root / f".{skill.name}-replaced-{os.getpid()}"
            os.replace(target, old)
        os.replace(staging, target)
        if old is not None:
            shutil.rmtree(old, ignore_errors=True)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return {**_row(Skill(skill.name, skill.description, "global", str(target))),
            "files": len(files)}


def _read_text(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise UsageError(f"{path} is not UTF-8 text") from None
