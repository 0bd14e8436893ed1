"""Diff previews for approval requests: what a Write, Edit or MultiEdit would change, as hunks.

Shape (reference §3.4): `{mode:"advanced", fileName, hunks[{oldStart, oldLines, newStart,
newLines, lines[{type: context|add|remove, content}]}]}`, or `{mode:"fallback"|"unpreviewable",
fileName, reason}` when the change cannot be computed (the edit would fail, the file is binary).
"""

from __future__ import annotations

import difflib
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from tether.core.approvals import JudgedCall

_CONTEXT = 3


def preview_diffs(tool_name: str, args: Mapping[str, Any], cwd: Path) -> list[dict[str, Any]] | None:
    if tool_name not in ("Write", "Edit", "MultiEdit"):
        return None
    raw = args.get("file_path")
    if not isinstance(raw, str) or not raw:
        return None
    path = Path(raw) if Path(raw).is_absolute() else cwd / raw
    try:
        if path.exists() and path.stat().st_nlink > 1:
            # another name may be a secret (a hard link into tether's state): the approver,
            # perhaps a scoped client, is not shown what the file tool itself would refuse
            return [{"mode": "unpreviewable", "fileName": str(path),
                     "reason": "the file has other names (hard links)"}]
        old = path.read_text(encoding="utf-8") if path.exists() else ""
    except (UnicodeDecodeError, OSError) as exc:
        return [{"mode": "unpreviewable", "fileName": str(path), "reason": f"cannot read the file: {exc}"}]
    new = _apply(tool_name, args, old)
    if isinstance(new, _Failed):
        return [{"mode": "fallback", "fileName": str(path), "reason": new.reason}]
    return [{"mode": "advanced", "fileName": str(path), "hunks": hunks(old, new)}]


class _Failed:
    def __init__(self, reason: str) -> None:
        self.reason = reason


def _apply(tool_name: str, args: Mapping[str, Any], old: str) -> str | _Failed:
    if tool_name == "Write":
        content = args.get("content")
        return content if isinstance(content, str) else _Failed("content is not a string")
    edits = [args] if tool_name == "Edit" else args.get("edits")
    if not isinstance(edits, list):
        return _Failed("edits is not a list")
    text = old
    for n, edit in enumerate(edits):
        if not isinstance(edit, Mapping):
            return _Failed(f"edit {n} is not an object")
        before, after = edit.get("old_string"), edit.get("new_string")
        if not isinstance(before, str) or not isinstance(after, str):
            return _Failed(f"edit {n}: old_string and new_string must be strings")
        if before == "":
            if text:
                return _Failed(f"edit {n}: empty old_string on a non-empty file")
            text = after
            continue
        if before not in text:
            return _Failed(f"edit {n}: old_string not found in the file")
        text = text.replace(before, after) if edit.get("replace_all") else text.replace(before, after, 1)
    return text


def hunks(old: str, new: str) -> list[dict[str, Any]]:
    a, b = old.splitlines(), new.splitlines()
    out: list[dict[str, Any]] = []
    for group in difflib.SequenceMatcher(None, a, b, autojunk=False).get_grouped_opcodes(_CONTEXT):
        lines: list[dict[str, str]] = []
        for tag, i1, i2, j1, j2 in group:
            if tag == "equal":
                lines += [{"type": "context", "content": line} for line in a[i1:i2]]
                continue
            lines += [{"type": "remove", "content": line} for line in a[i1:i2]]
            lines += [{"type": "add", "content": line} for line in b[j1:j2]]
        first, last = group[0], group[-1]
        old_lines, new_lines = last[2] - first[1], last[4] - first[3]
        out.append({
            "oldStart": first[1] + 1 if old_lines else first[1],
            "oldLines": old_lines,
            "newStart": first[3] + 1 if new_lines else first[3],
            "newLines": new_lines,
            "lines": lines,
        })
    return out


def can_use_tool_request(item: JudgedCall, cwd: Path) -> dict[str, Any]:
    """The `can_use_tool` control request for a call that needs a human (reference §3.4), as
    stream-json and the App Server send it: the call, why it asks, and a diff for edits."""
    from tether.protocol import wire

    call = item.call
    return wire.can_use_tool(
        tool_name=call.name,
        tool_call_id=call.id,
        args=item.args,
        decision_reason=item.decision.reason,
        diffs=preview_diffs(call.name, item.args, cwd),
    )
