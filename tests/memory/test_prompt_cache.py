from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from tether.memory.memfs import MemFS
from tether.protocol.turns import ConversationRef
from tether.runtime.prompt_cache import (
    CACHE_FILE,
    SystemPrompt,
    project_trusted,
    read_project_instructions,
)
from tether.runtime.skills import SOURCES, discover_skills
from tether.tools.memory import apply_memory_command

from .support import AGENT, git, open_memfs

CONV = ConversationRef(AGENT, "local-conv-1")


@pytest.fixture
def memfs(tether_home: Path) -> MemFS:
    return open_memfs(tether_home)


def remember(memfs: MemFS, path: str, text: str, description: str = "d") -> None:
    apply_memory_command(memfs, {"command": "create", "reason": f"add {path}", "path": path,
                                 "description": description, "file_text": text})


def make(memfs: MemFS | None, tmp_path: Path, base: str = "BASE SYSTEM", **kwargs: object) -> SystemPrompt:
    return SystemPrompt(base=base, cache_dir=lambda c: tmp_path / "conv" / c.conversation_id,
                        memfs=memfs, **kwargs)  # type: ignore[arg-type]


def stored(tmp_path: Path) -> dict[str, object]:
    return json.loads((tmp_path / "conv" / CONV.conversation_id / CACHE_FILE).read_text())


def test_compiled_prompt_has_base_blocks_and_metadata(memfs: MemFS, tmp_path: Path) -> None:
    remember(memfs, "system/persona.md", "I am careful.")
    remember(memfs, "system/human.md", "Name: Ada", description="About the user")
    remember(memfs, "notes/db.md", "long notes", description="Database quirks")
    remember(memfs, "skills/x/SKILL.md", "skill body")
    (memfs.root / "system" / "draft.md").write_text("---\ndescription: d\n---\nUNCOMMITTED\n")
    text = make(memfs, tmp_path).resolve(CONV)
    assert text.startswith("BASE SYSTEM\n\n<self>\nI am careful.\n</self>")
    assert '<block path="system/human.md" description="About the user">\nName: Ada\n</block>' in text
    assert "- notes/db.md: Database quirks" in text and "long notes" not in text
    assert "skill body" not in text and "UNCOMMITTED" not in text
    assert f"MEMORY_REVISION: {memfs.revision()}" in text and f"AGENT_ID: {AGENT}" in text
    record = stored(tmp_path)
    assert record["content"] == text and record["memfsRevision"] == memfs.revision()
    assert isinstance(record["rawSystemHash"], str) and len(record["rawSystemHash"]) == 64
    assert "Name: Ada" in str(record["coreMemory"]) and record["compiledAt"]


def test_reused_while_nothing_changes(memfs: MemFS, tmp_path: Path) -> None:
    remember(memfs, "system/human.md", "Name: Ada")
    prompt = make(memfs, tmp_path)
    first = prompt.resolve(CONV)
    assert prompt.compilations == 1
    assert prompt.resolve(CONV) == first and asyncio.run(prompt(CONV)) == first
    assert prompt.compilations == 1
    mtime = (tmp_path / "conv" / CONV.conversation_id / CACHE_FILE).stat().st_mtime_ns
    # a new process (a new instance) reuses the stored prompt too
    later = make(memfs, tmp_path)
    assert later.resolve(CONV) == first and later.compilations == 0
    assert (tmp_path / "conv" / CONV.conversation_id / CACHE_FILE).stat().st_mtime_ns == mtime


def test_memory_change_recompiles(memfs: MemFS, tmp_path: Path) -> None:
    prompt = make(memfs, tmp_path)
    before = prompt.resolve(CONV)
    assert "Name: Ada" not in before
    remember(memfs, "system/human.md", "Name: Ada")
    after = asyncio.run(prompt(CONV))
    assert "Name: Ada" in after and prompt.compilations == 2
    assert stored(tmp_path)["memfsRevision"] == memfs.revision()
    # an uncommitted edit is not a change
    (memfs.root / "system" / "human.md").write_text("dirty")
    assert prompt.resolve(CONV) == after and prompt.compilations == 2
    # a commit made outside the tool (a shell in the repo) counts
    git(memfs.root, "commit", "-qam", "shell edit")
    assert "dirty" in prompt.resolve(CONV) and prompt.compilations == 3


