"""One tool-call vocabulary (issue 33): no new shape copies a tool call, nothing re-parses its
arguments.

Walks every module under src/tether with `ast`. A class (dataclass, TypedDict, NamedTuple, or a
plain class setting attributes in `__init__`) or a functional TypedDict / namedtuple that has an
id-like field, a name field and an arguments field is a copy of a tool call: it must be
`protocol.tool_calls.ToolCall` or one of the few listed below, each with the reason it exists.
A `loads(...)` (json, orjson) whose argument names a call's arguments must be in
`ToolCall.parse`, the one place they are parsed.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src" / "tether"

ID_FIELD = re.compile(r"^(id|tool_call_id|call_id|tool_use_id)$")
NAME_FIELDS = frozenset({"name", "tool_name", "function_name"})
ARG_FIELDS = frozenset(
    {"arguments", "args", "input", "tool_input", "json_parts", "partial_json", "raw_arguments"}
)

ALLOWED_SHAPES = {
    ("protocol/tool_calls.py", "ToolCall"): "the one tool call",
    # Pieces of a call still streaming in, before the provider's step builds its ToolCall:
    ("providers/anthropic.py", "_ToolBlock"): "an Anthropic tool_use block being streamed",
    ("providers/openai_chat.py", "_Call"): "an OpenAI chat tool call being streamed",
    ("testing/fake_dialects.py", "PlannedCall"): "the fake provider's script (the server side)",
    ("tui/widgets.py", "ToolBlock"): "a Textual widget showing one call",
}
# The fake Gemini server decodes its script's argument text to speak Gemini's wire.
ALLOWED_LOADS = {("protocol/tool_calls.py", "ToolCall.parse"), ("testing/fake_gemini.py", "")}


def _class_fields(cls: ast.ClassDef) -> set[str]:
    out: set[str] = set()
    for st in cls.body:
        if isinstance(st, ast.AnnAssign) and isinstance(st.target, ast.Name):
            out.add(st.target.id)
        elif isinstance(st, ast.FunctionDef) and st.name == "__init__":
            for node in ast.walk(st):
                targets = (
                    node.targets if isinstance(node, ast.Assign)
                    else [node.target] if isinstance(node, ast.AnnAssign) else []
                )
                flat = [e for t in targets for e in (t.elts if isinstance(t, ast.Tuple) else [t])]
                for t in flat:
                    if isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name) \
                            and t.value.id == "self":
                        out.add(t.attr)
    return out


def _functional_fields(call: ast.Call) -> tuple[str, set[str]] | None:
    """`TypedDict("X", {...})`, `NamedTuple("X", [...])`, `namedtuple("X", "a b")`."""
    fn = call.func
    name = fn.attr if isinstance(fn, ast.Attribute) else fn.id if isinstance(fn, ast.Name) else ""
    if name not in {"TypedDict", "NamedTuple", "namedtuple", "make_dataclass"} or len(call.args) < 2:
        return None
    title = call.args[0].value if isinstance(call.args[0], ast.Constant) else "?"
    spec = call.args[1]
    fields: set[str] = set()
    if isinstance(spec, ast.Dict):
        fields = {k.value for k in spec.keys if isinstance(k, ast.Constant)}
    elif isinstance(spec, ast.Constant) and isinstance(spec.value, str):
        fields = set(spec.value.replace(",", " ").split())
    elif isinstance(spec, ast.List | ast.Tuple):
        for el in spec.elts:
            if isinstance(el, ast.Constant):
                fields.add(el.value)
            elif isinstance(el, ast.Tuple) and el.elts and isinstance(el.elts[0], ast.Constant):
                fields.add(el.elts[0].value)
    return str(title), fields


def _is_call_shape(fields: set[str]) -> bool:
    return any(ID_FIELD.match(f) for f in fields) and bool(fields & NAME_FIELDS) \
        and bool(fields & ARG_FIELDS)


def _names_in(node: ast.AST) -> set[str]:
    return {n.attr for n in ast.walk(node) if isinstance(n, ast.Attribute)} | {
        n.id for n in ast.walk(node) if isinstance(n, ast.Name)
    }


def violations(source: str, where: str) -> list[str]:
    """What in one module copies a tool call or parses its arguments outside the allowed places."""
    tree = ast.parse(source)
    found: list[str] = []

    def visit(node: ast.AST, scope: str) -> None:
        for child in ast.iter_child_nodes(node):
            inner = scope
            if isinstance(child, ast.ClassDef):
                inner = f"{scope}.{child.name}" if scope else child.name
                if _is_call_shape(_class_fields(child)) and (where, child.name) not in ALLOWED_SHAPES:
                    found.append(f"{where}:{child.lineno}: class {child.name} copies a tool call")
            elif isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                inner = f"{scope}.{child.name}" if scope else child.name
            elif isinstance(child, ast.Call):
                functional = _functional_fields(child)
                if functional is not None and _is_call_shape(functional[1]) \
                        and (where, functional[0]) not in ALLOWED_SHAPES:
                    found.append(f"{where}:{child.lineno}: {functional[0]} copies a tool call")
                fn = child.func
                fname = fn.attr if isinstance(fn, ast.Attribute) else getattr(fn, "id", "")
                if fname == "loads" and child.args and _names_in(child.args[0]) & ARG_FIELDS \
                        and (where, scope) not in ALLOWED_LOADS and (where, "") not in ALLOWED_LOADS:
                    found.append(
                        f"{where}:{child.lineno}: {ast.unparse(child)} parses a call's arguments "
                        "again (use ToolCall.arguments)"
                    )
            visit(child, inner)

    visit(tree, "")
    return found


def test_no_module_copies_a_tool_call_or_reparses_its_arguments() -> None:
    found: list[str] = []
    for path in sorted(SRC.rglob("*.py")):
        found += violations(path.read_text(encoding="utf-8"), path.relative_to(SRC).as_posix())
    assert not found, "\n".join(found)


def test_every_allowed_shape_still_exists() -> None:
    """An allowance outlives its class only by mistake: remove it with the class."""
    for (where, name), _why in ALLOWED_SHAPES.items():
        assert f"class {name}" in (SRC / where).read_text(encoding="utf-8"), (where, name)


def test_a_new_copy_of_a_tool_call_is_caught() -> None:
    new_shape = (
        "from dataclasses import dataclass\n"
        "from typing import NamedTuple, TypedDict\n"
        "@dataclass(frozen=True)\n"
        "class PendingCall:\n"
        "    tool_call_id: str\n    tool_name: str\n    args: dict\n"
        "class Row(TypedDict):\n    id: str\n    name: str\n    input: dict\n"
        "class Legacy:\n"
        "    def __init__(self, call_id, name, arguments):\n"
        "        self.call_id, self.name, self.arguments = call_id, name, arguments\n"
        "Pair = NamedTuple('Pair', [('id', str), ('name', str), ('arguments', str)])\n"
    )
    found = violations(new_shape, "runtime/new.py")
    assert [f.split(": ", 1)[1] for f in found] == [
        "class PendingCall copies a tool call",
        "class Row copies a tool call",
        "class Legacy copies a tool call",
        "Pair copies a tool call",
    ]
    assert violations("class ToolCall:\n    id: str\n    name: str\n    arguments: dict\n",
                      "protocol/tool_calls.py") == []


def test_parsing_a_calls_arguments_again_is_caught() -> None:
    again = (
        "import orjson\n"
        "def show(chunk):\n"
        "    return orjson.loads(chunk.arguments)\n"
        "def event(data):\n"
        "    return orjson.loads(data)\n"  # not a call's arguments: allowed
    )
    (only,) = violations(again, "tui/view.py")
    assert "orjson.loads(chunk.arguments) parses a call's arguments again" in only
