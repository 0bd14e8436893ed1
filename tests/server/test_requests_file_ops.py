"""`file_ops` over protocol v2 (the reference's collaborative-editing frame, no response): the
`document_content` that comes with the ops is written to the workspace file, under the checks
`write_file` has — a `..` path, a symlink out, a path in `$TETHER_HOME` or a hard link to its
files are refused with an `error` frame and nothing changes on disk — ops without the document
are refused rather than guessed at, and a scoped token writes nothing. An `edit_file` sends the
edited document back as a `file_ops` frame before its response, as the reference does."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path
from typing import Any

from tests.server.requests_client import admin_client, ask, token
from tests.server.support import Client

OPS: dict[str, Any] = {"cg_entries": [{"agent": "window-a", "seq": 0, "len": 3, "parents": []}],
                       "ops": [{"type": "ins", "pos": 0, "content": "new"}],
                       "source": "window-a"}


async def file_ops(c: Client, rid: str, path: str, **fields: Any) -> None:
    await c.send({"type": "file_ops", "request_id": rid, "path": path, **OPS, **fields})


async def written(path: Path, text: str) -> None:
    for _ in range(400):
        if path.is_file() and path.read_text() == text:
            return
        await asyncio.sleep(0.025)
    raise AssertionError(f"{path} never held {text!r}")


def test_file_ops_write_the_document_inside_the_workspace_only(
    tmp_path: Path, tether_home: Path
) -> None:
    project = tmp_path / "project"
    (project / "src").mkdir(parents=True)
    target = project / "src" / "notes.md"
    target.write_text("old\n")
    outside = tmp_path / "outside.txt"
    outside.write_text("not yours\n")
    (project / "escape").symlink_to(outside)
    (project / "up").symlink_to(tmp_path)
    (tether_home / "agents").mkdir(parents=True)
    state = tether_home / "agents" / "record.json"
    state.write_text('{"secret": "state"}')
    os.link(state, project / "innocent.json")

    async def scenario() -> None:
        async with admin_client(project) as (srv, c):
            info = await ask(c, "app_server_info")
            assert info["capabilities"]["workspace_file_writes"] is True
            await file_ops(c, "ok-1", str(target), document_content="new\nold\n")
            await written(target, "new\nold\n")
            edited = await ask(c, "edit_file", file_path=str(target), old_string="old",
                               new_string="kept")
            assert edited["success"] and edited["replacements"] == 1, edited
            sent = [f for f in c.seen if f.get("type") in ("file_ops", "edit_file_response")]
            assert [f["type"] for f in sent[-2:]] == ["file_ops", "edit_file_response"]
            assert sent[-2] == {"type": "file_ops", "path": str(target), "cg_entries": [],
                                "ops": [], "source": "agent", "document_content": "new\nkept\n"}
            await file_ops(c, "ok-1b", str(target), document_content="new\nold\n")
            await written(target, "new\nold\n")
            created = project / "src" / "fresh.md"
            await file_ops(c, "ok-2", str(created), document_content="made\n")
            await written(created, "made\n")

            for n, path in enumerate((str(project / ".." / "outside.txt"),
                                      str(project / "escape"),
                                      str(project / "up" / "outside.txt"),
                                      str(state), str(project / "innocent.json"),
                                      "src/notes.md")):
                await file_ops(c, f"bad-{n}", path, document_content="pwned\n")
                error = await c.of_type("error", request_id=f"bad-{n}")
                assert error["message"].startswith("file_ops:"), error
            await file_ops(c, "no-doc", str(target))
            error = await c.of_type("error", request_id="no-doc")
            assert "document_content" in error["message"]
            await file_ops(c, "bad-op", str(target), ops=[{"type": "move", "pos": 0}],
                           document_content="x")
            error = await c.of_type("error", request_id="bad-op")
            assert "'ops'" in error["message"]

            async with srv.connect(additional_headers=token(agents=["agent-x"])) as ws:
                s = Client(ws)
                await file_ops(s, "scoped", str(target), document_content="scoped\n")
                error = await s.of_type("error", request_id="scoped")
                assert "unscoped token" in error["message"]
            await asyncio.sleep(0.2)  # had anything been written, it would be by now

    asyncio.run(scenario())
    assert outside.read_text() == "not yours\n"
    assert state.read_text() == '{"secret": "state"}'
    assert target.read_text() == "new\nold\n"
    assert not (tmp_path / "src").exists()
