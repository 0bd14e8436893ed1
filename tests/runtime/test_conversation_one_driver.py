"""One way to run a turn (issue 15 item 2): only `runtime/turns/conversation.py` calls the turn engine,
only `runtime/turns/inbox.py` calls `Conversation.turn` and makes a `Conversation`; every frontend
submits to an inbox. An AST scan of every module, so a new frontend cannot drift again."""

from __future__ import annotations

import ast
from pathlib import Path

import tether

SRC = Path(tether.__file__).parent
ENGINE = {"core/turn.py", "runtime/turns/conversation.py"}  # where run_turn is defined and called
DRIVER = "runtime/turns/inbox.py"


def calls(tree: ast.AST) -> list[tuple[str, int]]:
    """(what, line) for each call of run_turn, of a `.turn(...)` method, of `Conversation(...)`."""
    out: list[tuple[str, int]] = []
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        func = node.func
        name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
        if name == "run_turn":
            out.append(("run_turn", node.lineno))
        elif name == "Conversation":
            out.append(("Conversation", node.lineno))
        elif name == "turn" and isinstance(func, ast.Attribute):
            out.append((".turn", node.lineno))
    return out


def test_only_the_inbox_drives_turns() -> None:
    found: dict[str, list[tuple[str, int]]] = {}
    for path in sorted(SRC.rglob("*.py")):
        rel = path.relative_to(SRC).as_posix()
        found[rel] = calls(ast.parse(path.read_text(), str(path)))
    stray = [
        f"{rel}:{line} {what}"
        for rel, hits in found.items()
        for what, line in hits
        if not (what == "run_turn" and rel in ENGINE) and not (what != "run_turn" and rel == DRIVER)
    ]
    assert not stray, "run a turn by submitting to runtime/turns/inbox.py's Inbox:\n  " + "\n  ".join(stray)
    # The scan sees what it must: the engine call and the inbox's.
    assert "run_turn" in {w for w, _ in found["runtime/turns/conversation.py"]}
    assert {w for w, _ in found[DRIVER]} == {".turn", "Conversation"}


def test_the_scan_finds_a_frontend_driving_its_own_turn() -> None:
    frontend = "async def go(p, u):\n    c = Conversation(p)\n    return await c.turn(u, emit=print)\n"
    assert calls(ast.parse(frontend)) == [("Conversation", 2), (".turn", 3)]
