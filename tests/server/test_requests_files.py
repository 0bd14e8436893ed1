"""Workspace files over protocol v2 (`list_in_directory`, `read_file`, `get_tree`): only inside
the connection's workspaces, with the Read tool's boundary — no way out through `..` or a
symlink, nothing of tether's state, no hard link to one of its files — and nothing for a scoped
connection that has started no runtime there."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from tests.server.requests_client import admin_client, ask, token
from tests.server.support import Client, point_at
from tether.testing.fake_provider import FakeProvider


def test_files_are_served_inside_the_workspace_only(
    tmp_path: Path, tether_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    project = tmp_path / "project"
    (project / "src").mkdir(parents=True)
    (project / "README.md").write_text("hello\n")
    (project / "src" / "main.py").write_text("print('hi')\n")
    outside = tmp_path / "outside.txt"
    outside.write_text("not yours\n")
    (project / "escape").symlink_to(outside)
    (tether_home / "providers").mkdir(parents=True)
    (tether_home / "providers" / "auth.json").write_text('{"key": "sk-hidden"}')
    (project / "keys").symlink_to(tether_home / "providers" / "auth.json")
    (tether_home / "agents").mkdir()
    (tether_home / "agents" / "record.json").write_text('{"secret": "state"}')
    os.link(tether_home / "agents" / "record.json", project / "innocent.json")

    with FakeProvider([]) as fake:
        point_at(fake, monkeypatch)

        async def scenario() -> None:
            async with admin_client(project) as (srv, c):
                listing = await ask(c, "list_in_directory", path=str(project), include_files=True)
                assert listing["success"], listing
                assert listing["folders"] == ["src"]
                assert {"README.md", "innocent.json"} <= set(listing["files"])
                assert not {"escape", "keys"} & set(listing["files"])  # links out: not shown
                read = await ask(c, "read_file", path=str(project / "README.md"))
                assert read["content"] == "hello\n" and read["path"] == str(project / "README.md")
                tree = await ask(c, "get_tree", path=str(project), depth=2)
                assert {"path": "src/main.py", "type": "file"} in tree["entries"]
                found = await ask(c, "search_files", query="MAIN")
                assert found["files"] == [{"path": "src/main.py", "type": "file"}]
                recent = await ask(c, "search_files", query="", max_results=50)
                names = {f["path"] for f in recent["files"]}
                assert {"README.md", "src/main.py"} <= names and not {"escape", "keys"} & names

                for path in (str(project / "escape"), str(project / "keys"),
                             str(project / ".." / "outside.txt"), "/etc/passwd",
                             str(project / "innocent.json"),
                             str(tether_home / "providers" / "auth.json"), "README.md"):
                    refused = await ask(c, "read_file", path=path)
                    assert refused["success"] is False and refused["content"] is None, path
                    assert "not yours" not in str(refused) and "sk-hidden" not in str(refused)
                    assert "state" not in str(refused.get("content"))
                assert "hard link" in (await ask(c, "read_file",
                                                 path=str(project / "innocent.json")))["error"]
                up = await ask(c, "list_in_directory", path=str(tmp_path))
                assert up["success"] is False and "outside" in up["error"]

                target = project / "src" / "new.txt"
                wrote = await ask(c, "write_file", path=str(target), content="a b a\n")
                assert wrote["success"] and target.read_text() == "a b a\n", wrote
                twice = await ask(c, "edit_file", file_path=str(target), old_string="a",
                                  new_string="c")
                assert twice["success"] is False and "2 times" in twice["error"]
                edited = await ask(c, "edit_file", file_path=str(target), old_string="a",
                                   new_string="c", replace_all=True)
                assert edited["replacements"] == 2 and target.read_text() == "c b c\n"
                assert edited["start_line"] == 1
                for path in (project / "innocent.json", project / "escape", project / "keys"):
                    no = await ask(c, "write_file", path=str(path), content="overwritten")
                    assert no["success"] is False, (path, no)
                assert (tether_home / "agents" / "record.json").read_text() == '{"secret": "state"}'
                assert outside.read_text() == "not yours\n"

                async with srv.connect(additional_headers=token(agents=["agent-x"])) as ws2:
                    s = Client(ws2)
                    none = await ask(s, "read_file", path=str(project / "README.md"))
                    assert none["success"] is False and "no workspace" in none["error"]
                    no = await ask(s, "write_file", path=str(target), content="x")
                    assert no["success"] is False and "scoped" in no["error"]
                    assert target.read_text() == "c b c\n"

        asyncio.run(scenario())
