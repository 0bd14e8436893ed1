"""A new agent's memory blocks from the Letta Code SDK's flags, committed in a real MemFS."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tether.errors import UsageError
from tether.memory.memfs import MemFS
from tether.runtime.session.initial_blocks import initial_blocks, write_initial_blocks
from tether.runtime.session.prompt_cache import memory_render


def test_sdk_flags_become_committed_blocks_the_prompt_shows(tmp_path: Path) -> None:
    # What createAgent({memory: ["persona", "human", {label: "project", value: ...}],
    # persona: ..., human: ...}) sends: custom blocks win over presets, values fill them in.
    blocks = initial_blocks(
        "persona,human,skills",
        json.dumps([{"label": "project", "value": "A Rust CLI.", "description": "The project"}]),
        ["persona=You are Sam, terse and exact.", "human=Ada; prefers tabs."],
    )
    assert [b.label for b in blocks] == ["persona", "human", "project"]
    memfs = MemFS.open(tmp_path / "home", "agent-local-1")
    head = write_initial_blocks(memfs, blocks)
    assert head is not None and head == memfs.revision()
    core = memory_render(memfs, head).core
    assert "<self>\nYou are Sam, terse and exact.\n</self>" in core
    assert 'path="system/human.md"' in core and "Ada; prefers tabs." in core
    assert 'description="The project"' in core and "A Rust CLI." in core
    assert memfs.status_lines() == []  # committed, nothing left in the working tree


def test_no_flags_no_commit(tmp_path: Path) -> None:
    memfs = MemFS.open(tmp_path / "home", "agent-local-2")
    before = memfs.revision()
    assert write_initial_blocks(memfs, initial_blocks(None, None, [])) is None
    assert initial_blocks("", None, []) == []
    assert memfs.revision() == before


@pytest.mark.parametrize(
    ("init", "memory", "values", "message"),
    [
        (None, "[{\"blockId\": \"block-123\"}]", [], "blockId 'block-123'"),
        (None, "not json", [], "--memory-blocks is not JSON"),
        (None, "{\"label\": \"x\"}", [], "must be a JSON list"),
        (None, "[{\"value\": \"v\"}]", [], "needs a string 'label'"),
        (None, "[{\"label\": \"../escape\", \"value\": \"v\"}]", [], "block label '../escape'"),
        ("Persona", None, [], "block label 'Persona'"),
        (None, None, ["persona"], "expected LABEL=VALUE"),
        (None, None, ["a/b=x"], "block label 'a/b'"),
    ],
)
def test_malformed_flags_name_what_is_wrong(init: str | None, memory: str | None, values: list[str],
                                            message: str) -> None:
    with pytest.raises(UsageError, match=message.replace("[", r"\[")):
        initial_blocks(init, memory, values)
