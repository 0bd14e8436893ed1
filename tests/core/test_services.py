"""The typed services object tools reach the run through (core/services.py)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tether.core.services import Services
from tether.core.tools import ToolRunContext


def test_a_mapping_by_name_becomes_the_typed_object(tmp_path: Path) -> None:
    todos: list[object] = []
    given = {"todos": todos, "tether_home": tmp_path}  # as tests and mods pass it
    ctx = ToolRunContext(tmp_path, "call-1", services=given)  # type: ignore[arg-type]
    assert isinstance(ctx.services, Services)
    assert ctx.services.todos is todos and ctx.services.tether_home == tmp_path
    assert ctx.services.background is None  # absent members are None, not missing


@pytest.mark.parametrize("name", ["backgrund", "Sandbox", ""])
def test_an_unknown_service_name_is_named(tmp_path: Path, name: str) -> None:
    with pytest.raises(TypeError, match=repr(name)):
        ToolRunContext(tmp_path, "call-1", services={name: object()})  # type: ignore[arg-type]
    with pytest.raises(KeyError, match=repr(name)):
        Services()[name] = object()


def test_name_access_for_registrations_sees_only_members_that_are_set(tmp_path: Path) -> None:
    services = Services()
    services["tether_home"] = tmp_path
    assert "tether_home" in services and "mcp" not in services and "nonsense" not in services
    assert services.get("mcp") is None and services["tether_home"] == tmp_path
    assert list(services) == ["tether_home"]
    with pytest.raises(KeyError):
        services["mcp"]
