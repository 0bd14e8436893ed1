"""ARCHITECTURE.md's module map is generated from the docstrings; this fails when it is stale
(a module added, moved or removed, or its docstring's first sentence changed)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _generator():  # type: ignore[no-untyped-def]
    spec = importlib.util.spec_from_file_location("architecture_map",
                                                  ROOT / "scripts" / "architecture_map.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_the_module_map_is_current() -> None:
    gen = _generator()
    text = (ROOT / "ARCHITECTURE.md").read_text(encoding="utf-8")
    assert gen.replaced(text) == text, (
        "ARCHITECTURE.md's module map is stale: run "
        ".venv/bin/python scripts/architecture_map.py --write")


def test_every_module_has_a_docstring_for_the_map() -> None:
    gen = _generator()
    missing = [str(p.relative_to(ROOT)) for p in sorted((ROOT / "src" / "tether").rglob("*.py"))
               if "__pycache__" not in p.parts and not gen.first_sentence(p)]
    assert not missing, f"modules without a docstring: {missing}"
