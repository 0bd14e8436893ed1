"""One serialiser per wire, as a test: only protocol/wire.py + stream_json.py shape stream-json
lines and only server/v2_frames.py shapes the protocol v2 frames the server sends; core/ shapes
no wire dict.

The frame types are read out of the serialiser modules themselves (every `"type"` of a dict
literal there, every kind given to `EventStream._frame`, every control request `"subtype"`), so a
new frame is covered the day it is written. Every other module in src/tether is parsed: a dict
literal (or `dict(type=...)`) whose `type` names one of those frames or whose `subtype` names a
control request, or a `.frame("<kind>", ...)` call, is a second serialiser. What still does it
is listed in PENDING with its reason; an entry that no longer occurs fails too, so the list only
shrinks. OTHER_WIRES are the same words in another wire's vocabulary.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src" / "tether"
SERIALISERS = {
    "protocol/wire.py": "stream-json",
    "protocol/stream_json.py": "stream-json",
    "server/v2_frames.py": "protocol v2",
}
EXEMPT_DIRS = ("testing/",)  # fakes of other parties' wires

# (module, frame type) -> why that module may use the word: another wire spells it the same.
OTHER_WIRES: dict[tuple[str, str], str] = {
    ("server/openai_bridge.py", "message"): "an OpenAI Responses output item is type 'message'",
    ("providers/openai_responses.py", "message"): "a Responses API input item is type 'message'",
    ("backends/api/backend.py", "message"): "a Letta API MessageCreate is type 'message'",
}

# (module, frame type) -> why it still builds that frame itself, until the named request lands.
PENDING: dict[tuple[str, str], str] = {}


def _modules() -> Iterator[tuple[str, ast.Module]]:
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC).as_posix()
        yield rel, ast.parse(path.read_text(), filename=str(path))


def _type_values(tree: ast.AST, key: str = "type") -> Iterator[tuple[str, int]]:
    """The constant `key` of every dict literal and `dict(key=...)` call, with its line."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Dict):
            for name, value in zip(node.keys, node.values, strict=True):
                if _text(name) == key and (kind := _text(value)) is not None:
                    yield kind, node.lineno
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id == "dict":
            for kw in node.keywords:
                if kw.arg == key and (kind := _text(kw.value)) is not None:
                    yield kind, node.lineno


def _frame_kinds(tree: ast.AST) -> Iterator[tuple[str, int]]:
    """The constant kind of every `<x>.frame("<kind>", ...)` / `<x>._frame(...)` call."""
    for node in ast.walk(tree):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute)):
            continue
        if node.func.attr in ("frame", "_frame") and node.args and (kind := _text(node.args[0])):
            yield kind, node.lineno


def _text(node: ast.AST | None) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _frame_types() -> dict[str, set[str]]:
    found: dict[str, set[str]] = {}
    for rel, tree in _modules():
        if rel in SERIALISERS:
            kinds = {t for t, _ in _type_values(tree)} | {k for k, _ in _frame_kinds(tree)}
            found.setdefault(SERIALISERS[rel], set()).update(kinds)
    return found


def _request_subtypes() -> set[str]:
    """The control requests the stream-json serialiser builds (`can_use_tool`, ...)."""
    return {
        kind
        for rel, tree in _modules()
        if SERIALISERS.get(rel) == "stream-json"
        for kind, _ in _type_values(tree, "subtype")
        if kind not in ("success", "error", "init")  # those are a response's or a line's
    }


def test_the_frame_types_are_read_from_both_serialisers() -> None:
    types = _frame_types()
    # What each wire is known to carry: the scan below means nothing if these are not found.
    assert {"system", "message", "stream_event", "result", "error", "control_request",
            "control_response", "retry"} <= types["stream-json"]
    assert {"runtime_start_response", "stream_delta", "turn_finished", "update_device_status",
            "update_loop_status", "update_queue", "control_request", "input_accepted",
            "external_tool_call_request", "crons_updated",
            "app_server_info_response", "error"} <= types["protocol v2"]
    assert {"can_use_tool", "execute_external_tool"} <= _request_subtypes()


def test_no_module_outside_the_serialisers_builds_a_frame() -> None:
    frame_types = set().union(*_frame_types().values())
    subtypes = _request_subtypes()
    found: dict[tuple[str, str], int] = {}
    for rel, tree in _modules():
        if rel in SERIALISERS or rel.startswith(EXEMPT_DIRS):
            continue
        for kind, line in _type_values(tree):
            if kind in frame_types and (rel, kind) not in OTHER_WIRES:
                found.setdefault((rel, kind), line)
        for kind, line in _type_values(tree, "subtype"):
            if kind in subtypes:
                found.setdefault((rel, f"subtype:{kind}"), line)
        for kind, line in _frame_kinds(tree):
            found.setdefault((rel, f".frame:{kind}"), line)
    unexplained = sorted(f"{rel}:{line} builds {kind!r}" for (rel, kind), line in found.items()
                         if (rel, kind) not in PENDING)
    assert not unexplained, (
        "only protocol/wire.py + stream_json.py (stream-json) and server/v2_frames.py (protocol "
        "v2) build wire frames; call a builder there instead:\n  " + "\n  ".join(unexplained)
    )
    stale = sorted(f"{rel} {kind}" for rel, kind in PENDING if (rel, kind) not in found)
    assert not stale, "these no longer build their own frames; delete them from PENDING: " + (
        ", ".join(stale)
    )


def test_other_wires_entries_still_occur() -> None:
    """An OTHER_WIRES entry whose module no longer uses the word is deleted, not kept."""
    used = {(rel, kind) for rel, tree in _modules() for kind, _ in _type_values(tree)}
    assert not [key for key in OTHER_WIRES if key not in used]


def test_core_builds_no_wire_dict() -> None:
    """core/ hands typed values to the frontends; a `message_type` literal there is a wire
    shape (the provider error used to be one: TurnError now carries the ErrorChunk)."""
    offenders = []
    for rel, tree in _modules():
        if not rel.startswith("core/"):
            continue
        offenders += [
            f"{rel}:{node.lineno}"
            for node in ast.walk(tree)
            if _text(node) == "message_type"
        ]
    assert not offenders, "core/ builds wire dicts: " + ", ".join(offenders)