def test_raw_system_change_recompiles(memfs: MemFS, tmp_path: Path) -> None:
    make(memfs, tmp_path).resolve(CONV)
    other = make(memfs, tmp_path, base="ANOTHER BASE")
    assert other.resolve(CONV).startswith("ANOTHER BASE") and other.compilations == 1
    with_instructions = make(memfs, tmp_path, base="ANOTHER BASE", project_instructions="<p>x</p>")
    with_instructions.resolve(CONV)
    assert with_instructions.compilations == 1


def test_each_conversation_has_its_own_prompt(memfs: MemFS, tmp_path: Path) -> None:
    prompt = make(memfs, tmp_path)
    a = prompt.resolve(CONV)
    b = prompt.resolve(ConversationRef(AGENT, "local-conv-2"))
    assert "CONVERSATION_ID: local-conv-1" in a and "CONVERSATION_ID: local-conv-2" in b
    assert prompt.compilations == 2


def test_damaged_cache_file_is_replaced(memfs: MemFS, tmp_path: Path) -> None:
    make(memfs, tmp_path).resolve(CONV)
    (tmp_path / "conv" / CONV.conversation_id / CACHE_FILE).write_text("{not json")
    again = make(memfs, tmp_path)
    assert "BASE SYSTEM" in again.resolve(CONV) and again.compilations == 1
    assert stored(tmp_path)["memfsRevision"] == memfs.revision()


def test_skills_are_listed_and_agent_skills_follow_memory(memfs: MemFS, tether_home: Path, tmp_path: Path) -> None:
    catalog = discover_skills(home=tether_home, cwd=tmp_path, sources=frozenset(SOURCES),
                              project_trusted=False, memfs=memfs)
    prompt = make(memfs, tmp_path, skills=catalog)
    text = prompt.resolve(CONV)
    assert "<available_skills>" in text and "- remembering:" in text and "release" not in text
    remember(memfs, "skills/release/SKILL.md", "steps", description="Cut a release")
    assert "- release: Cut a release" in prompt.resolve(CONV)


def test_without_memory_the_prompt_still_compiles(tmp_path: Path) -> None:
    prompt = make(None, tmp_path)
    text = prompt.resolve(CONV)
    assert text.startswith("BASE SYSTEM") and "<memory>" not in text
    assert prompt.resolve(CONV) == text and prompt.compilations == 1


def test_unreadable_memory_is_reported_not_cached(memfs: MemFS, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    prompt = make(memfs, tmp_path)
    monkeypatch.setenv("PATH", str(tmp_path / "no-bin"))
    memfs._env["PATH"] = str(tmp_path / "no-bin")
    text = prompt.resolve(CONV)
    assert "Your memory could not be read: git is not installed" in text
    assert not (tmp_path / "conv" / CONV.conversation_id / CACHE_FILE).exists()


def test_project_instructions(tmp_path: Path) -> None:
    assert read_project_instructions(tmp_path) == ""
    (tmp_path / "AGENTS.md").write_text("Use tabs.\n")
    (tmp_path / "CLAUDE.md").write_text("Run make test.\n")
    text = read_project_instructions(tmp_path)
    assert '<project_instructions source="AGENTS.md">\nUse tabs.\n</project_instructions>' in text
    assert text.index("AGENTS.md") < text.index("CLAUDE.md") and "Run make test." in text
    (tmp_path / "AGENTS.md").write_text("x" * 50_000)
    assert "[AGENTS.md truncated at 40000 characters]" in read_project_instructions(tmp_path)


def test_project_trusted(tether_home: Path, tmp_path: Path) -> None:
    from tether.runtime.trust import TrustStore

    assert project_trusted("trusted", False, tether_home, tmp_path)
    assert not project_trusted("changed", True, tether_home, tmp_path)
    assert project_trusted(None, True, tether_home, tmp_path)
    assert not project_trusted(None, False, tether_home, tmp_path)
    TrustStore(tether_home).trust(tmp_path)
    assert project_trusted(None, False, tether_home, tmp_path)
