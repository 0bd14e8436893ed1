"""The memory blocks a new agent starts with, from the Letta Code SDK's options.

The SDK turns `memory`, `persona` and `human` into three flags, which only apply when an agent
is created:

    --init-blocks persona,human      preset blocks by label ("" for none)
    --memory-blocks '[{"label": "project", "value": "…", "description": "…"}]'
    --block-value persona=TEXT       a block's text (repeatable; creates the block if needed)

Each block becomes `system/<label>.md` in the agent's memory (MemFS), with its description in
the frontmatter, committed once; `persona` is rendered as the agent's `<self>`. A
`{"blockId": …}` item names a block shared on a Letta server, which the local backend does not
have: that is a clear error, never a silent drop. The presets `skills` and `loaded_skills` are
tether's skill catalog already and create no file.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import orjson

from tether.errors import UsageError

if TYPE_CHECKING:
    from tether.memory.memfs import MemFS

_LABEL = re.compile(r"^[a-z0-9][a-z0-9_-]{0,63}$")
PRESETS = {
    "persona": "Who you are: your role, your manner, how you work with the user.",
    "human": "What you know about the user: their name, preferences and how they like to work.",
    "project": "What you know about this project: its layout, commands and conventions.",
}
# The SDK's other presets are Letta's skill blocks; tether offers skills through its skill
# catalog (`<available_skills>`, the Skill tool), so these labels create no memory file.
SKILL_PRESETS = ("skills", "loaded_skills")
COMMIT_MESSAGE = "Initial memory blocks (--init-blocks / --memory-blocks / --block-value)"


@dataclass(frozen=True, slots=True)
class InitialBlock:
    label: str
    value: str
    description: str
    read_only: bool = False

    @property
    def path(self) -> str:
        return f"system/{self.label}.md"


def initial_blocks(
    init_blocks: str | None, memory_blocks: str | None, block_values: Sequence[str]
) -> list[InitialBlock]:
    """The blocks the three flags ask for, in order; UsageError naming the flag when malformed."""
    blocks: dict[str, InitialBlock] = {}
    if init_blocks:
        for label in (x.strip() for x in init_blocks.split(",")):
            if label and label not in SKILL_PRESETS:
                _check_label("--init-blocks", label)
                blocks[label] = InitialBlock(label, "", PRESETS.get(label, f"The {label} block."))
    if memory_blocks:
        for block in _memory_blocks(memory_blocks):
            blocks[block.label] = block
    for item in block_values:
        label, sep, value = item.partition("=")
        label = label.strip()
        if not sep:
            raise UsageError(f"--block-value {item!r}: expected LABEL=VALUE")
        _check_label("--block-value", label)
        known = blocks.get(label)
        description = known.description if known else PRESETS.get(label, f"The {label} block.")
        blocks[label] = InitialBlock(label, value, description, known.read_only if known else False)
    return list(blocks.values())


def write_initial_blocks(memfs: MemFS, blocks: Sequence[InitialBlock]) -> str | None:
    """Write and commit the blocks (a file that already exists is replaced); the new HEAD."""
    if not blocks:
        return None
    from tether.memory import blocks as files

    with memfs.writing():
        for block in blocks:
            text = block.value if block.value.endswith("\n") or not block.value else block.value + "\n"
            memfs.write_working(block.path, files.render(
                files.new_file(block.description, text, read_only=block.read_only)))
        return memfs.commit([b.path for b in blocks], COMMIT_MESSAGE)


def _memory_blocks(raw: str) -> list[InitialBlock]:
    try:
        doc = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise UsageError(f"--memory-blocks is not JSON ({exc})") from None
    if not isinstance(doc, list):
        raise UsageError('--memory-blocks must be a JSON list of {"label", "value"} objects')
    out = []
    for i, item in enumerate(doc):
        where = f"--memory-blocks[{i}]"
        if not isinstance(item, dict):
            raise UsageError(f'{where} must be an object {{"label": ..., "value": ...}}')
        if "blockId" in item:
            raise UsageError(
                f"{where}: blockId {item['blockId']!r} names a block shared on a Letta server; "
                "the local backend has none (use --backend cloud, or give label and value)"
            )
        label, value = item.get("label"), item.get("value", "")
        if not isinstance(label, str):
            raise UsageError(f"{where} needs a string 'label'")
        _check_label(where, label)
        if not isinstance(value, str):
            raise UsageError(f"{where}.value must be a string")
        description = _optional_text(item, "description", where) or PRESETS.get(label, f"The {label} block.")
        read_only = item.get("read_only", item.get("readOnly", False))
        if not isinstance(read_only, bool):
            raise UsageError(f"{where}.read_only must be true or false")
        out.append(InitialBlock(label, value, description, read_only))
    return out


def _optional_text(item: dict[str, Any], key: str, where: str) -> str:
    value = item.get(key)
    if value is None:
        return ""
    if not isinstance(value, str):
        raise UsageError(f"{where}.{key} must be a string")
    return value


def _check_label(where: str, label: str) -> None:
    if not _LABEL.match(label):
        raise UsageError(
            f"{where}: block label {label!r} must be lower-case letters, digits, '-' or '_' "
            "(at most 64)"
        )
