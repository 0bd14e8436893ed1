"""`watch_file` / `unwatch_file` over protocol v2: `file_changed {path, lastModified}` each time a
watched workspace file's modification time moves, nothing after `unwatch_file`, and a path
outside the workspace (or any path for a scoped connection with no runtime there) refused with
an `error` frame naming the request."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from tests.server.requests_client import admin_client, ask, token
from tests.server.support import Client, point_at
from tether.testing.fake_provider import FakeProvider


def test_watched_files_report_their_changes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    project = tmp_path / "project"
    project.mkdir()
    first, second = project / "a.txt", project / "b.txt"
    first.write_text("one")
    second.write_text("two")
    outside = tmp_path / "outside.txt"
    outside.write_text("x")
    with FakeProvider([]) as fake:
        point_at(fake, monkeypatch)

        async def scenario() -> None:
            async with admin_client(project) as (srv, c):
                await c.send({"type": "watch_file", "request_id": "w1", "path": str(first)})
                await ask(c, "get_cwd_map")  # answered after the watch began
                os.utime(first, (1_700_000_000, 1_700_000_000))
                changed = await c.of_type("file_changed", path=str(first))
                assert changed == {"type": "file_changed", "path": str(first),
                                   "lastModified": 1_700_000_000_000}

                await c.send({"type": "unwatch_file", "request_id": "w2", "path": str(first)})
                await c.send({"type": "watch_file", "request_id": "w3", "path": str(second)})
                await ask(c, "get_cwd_map")
                os.utime(first, (1_700_000_100, 1_700_000_100))
                os.utime(second, (1_700_000_200, 1_700_000_200))
                await c.of_type("file_changed", path=str(second))
                heard = [f for f in c.seen if f.get("type") == "file_changed"
                         and f["path"] == str(first)]
                assert len(heard) == 1  # nothing after unwatch_file

                await c.send({"type": "watch_file", "request_id": "w4", "path": str(outside)})
                refused = await c.of_type("error", request_id="w4")
                assert "outside" in refused["message"] and "watch_file" in refused["message"]
                async with srv.connect(additional_headers=token(agents=["agent-x"])) as ws2:
                    s = Client(ws2)
                    await s.send({"type": "watch_file", "request_id": "w5", "path": str(second)})
                    none = await s.of_type("error", request_id="w5")
                    assert "no workspace" in none["message"]

        asyncio.run(scenario())
