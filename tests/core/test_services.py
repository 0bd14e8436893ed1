"""The typed services object tools reach the run through (core/services.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tether.core.services import Services
from tether.core.tools import ToolRunContext


def test_services_are_typed_members(tmp_path: Path) -> None:
    todos: list[object] = []
    ctx = ToolRunContext(tmp_path, "call-1", services=Services(todos=todos, tether_home=tmp_path))
    assert ctx.services.todos is todos and ctx.services.tether_home == tmp_path
    assert ctx.services.background is None  # absent members are None, not missing


@pytest.mark.parametrize("name", ["backgrund", "Sandbox"])
def test_an_unknown_service_is_refused(name: str) -> None:
    with pytest.raises(TypeError, match=name):
        Services(**{name: object()})
    with pytest.raises(AttributeError):
        setattr(Services(), name, object())  # slotted: no new member by accident


def test_no_lookup_by_string_is_left() -> None:
    services = Services(tether_home=Path("/x"))
    for name in ("__getitem__", "__setitem__", "__contains__", "__iter__", "get", "of"):
        assert not hasattr(services, name), name
