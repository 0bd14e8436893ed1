"""`get_cwd_map` over protocol v2: the working directory of each conversation the server holds
a runtime for, under the reference's scope keys (`conversation:<id>`,
`agent:<id>::conversation:default`), and the boot directory; a scoped token sees only the
conversations it reaches and not the server's own folder."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tests.server.requests_client import admin_client, ask, token
from tests.server.support import MODEL, Client, point_at
from tether.testing.fake_provider import FakeProvider


def test_cwd_map_lists_the_folders_a_token_reaches(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    project, other = tmp_path / "project", tmp_path / "other"
    project.mkdir()
    other.mkdir()
    with FakeProvider([]) as fake:
        point_at(fake, monkeypatch)

        async def scenario() -> None:
            async with admin_client(project) as (srv, c):
                fresh = await ask(c, "get_cwd_map")
                assert fresh == {**fresh, "success": True, "cwd_map": {},
                                 "boot_working_directory": str(project)}, fresh
                mine = (await c.start(project))["runtime"]
                a = (await ask(c, "agent_create", body={"model": MODEL}))["agent"]["id"]
                async with srv.connect(additional_headers=token(agents=[a])) as ws2:
                    s = Client(ws2)
                    theirs = (await s.start(other, agent_id=a, conversation_id="default"))[
                        "runtime"]
                    assert theirs == {"agent_id": a, "conversation_id": "default"}
                    full = await ask(c, "get_cwd_map")
                    assert full["cwd_map"] == {
                        f"conversation:{mine['conversation_id']}": str(project),
                        f"agent:{a}::conversation:default": str(other),
                    }, full
                    scoped = await ask(s, "get_cwd_map")
                    assert scoped["cwd_map"] == {f"agent:{a}::conversation:default": str(other)}
                    assert scoped["boot_working_directory"] is None

        asyncio.run(scenario())
