"""The V4A patch format Codex models emit: parsing it, and applying an update's hunks to a text.

    *** Begin Patch
    *** Add File: path          (every line `+`)
    *** Delete File: path
    *** Update File: path
    *** Move to: new/path       (optional, right after Update)
    @@ anchor line              (optional: search after the line that matches it)
     context / -removed / +added
    *** End of File             (optional: the hunk ends at the file's end)
    *** End Patch

Pure: no file access here. Context is matched exactly first, then ignoring trailing
whitespace, then ignoring surrounding whitespace (as Codex does), always searching forward from
the previous hunk; a hunk that matches nowhere fails naming the file and the hunk's number.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

from tether.errors import ToolFailure

BEGIN = "*** Begin Patch"
END = "*** End Patch"
_ADD, _DELETE, _UPDATE, _MOVE = "*** Add File: ", "*** Delete File: ", "*** Update File: ", "*** Move to: "
_EOF = "*** End of File"


@dataclass(slots=True)
class Hunk:
    anchor: str | None  # the text after `@@`, when given
    old: list[str] = field(default_factory=list)  # context and removed lines, in order
    new: list[str] = field(default_factory=list)  # context and added lines, in order
    at_end: bool = False  # `*** End of File`: the old lines are the file's last lines
    tags: list[str] = field(default_factory=list)  # ' ', '-', '+' per hunk line, in order
    texts: list[str] = field(default_factory=list)


@dataclass(slots=True)
class FileChange:
    kind: Literal["add", "delete", "update"]
    path: str
    move_to: str | None = None
    content: str = ""  # add: the new file's text
    hunks: list[Hunk] = field(default_factory=list)


def parse_patch(text: str) -> list[FileChange]:
    """The file changes of a V4A patch, or a `ToolFailure` naming the line that is wrong."""
    lines = text.replace("\r\n", "\n").strip("\n").split("\n")
    # Models sometimes wrap the patch in a heredoc (`apply_patch <<'EOF'`): take the body.
    while lines and lines[0].strip() != BEGIN and not lines[0].startswith("***"):
        lines.pop(0)
    if not lines or lines[0].strip() != BEGIN:
        raise ToolFailure(f"The patch must start with '{BEGIN}' on its own line.")
    try:
        end = next(i for i in range(len(lines) - 1, 0, -1) if lines[i].strip() == END)
    except StopIteration:
        raise ToolFailure(f"The patch must end with '{END}' on its own line.") from None
    body = lines[1:end]
    changes: list[FileChange] = []
    i = 0
    while i < len(body):
        line = body[i]
        number = i + 2  # 1-based, counting the Begin line
        if line.startswith(_ADD):
            change = FileChange("add", _path(line, _ADD, number))
            i += 1
            added: list[str] = []
            while i < len(body) and not body[i].startswith("*** "):
                if not body[i].startswith("+"):
                    raise ToolFailure(
                        f"Patch line {i + 2}: every line of an added file starts with '+' "
                        f"({change.path}); got {body[i][:80]!r}."
                    )
                added.append(body[i][1:])
                i += 1
            change.content = "\n".join(added) + ("\n" if added else "")
            changes.append(change)
        elif line.startswith(_DELETE):
            changes.append(FileChange("delete", _path(line, _DELETE, number)))
            i += 1
        elif line.startswith(_UPDATE):
            change = FileChange("update", _path(line, _UPDATE, number))
            i += 1
            if i < len(body) and body[i].startswith(_MOVE):
                change.move_to = _path(body[i], _MOVE, i + 2)
                i += 1
            i = _parse_hunks(body, i, change)
            if not change.hunks and change.move_to is None:
                raise ToolFailure(f"Patch line {number}: the update of {change.path} has no hunks.")
            changes.append(change)
        elif not line.strip():
            i += 1
        else:
            raise ToolFailure(
                f"Patch line {number}: expected '*** Add File:', '*** Update File:' or "
                f"'*** Delete File:', got {line[:80]!r}."
            )
    if not changes:
        raise ToolFailure("The patch changes no file.")
    seen: set[str] = set()
    for change in changes:
        for path in (change.path, change.move_to):
            if path is not None and path in seen:
                raise ToolFailure(f"The patch names {path} twice; put all its changes in one section.")
            if path is not None:
                seen.add(path)
    return changes


def _path(line: str, prefix: str, number: int) -> str:
    path = line[len(prefix) :].strip()
    if not path:
        raise ToolFailure(f"Patch line {number}: {prefix.strip()} needs a path.")
    return path


def _parse_hunks(body: list[str], i: int, change: FileChange) -> int:
    hunk: Hunk | None = None
    while i < len(body):
        line = body[i]
        if line.startswith(_EOF):
            if hunk is None:
                raise ToolFailure(f"Patch line {i + 2}: '{_EOF}' outside a hunk.")
            hunk.at_end = True
            i += 1
            continue
        if line.startswith("*** "):
            break
        if line.startswith("@@"):
            anchor = line[2:].strip()
            hunk = Hunk(anchor or None)
            change.hunks.append(hunk)
            i += 1
            continue
        if hunk is None:  # the first hunk may omit its `@@` line
            hunk = Hunk(None)
            change.hunks.append(hunk)
        tag, rest = (line[:1], line[1:]) if line else (" ", "")
        if tag in (" ", "-", "+"):
            hunk.tags.append(tag)
            hunk.texts.append(rest)
        if tag == " ":
            hunk.old.append(rest)
            hunk.new.append(rest)
        elif tag == "-":
            hunk.old.append(rest)
        elif tag == "+":
            hunk.new.append(rest)
        else:
            raise ToolFailure(
                f"Patch line {i + 2} ({change.path}): a hunk line starts with ' ', '-' or '+'; "
                f"got {line[:80]!r}."
            )
        i += 1
    return i


def _find(lines: list[str], needle: list[str], start: int, at_end: bool) -> int:
    """Where `needle` starts in `lines` at or after `start`, or -1: exact, then loosened."""
    if not needle:
        return len(lines) if at_end else start
    for norm in (lambda s: s, str.rstrip, str.strip):
        wanted = [norm(s) for s in needle]
        if at_end:
            spot = len(lines) - len(needle)
            if spot >= start and [norm(s) for s in lines[spot:]] == wanted:
                return spot
            continue
        for spot in range(start, len(lines) - len(needle) + 1):
            if all(norm(lines[spot + k]) == wanted[k] for k in range(len(needle))):
                return spot
    return -1


def apply_hunks(text: str, change: FileChange) -> str:
    """`text` with the update's hunks applied in order, or a `ToolFailure` naming the hunk."""
    crlf = "\r\n" in text
    had_final_newline = text.endswith("\n") or not text
    lines = text.replace("\r\n", "\n").split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    cursor = 0
    for number, hunk in enumerate(change.hunks, 1):
        if hunk.anchor is not None:
            found = _find(lines, [hunk.anchor], cursor, False)
            if found < 0:
                raise ToolFailure(
                    f"Hunk {number} of {change.path} did not apply: its '@@ {hunk.anchor}' line "
                    "was not found. Read the file and make the patch from its current content."
                )
            cursor = found + 1 if hunk.old and hunk.old[0].strip() != hunk.anchor.strip() else found
        spot = _find(lines, hunk.old, cursor, hunk.at_end)
        if spot < 0:
            shown = "\n".join(hunk.old[:6])
            raise ToolFailure(
                f"Hunk {number} of {change.path} did not apply: these lines were not found "
                f"(after line {cursor}):\n{shown}\nRead the file and make the patch from its "
                "current content. No file was changed."
            )
        # Context lines keep the file's own spelling (they may have matched loosely).
        replacement: list[str] = []
        old_index = spot
        for tag, line in zip(hunk.tags, hunk.texts, strict=True):
            if tag == "+":
                replacement.append(line)
                continue
            if tag == " ":
                replacement.append(lines[old_index])
            old_index += 1
        lines[spot : spot + len(hunk.old)] = replacement
        cursor = spot + len(hunk.new)
    out = "\n".join(lines) + ("\n" if lines and had_final_newline else "")
    return out.replace("\n", "\r\n") if crlf else out
