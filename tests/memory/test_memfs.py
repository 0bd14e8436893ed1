from __future__ import annotations

import os
import threading
from pathlib import Path

import pytest

from tether.memory.memfs import INITIAL_COMMIT, MemFS, MemFSError, memory_dir, normalize_path

from .support import AGENT, commit_count, git, open_memfs


def test_open_creates_a_repo_beside_the_agent_records(tether_home: Path) -> None:
    memfs = open_memfs(tether_home)
    assert memfs.root == tether_home / "agents" / AGENT / "memory"
    assert git(memfs.root, "rev-parse", "--abbrev-ref", "HEAD").strip() == "main"
    assert [c.subject for c in memfs.log()] == [INITIAL_COMMIT]
    assert all((memfs.root / d).is_dir() for d in ("system", "skills", "mods"))
    author = git(memfs.root, "log", "-1", "--format=%an <%ae>").strip()
    assert author == f"Tester <{AGENT}@tether.local>"
    sha = memfs.revision()
    assert sha == git(memfs.root, "rev-parse", "HEAD").strip()
    again = open_memfs(tether_home)  # opening again changes nothing
    assert again.revision() == sha and commit_count(again) == 1


def test_concurrent_first_opens_make_one_repo(tether_home: Path) -> None:
    errors: list[BaseException] = []

    def opener() -> None:
        try:
            open_memfs(tether_home)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)

    threads = [threading.Thread(target=opener) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert commit_count(open_memfs(tether_home)) == 1


def test_user_git_config_cannot_hijack_a_commit(tether_home: Path, tmp_path: Path) -> None:
    """Signing, hooks and templates in ~/.gitconfig would fail or run code: all ignored."""
    home = Path(os.environ["HOME"])
    marker = tmp_path / "hook-ran"
    hooks = tmp_path / "hooks"
    hooks.mkdir()
    for name in ("pre-commit", "commit-msg", "post-commit"):
        (hooks / name).write_text(f"#!/bin/sh\ntouch {marker}\nexit 1\n")
        (hooks / name).chmod(0o755)
    (home / ".gitconfig").write_text(
        f"[commit]\n\tgpgsign = true\n[gpg]\n\tprogram = /bin/false\n[core]\n\thooksPath = {hooks}\n"
        "[user]\n\tname = Someone Else\n\temail = else@example.com\n"
    )
    memfs = open_memfs(tether_home)
    (memfs.root / "system" / "a.md").write_text("x\n")
    with memfs.writing():
        assert memfs.commit(["system/a.md"], "add a") is not None
    # hooks the repo itself configures are off too
    git(memfs.root, "config", "core.hooksPath", str(hooks))
    (memfs.root / "system" / "b.md").write_text("y\n")
    with memfs.writing():
        assert memfs.commit(["system/b.md"], "add b") is not None
    assert not marker.exists()
    assert git(memfs.root, "log", "-1", "--format=%ae").strip() == f"{AGENT}@tether.local"


def test_only_committed_head_is_read(tether_home: Path) -> None:
    memfs = open_memfs(tether_home)
    (memfs.root / "system" / "human.md").write_text("committed\n")
    with memfs.writing():
        memfs.commit(["system/human.md"], "add human")
    (memfs.root / "system" / "human.md").write_text("edited, not committed\n")
    (memfs.root / "system" / "draft.md").write_text("untracked\n")
    tree = memfs.read_head_tree("system")
    assert tree == {"system/human.md": b"committed\n"}
    assert memfs.read_head("system/human.md") == "committed\n"
    assert memfs.read_head("system/draft.md") is None
    status = memfs.status_lines()
    assert " M system/human.md" in status and "?? system/draft.md" in status
    diff = memfs.diff()
    assert "+edited, not committed" in diff and "untracked: system/draft.md" in diff


def test_symlinks_at_head_never_reach_readers(tether_home: Path, tmp_path: Path) -> None:
    memfs = open_memfs(tether_home)
    secret = tmp_path / "secret.txt"
    secret.write_text("s3cret\n")
    os.symlink(secret, memfs.root / "system" / "leak.md")
    git(memfs.root, "add", "-A")
    git(memfs.root, "commit", "-qm", "link")
    assert memfs.read_head_tree() == {}
    assert memfs.head_paths("system") == []


def test_commit_takes_only_the_named_paths(tether_home: Path) -> None:
    memfs = open_memfs(tether_home)
    (memfs.root / "system" / "a.md").write_text("a\n")
    (memfs.root / "other.md").write_text("staged elsewhere\n")
    git(memfs.root, "add", "other.md")
    with memfs.writing():
        sha = memfs.commit(["system/a.md"], "only a")
    assert sha is not None and sha == memfs.revision()
    assert git(memfs.root, "show", "--name-only", "--format=", "HEAD").split() == ["system/a.md"]
    assert "A  other.md" in memfs.status_lines()  # still staged, not committed
    with memfs.writing():
        assert memfs.commit(["system/a.md"], "nothing changed") is None
        assert memfs.commit(["never/existed.md"], "nothing there") is None
    with pytest.raises(MemFSError, match="non-empty message"):
        memfs.commit(["system/a.md"], "  ")


def test_revision_reads_packed_refs_too(tether_home: Path) -> None:
    memfs = open_memfs(tether_home)
    sha = memfs.revision()
    git(memfs.root, "pack-refs", "--all")
    assert not (memfs.root / ".git" / "refs" / "heads" / "main").exists()
    assert memfs.revision() == sha


def test_export_writes_head_files(tether_home: Path, tmp_path: Path) -> None:
    memfs = open_memfs(tether_home)
    (memfs.root / "system" / "a.md").write_text("a\n")
    (memfs.root / "notes").mkdir()
    (memfs.root / "notes" / "n.md").write_text("n\n")
    with memfs.writing():
        memfs.commit(["system/a.md", "notes/n.md"], "two files")
    (memfs.root / "system" / "a.md").write_text("dirty\n")
    out = tmp_path / "export"
    assert memfs.export(out) == 2
    assert (out / "system" / "a.md").read_text() == "a\n" and (out / "notes" / "n.md").read_text() == "n\n"
    with pytest.raises(MemFSError, match="not an empty directory"):
        memfs.export(out)


@pytest.mark.parametrize(
    ("raw", "why"),
    [
        ("", "non-empty"),
        ("/etc/passwd", "relative"),
        ("~/x.md", "relative"),
        ("$HOME/x.md", "relative"),
        ("C:\\x.md", "relative"),
        ("../outside.md", "'..'"),
        ("system/../../x.md", "'..'"),
        (".git/config", ".git"),
        ("system/.GIT/hooks/x", ".git"),
        ("a\0b", "NUL"),
        (".", "memory directory itself"),
        (42, "non-empty string"),
    ],
)
def test_normalize_path_refuses(raw: object, why: str) -> None:
    with pytest.raises(MemFSError, match=why.replace("$", r"\$").replace(".", r"\.")):
        normalize_path(raw)


def test_normalize_path_accepts_labels() -> None:
    assert normalize_path("system/human") == "system/human.md"
    assert normalize_path(" ./system//human.md ") == "system/human.md"
    assert normalize_path("system\\human") == "system/human.md"
    assert normalize_path("skills/x", markdown=False) == "skills/x"


def test_resolve_refuses_symlinks(tether_home: Path, tmp_path: Path) -> None:
    memfs = open_memfs(tether_home)
    os.symlink(tmp_path, memfs.root / "out")
    with pytest.raises(MemFSError, match="symlink"):
        memfs.resolve("out/x.md")


def test_memory_dir_rejects_path_like_ids(tether_home: Path) -> None:
    for bad in ("", "..", "a/b"):
        with pytest.raises(MemFSError):
            memory_dir(tether_home, bad)


def test_missing_git_is_a_clear_error(tether_home: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", str(tether_home / "no-bin"))
    with pytest.raises(MemFSError, match="git is not installed"):
        MemFS.open(tether_home, AGENT)
