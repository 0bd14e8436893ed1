from __future__ import annotations

import asyncio
import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from tether.memory.memfs import MemFS
from tether.protocol.turns import ConversationRef
from tether.runtime.extensions.skills import SOURCES, SkillCatalog, discover_skills
from tether.runtime.session.prompt_cache import (
    CACHE_FILE,
    RENDER_FILE,
    RENDER_VERSION,
    SystemPrompt,
    project_trusted,
    read_project_instructions,
)
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
    from tether.runtime.policy.trust import TrustStore

    assert project_trusted("trusted", False, tether_home, tmp_path)
    assert not project_trusted("changed", True, tether_home, tmp_path)
    assert project_trusted(None, True, tether_home, tmp_path)
    assert not project_trusted(None, False, tether_home, tmp_path)
    TrustStore(tether_home).trust(tmp_path)
    assert project_trusted(None, False, tether_home, tmp_path)


# --- the agent-level render of the memory (memory-render.json) ---------------------------------


def git_calls(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Records the subcommand of every git process MemFS starts from now on."""
    calls: list[str] = []
    real = MemFS._run

    def spy(
        self: MemFS, *args: str, stdin: bytes | None = None
    ) -> subprocess.CompletedProcess[bytes]:
        calls.append(args[0])
        return real(self, *args, stdin=stdin)

    monkeypatch.setattr(MemFS, "_run", spy)
    return calls


def catalog_of(memfs: MemFS, home: Path, cwd: Path) -> SkillCatalog:
    return discover_skills(
        home=home, cwd=cwd, sources=frozenset(SOURCES), project_trusted=False, memfs=memfs
    )


def without_metadata(text: str) -> str:
    return text.split("<memory_metadata>")[0]


def render_record(memfs: MemFS) -> dict[str, Any]:
    return json.loads((memfs.root.parent / RENDER_FILE).read_text())


def fill(memfs: MemFS) -> None:
    remember(memfs, "system/persona.md", "I am careful.")
    remember(memfs, "system/human.md", "Name: Ada", description="About the user")
    remember(memfs, "notes/db.md", "long notes", description="Database quirks")
    remember(memfs, "skills/release/SKILL.md", "steps", description="Cut a release")


def test_new_conversations_at_one_revision_reuse_the_memory_render(
    memfs: MemFS, tether_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fill(memfs)
    first = make(memfs, tmp_path, skills=catalog_of(memfs, tether_home, tmp_path)).resolve(CONV)
    record = render_record(memfs)
    assert record["version"] == RENDER_VERSION and record["revision"] == memfs.revision()
    assert record["skills"] == [
        {
            "name": "release",
            "description": "Cut a release",
            "source": "agent",
            "location": "memory:skills/release",
        }
    ]
    # the next `tether -p`: a new process, a new conversation, the same memory commit
    catalog = catalog_of(memfs, tether_home, tmp_path)
    calls = git_calls(monkeypatch)
    later = make(memfs, tmp_path, skills=catalog)
    second = later.resolve(ConversationRef(AGENT, "local-conv-2"))
    assert calls == [] and later.compilations == 1
    assert without_metadata(second) == without_metadata(first)
    assert "Name: Ada" in second and "- release: Cut a release" in second
    assert "CONVERSATION_ID: local-conv-2" in second and "CONVERSATION_ID: local-conv-1" in first
    stored_second = json.loads((tmp_path / "conv" / "local-conv-2" / CACHE_FILE).read_text())
    assert stored_second["content"] == second and stored_second["memfsRevision"] == memfs.revision()
    assert stored_second["coreMemory"] == record["coreMemory"]


def test_agent_skills_off_leaves_them_out_of_a_reused_render(
    memfs: MemFS, tether_home: Path, tmp_path: Path
) -> None:
    fill(memfs)
    make(memfs, tmp_path, skills=catalog_of(memfs, tether_home, tmp_path)).resolve(CONV)
    no_agent = discover_skills(
        home=tether_home,
        cwd=tmp_path,
        sources=frozenset({"bundled"}),
        project_trusted=False,
        memfs=memfs,
    )
    text = make(memfs, tmp_path, skills=no_agent).resolve(ConversationRef(AGENT, "local-conv-2"))
    assert "- remembering:" in text and "release" not in text
    # and a render first made without agent skills still lists them for a catalog that has them
    (memfs.root.parent / RENDER_FILE).unlink()
    make(memfs, tmp_path, skills=no_agent).resolve(ConversationRef(AGENT, "local-conv-3"))
    full = make(memfs, tmp_path, skills=catalog_of(memfs, tether_home, tmp_path))
    assert "- release: Cut a release" in full.resolve(ConversationRef(AGENT, "local-conv-4"))


def test_a_new_memory_commit_reads_the_tree_again(
    memfs: MemFS, tether_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fill(memfs)
    make(memfs, tmp_path, skills=catalog_of(memfs, tether_home, tmp_path)).resolve(CONV)
    remember(memfs, "system/style.md", "Answer tersely.")
    remember(memfs, "skills/deploy/SKILL.md", "steps", description="Deploy it")
    calls = git_calls(monkeypatch)
    prompt = make(memfs, tmp_path, skills=catalog_of(memfs, tether_home, tmp_path))
    text = prompt.resolve(ConversationRef(AGENT, "local-conv-2"))
    assert calls == ["ls-tree", "cat-file"]
    assert "Answer tersely." in text and "- deploy: Deploy it" in text and "Name: Ada" in text
    assert render_record(memfs)["revision"] == memfs.revision()
    calls.clear()
    prompt.resolve(ConversationRef(AGENT, "local-conv-3"))
    assert calls == []


@pytest.mark.parametrize(
    "damage",
    [
        b"{not json",
        b"\xff\xfe",
        b"[]",
        b'{"version": 1}',
        "wrong version",
        "wrong revision",
        "core not text",
        "skill not an object",
        "skill missing a field",
        "skill of another source",
    ],
)
def test_a_damaged_render_file_is_ignored_and_replaced(
    damage: bytes | str,
    memfs: MemFS,
    tether_home: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    fill(memfs)
    prompt = make(memfs, tmp_path, skills=catalog_of(memfs, tether_home, tmp_path))
    good = without_metadata(prompt.resolve(CONV))
    path = memfs.root.parent / RENDER_FILE
    record = render_record(memfs)
    if isinstance(damage, bytes):
        path.write_bytes(damage)
    else:
        skill = record["skills"][0]
        changed = {
            "wrong version": {"version": RENDER_VERSION + 1, "coreMemory": "STALE"},
            "wrong revision": {"revision": "0" * 40, "coreMemory": "STALE"},
            "core not text": {"coreMemory": 7},
            "skill not an object": {"skills": ["release"]},
            "skill missing a field": {
                "skills": [{k: v for k, v in skill.items() if k != "location"}]
            },
            "skill of another source": {"skills": [{**skill, "source": "elsewhere"}]},
        }[damage]
        path.write_text(json.dumps({**record, **changed}))
    calls = git_calls(monkeypatch)
    text = prompt.resolve(ConversationRef(AGENT, "local-conv-2"))
    assert calls == ["ls-tree", "cat-file"]  # read again
    assert without_metadata(text) == good and "STALE" not in text
    assert render_record(memfs) == record  # and replaced


def test_an_unusable_render_path_is_not_an_error(memfs: MemFS, tmp_path: Path) -> None:
    remember(memfs, "system/human.md", "Name: Ada")
    (memfs.root.parent / RENDER_FILE).mkdir()  # neither readable nor replaceable
    prompt = make(memfs, tmp_path)
    assert "Name: Ada" in prompt.resolve(CONV)
    assert "Name: Ada" in prompt.resolve(ConversationRef(AGENT, "local-conv-2"))
    assert stored(tmp_path)["memfsRevision"] == memfs.revision()


def test_unreadable_memory_writes_no_render(memfs: MemFS, tmp_path: Path) -> None:
    remember(memfs, "system/human.md", "Name: Ada")
    memfs._env["PATH"] = str(tmp_path / "no-bin")
    text = make(memfs, tmp_path).resolve(CONV)
    assert "Your memory could not be read" in text
    assert not (memfs.root.parent / RENDER_FILE).exists()
    assert not (tmp_path / "conv" / CONV.conversation_id / CACHE_FILE).exists()


def test_memory_update_in_place_shares_the_render(
    memfs: MemFS, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    prompt = make(memfs, tmp_path)
    prompt.mid_conversation_updates = True
    original, update = asyncio.run(prompt.with_update(CONV))
    assert update is None
    remember(memfs, "system/human.md", "Name: Ada")
    calls = git_calls(monkeypatch)
    kept, update = asyncio.run(prompt.with_update(CONV))
    assert kept == original and update is not None and "Name: Ada" in update
    assert calls == ["ls-tree", "cat-file"]
    assert render_record(memfs)["revision"] == memfs.revision()
    calls.clear()
    # a new conversation at that revision compiles from the render the update stored
    fresh = asyncio.run(prompt(ConversationRef(AGENT, "local-conv-2")))
    assert calls == [] and "Name: Ada" in fresh
    assert stored(tmp_path)["coreMemory"] in update
