"""`grep_in_files` over protocol v2: line-level matches (line, columns, the lines around) of a
literal or a regex under the connection's workspace, with the glob, case and whole-word options,
and never a line of what read_file refuses (a symlink out, tether's state, a hard link to it);
a scoped connection with no runtime there finds nothing of the server's folder."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from tests.server.requests_client import admin_client, ask, token
from tests.server.support import Client, point_at
from tether.testing.fake_provider import FakeProvider


def test_grep_finds_lines_inside_the_workspace_only(
    tmp_path: Path, tether_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    project = tmp_path / "project"
    (project / "src" / "deep").mkdir(parents=True)
    (project / "src" / "main.py").write_text("import os\n\ndef Needle():\n    return 1\n")
    (project / "src" / "deep" / "util.ts").write_text("const needles = 2;\nlet needle = 3;\n")
    (project / "notes.md").write_text("a NEEDLE here\n")
    (project / "blob.bin").write_bytes(b"needle\0\0binary")
    outside = tmp_path / "outside.txt"
    outside.write_text("needle outside\n")
    (project / "escape").symlink_to(outside)
    (tether_home / "agents").mkdir(parents=True)
    (tether_home / "agents" / "record.json").write_text('{"needle": "state"}')
    os.link(tether_home / "agents" / "record.json", project / "innocent.json")

    with FakeProvider([]) as fake:
        point_at(fake, monkeypatch)

        async def scenario() -> None:
            async with admin_client(project) as (srv, c):
                found = await ask(c, "grep_in_files", query="needle")
                assert found["success"], found
                where = sorted((m["path"], m["line"]) for m in found["matches"])
                assert where == [("notes.md", 1), ("src/deep/util.ts", 1), ("src/deep/util.ts", 2),
                                 ("src/main.py", 3)], where
                assert found["total_matches"] == 4 and found["total_files"] == 3
                assert found["truncated"] is False
                main = next(m for m in found["matches"] if m["path"] == "src/main.py")
                assert main == {"path": "src/main.py", "line": 3, "column": 5, "column_end": 11,
                                "text": "def Needle():", "before": ["import os", ""],
                                "after": ["    return 1"]}
                assert "state" not in str(found) and "outside" not in str(found)

                exact = await ask(c, "grep_in_files", query="needle", case_sensitive=True,
                                  whole_word=True, context_lines=0)
                assert [(m["path"], m["line"]) for m in exact["matches"]] == [
                    ("src/deep/util.ts", 2)] and "before" not in exact["matches"][0]
                typed = await ask(c, "grep_in_files", query=r"need\w+s", is_regex=True,
                                  glob="src/**/*.ts")
                assert [m["text"] for m in typed["matches"]] == ["const needles = 2;"]
                py = await ask(c, "grep_in_files", query="needle", glob="*.py")
                assert [m["path"] for m in py["matches"]] == ["src/main.py"]
                few = await ask(c, "grep_in_files", query="needle", max_results=1)
                assert len(few["matches"]) == 1 and few["truncated"] is True
                assert few["total_matches"] == 4
                deep = await ask(c, "grep_in_files", query="needle",
                                 cwd=str(project / "src" / "deep"))
                assert {m["path"] for m in deep["matches"]} == {"util.ts"}

                bad = await ask(c, "grep_in_files", query="(", is_regex=True)
                assert bad["success"] is False and "regular expression" in bad["error"]
                assert bad["matches"] == [] and bad["total_matches"] == 0
                empty = await ask(c, "grep_in_files", query="")
                assert empty["success"] is False and "query" in empty["error"]
                out = await ask(c, "grep_in_files", query="needle", cwd=str(tmp_path))
                assert out["success"] is False and "outside" in out["error"]
                home = await ask(c, "grep_in_files", query="needle", cwd=str(tether_home))
                assert home["success"] is False and "state" not in str(home["matches"])

                async with srv.connect(additional_headers=token(agents=["agent-x"])) as ws2:
                    none = await ask(Client(ws2), "grep_in_files", query="needle")
                    assert none["success"] is False and "no workspace" in none["error"]
                    assert none["matches"] == []

        asyncio.run(scenario())
