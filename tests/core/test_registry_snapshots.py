"""Tool-context snapshots share one read-only copy of the registry until it changes (a long-lived
server keeps up to 4,096 snapshots per conversation), and a change never reaches an old one."""

from __future__ import annotations

from pathlib import Path

import pytest

from tether.core.tools import ToolContextStore, ToolRegistry
from tether.tools.files import ReadTool, WriteTool


def test_snapshots_share_the_registry_until_it_changes() -> None:
    registry = ToolRegistry()
    registry.register(ReadTool())
    store = ToolContextStore()
    a = store.snapshot(registry, Path("/"), "standard")
    b = store.snapshot(registry, Path("/"), "standard")
    assert a.tools is b.tools and list(a.tools) == ["Read"]
    with pytest.raises(TypeError):
        a.tools["Write"] = WriteTool()  # type: ignore[index]
    dispose = registry.register(WriteTool())
    c = store.snapshot(registry, Path("/"), "standard")
    assert sorted(c.tools) == ["Read", "Write"] and list(a.tools) == ["Read"]
    dispose()
    d = store.snapshot(registry, Path("/"), "standard")
    assert list(d.tools) == ["Read"] and sorted(c.tools) == ["Read", "Write"]
    assert d.tools is not a.tools  # rebuilt after the change, never the old copy mutated
