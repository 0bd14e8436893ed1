"""An agent's memory files from outside a run: list and read what is committed, write or delete
one file as one commit, and the commits that touched a file (the App Server's memory requests).
Paths are memory-relative and confined by `memfs.normalize_path` and `MemFS.resolve`."""

from __future__ import annotations

import base64
import binascii
from typing import TYPE_CHECKING, Any

from tether.backends.local.locks import write_atomic
from tether.errors import UsageError
from tether.runtime.manage.memory_ops import open_memory

if TYPE_CHECKING:
    from tether.backends.store_api import ConversationStore

ENCODINGS = ("utf8", "base64")


def _path(raw: object) -> str:
    from tether.memory.memfs import MemFSError, normalize_path

    try:
        return normalize_path(raw, "path", markdown=False)
    except MemFSError as exc:
        raise UsageError(str(exc)) from None


def list_files(store: ConversationStore, agent_id: str) -> dict[str, Any]:
    """Every committed file: `{relative_path, is_system, description, content, size}` (the
    reference's entry; markdown files parsed for their description and body)."""
    from tether.memory import blocks
    from tether.memory.memfs import MemFS, memory_dir

    agent = store.get_agent(agent_id)
    memfs = MemFS(memory_dir(store.home, agent.id), agent_id=agent.id, agent_name=agent.name)
    if not memfs.exists or memfs.revision() is None:
        return {"entries": [], "total": 0, "memfs_enabled": True, "memfs_initialized": False}
    entries = []
    for path, data in sorted(memfs.read_head_tree().items()):
        text = data.decode("utf-8", errors="replace")
        description = None
        if path.endswith(".md"):
            parsed = blocks.parse(text)
            description, text = parsed.description or None, parsed.body
        entries.append({"relative_path": path, "is_system": path.startswith("system/"),
                        "description": description, "content": text, "size": len(data)})
    return {"entries": entries, "total": len(entries), "memfs_enabled": True,
            "memfs_initialized": True}


def read_file(store: ConversationStore, agent_id: str, path: str, encoding: str = "utf8") -> dict[str, Any]:
    """One committed file as stored (front matter included), utf8 text or base64."""
    if encoding not in ENCODINGS:
        raise UsageError(f"encoding must be one of {', '.join(ENCODINGS)}, got {encoding!r}")
    rel = _path(path)
    memfs = open_memory(store, agent_id)
    found = memfs.read_head_tree(rel.rsplit("/", 1)[0] if "/" in rel else "")
    if rel not in found:
        raise UsageError(f"{rel}: no such file in agent {agent_id}'s memory")
    data = found[rel]
    content = base64.b64encode(data).decode() if encoding == "base64" else data.decode(
        "utf-8", errors="replace")
    return {"agent_id": agent_id, "path": rel, "content": content, "encoding": encoding}


def write_file(
    store: ConversationStore, agent_id: str, path: str, content: str, *, encoding: str = "utf8",
    message: str | None = None,
) -> dict[str, Any]:
    """Write the file and commit it alone; `committed` is false when it did not change."""
    if encoding not in ENCODINGS:
        raise UsageError(f"encoding must be one of {', '.join(ENCODINGS)}, got {encoding!r}")
    rel = _path(path)
    if encoding == "base64":
        try:
            data = base64.b64decode(content, validate=True)
        except (binascii.Error, ValueError):
            raise UsageError("content is not valid base64") from None
    else:
        data = content.encode("utf-8")
    memfs = open_memory(store, agent_id, create=True)
    with memfs.writing():
        target = memfs.resolve(rel)
        target.parent.mkdir(parents=True, exist_ok=True)
        memfs.resolve(rel)  # a symlink raced into a new parent is still refused
        write_atomic(target, data)
        sha = memfs.commit([rel], message or f"memory: write {rel}")
    return {"agent_id": agent_id, "path": rel, "committed": sha is not None,
            "commit_sha": sha or memfs.revision()}


def delete_file(
    store: ConversationStore, agent_id: str, path: str, *, message: str | None = None
) -> dict[str, Any]:
    """Remove the file and commit the removal; an absent file changes nothing."""
    rel = _path(path)
    memfs = open_memory(store, agent_id)
    with memfs.writing():
        target = memfs.resolve(rel)
        if target.is_dir():
            raise UsageError(f"{rel} is a directory, not a memory file")
        target.unlink(missing_ok=True)
        sha = memfs.commit([rel], message or f"memory: delete {rel}")
    return {"agent_id": agent_id, "path": rel, "committed": sha is not None,
            "commit_sha": sha or memfs.revision()}


def history(
    store: ConversationStore, agent_id: str, file_path: str | None = None, limit: int = 50
) -> dict[str, Any]:
    """The commits touching `file_path` (every commit without one), newest first."""
    if limit < 1:
        raise UsageError(f"limit must be at least 1, got {limit}")
    rel = _path(file_path) if file_path is not None else None
    memfs = open_memory(store, agent_id)
    args = ["log", f"-n{limit}", "--format=%H%x1f%s%x1f%aI%x1f%an%x1e"]
    if rel is not None:
        args += ["--", rel]
    out = memfs.git(*args).decode("utf-8", errors="replace")
    commits = []
    for record in out.split("\x1e"):
        record = record.strip("\n")
        if record:
            sha, subject, when, author = record.split("\x1f", 3)
            commits.append({"sha": sha, "message": subject, "timestamp": when,
                            "author_name": author or None})
    return {"file_path": rel or "", "commits": commits}


def _commit(raw: object, field: str) -> str:
    if not isinstance(raw, str) or not raw or raw.startswith("-") or not all(
        c.isalnum() or c in "._/-~^" for c in raw
    ):
        raise UsageError(f"{field} must be a commit (a sha or a ref name), got {raw!r}")
    return raw


def commit_diff(store: ConversationStore, agent_id: str, sha: str) -> dict[str, Any]:
    """What one commit changed, as `git show` prints it (without its header)."""
    rev = _commit(sha, "sha")
    memfs = open_memory(store, agent_id)
    done = memfs.try_git("show", "--no-color", "--format=", rev, "--")
    if done.returncode != 0:
        raise UsageError(f"sha {sha!r}: no such commit in agent {agent_id}'s memory")
    return {"sha": sha, "diff": done.stdout.decode("utf-8", errors="replace")}


def file_at_ref(store: ConversationStore, agent_id: str, file_path: str, ref: str) -> dict[str, Any]:
    """A file's text as of a commit."""
    rel, rev = _path(file_path), _commit(ref, "ref")
    memfs = open_memory(store, agent_id)
    done = memfs.try_git("show", f"{rev}:{rel}")
    if done.returncode != 0:
        raise UsageError(f"{rel} does not exist at {ref!r} in agent {agent_id}'s memory")
    return {"file_path": rel, "ref": ref, "content": done.stdout.decode("utf-8", errors="replace")}


def enable(store: ConversationStore, agent_id: str) -> dict[str, Any]:
    """The agent's memory repository, created (with its first commit) when it has none."""
    memfs = open_memory(store, agent_id, create=True)
    return {"memory_directory": str(memfs.root)}
