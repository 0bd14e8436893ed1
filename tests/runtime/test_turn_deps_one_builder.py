"""`TurnDeps` is built in one place, `Prepared.turn_deps`: every frontend's turn goes through
it, and nothing in src builds, copies or patches one elsewhere (issue 33)."""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parents[2] / "src" / "tether"
FIELDS = {"backend", "snapshot", "decide", "approver", "make_run_context", "emit", "abort",
          "max_turns", "tool_hooks", "permission_hooks", "events", "before_turn"}


def _builders() -> list[str]:
    found = []
    for path in sorted(SRC.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Call):
                fn = node.func
                name = fn.id if isinstance(fn, ast.Name) else fn.attr if isinstance(fn, ast.Attribute) else ""
                if name == "TurnDeps":
                    found.append(f"{path.relative_to(SRC)}:{node.lineno} builds one")
                args = node.args[:1]
                if name == "replace" and args and isinstance(args[0], ast.Name) and args[0].id == "deps":
                    found.append(f"{path.relative_to(SRC)}:{node.lineno} copies one")
            targets = node.targets if isinstance(node, ast.Assign) else []
            for t in targets:
                if (isinstance(t, ast.Attribute) and t.attr in FIELDS
                        and isinstance(t.value, ast.Name) and t.value.id == "deps"):
                    found.append(f"{path.relative_to(SRC)}:{node.lineno} patches deps.{t.attr}")
    return found


def test_turn_deps_is_built_only_by_prepared_turn_deps() -> None:
    found = _builders()
    assert len(found) == 1 and found[0].startswith("runtime/session/prepared.py:"), found
