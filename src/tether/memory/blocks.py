"""Memory files as text: the YAML-ish frontmatter (`description`, `read_only`, ...) and the body.

A memory file is Markdown with an optional frontmatter fence:

    ---
    description: Who the user is and how they like to work
    read_only: true
    ---
    body text

Only flat `key: value` lines are understood (quoted or bare strings, `true`/`false`); anything
else in the fence is kept verbatim so a round trip never loses what another tool wrote. The
label of a file is its path without `.md` (`system/human.md` -> `system/human`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace

_FENCE = re.compile(r"\A---[ \t]*\r?\n(.*?)\r?\n---[ \t]*(?:\r?\n|\Z)", re.DOTALL)
_KEY = re.compile(r"^([A-Za-z_][A-Za-z0-9_-]*)[ \t]*:[ \t]?(.*)$")
_TRUE = ("true", "yes", "on", "1")


@dataclass(frozen=True, slots=True)
class MemoryFile:
    """One memory file's parts. `meta` keeps every frontmatter key in file order (as text)."""

    body: str
    meta: tuple[tuple[str, str], ...] = field(default=())
    has_frontmatter: bool = False

    def get(self, key: str) -> str | None:
        for k, v in self.meta:
            if k == key:
                return v
        return None

    @property
    def description(self) -> str:
        return self.get("description") or ""

    @property
    def read_only(self) -> bool:
        value = self.get("read_only")
        return value is not None and value.strip().lower() in _TRUE

    def with_meta(self, key: str, value: str) -> MemoryFile:
        items = list(self.meta)
        for i, (k, _) in enumerate(items):
            if k == key:
                items[i] = (key, value)
                break
        else:
            items.append((key, value))
        return replace(self, meta=tuple(items), has_frontmatter=True)

    def with_body(self, body: str) -> MemoryFile:
        return replace(self, body=body)


def parse(text: str) -> MemoryFile:
    """Split `text` into frontmatter and body; text without a fence is all body."""
    match = _FENCE.match(text)
    if match is None:
        return MemoryFile(body=text)
    meta: list[tuple[str, str]] = []
    for line in match.group(1).splitlines():
        key = _KEY.match(line)
        if key is None:
            if line.strip():
                meta.append(("", line))  # kept verbatim, rendered back as it was
            continue
        meta.append((key.group(1), _unquote(key.group(2).strip())))
    return MemoryFile(body=text[match.end():], meta=tuple(meta), has_frontmatter=True)


def render(file: MemoryFile) -> str:
    if not file.has_frontmatter and not file.meta:
        return file.body
    lines = ["---"]
    for key, value in file.meta:
        lines.append(value if key == "" else f"{key}: {_quote(value)}")
    lines.append("---")
    header = "\n".join(lines) + "\n"
    return header + file.body


def new_file(description: str, body: str, *, read_only: bool = False) -> MemoryFile:
    meta: list[tuple[str, str]] = [("description", one_line(description))]
    if read_only:
        meta.append(("read_only", "true"))
    return MemoryFile(body=body, meta=tuple(meta), has_frontmatter=True)


def one_line(text: str) -> str:
    """Frontmatter values are single lines: newlines become spaces."""
    return " ".join(text.split())


def label(path: str) -> str:
    return path[:-3] if path.endswith(".md") else path


def _unquote(value: str) -> str:
    if len(value) >= 2 and value[0] == value[-1] == '"':
        inner = value[1:-1]
        return inner.replace('\\"', '"').replace("\\\\", "\\")
    if len(value) >= 2 and value[0] == value[-1] == "'":
        return value[1:-1].replace("''", "'")
    return value


def _quote(value: str) -> str:
    """Bare when a YAML reader would read it back unchanged, else double-quoted."""
    if value == "" or value != value.strip() or value[0] in "\"'[]{}>|*&!%@`#,?-:" or ": " in value or " #" in value:
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return value
