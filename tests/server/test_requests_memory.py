"""Memory over protocol v2 (`list_memory`, `read_memory_file`, `write_memory_file`,
`delete_memory_file`, `memory_history`): each write one commit in the agent's memory
repository, `memory_updated` only to connections that may see the agent, paths confined to the
repository, and a scoped token answered for another agent exactly as for a made-up one."""

from __future__ import annotations

import asyncio
import base64
from pathlib import Path

import pytest

from tests.server.requests_client import POLICY, ask, same_answer, token
from tests.server.support import MODEL, Client, InProcess, point_at
from tether.memory.memfs import MemFS, memory_dir
from tether.testing.fake_provider import FakeProvider

BLOCKS = [{"label": "persona", "value": "I am the agent"}]


@pytest.fixture
def project(tmp_path: Path) -> Path:
    d = tmp_path / "project"
    d.mkdir()
    return d


def repo(home: Path, agent_id: str) -> MemFS:
    return MemFS(memory_dir(home, agent_id), agent_id=agent_id)


def test_memory_files_are_listed_read_written_and_committed(
    project: Path, tether_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with FakeProvider([]) as fake:
        point_at(fake, monkeypatch)

        async def scenario() -> None:
            async with InProcess(project) as srv, srv.connect() as ws, srv.connect() as ws2:
                c, watcher = Client(ws), Client(ws2)
                agent = (await ask(c, "agent_create", body={
                    "model": MODEL, "memory_blocks": BLOCKS}))["agent"]["id"]
                listed = await ask(c, "list_memory", agent_id=agent)
                assert listed["success"] and listed["done"] and listed["memfs_initialized"]
                persona = next(e for e in listed["entries"]
                               if e["relative_path"] == "system/persona.md")
                assert persona["is_system"] and persona["content"].strip() == "I am the agent"

                before = repo(tether_home, agent).revision()
                wrote = await ask(c, "write_memory_file", agent_id=agent, path="notes/todo.md",
                                  content="buy milk\n", commit_message="remember milk")
                assert wrote["success"] and wrote["committed"], wrote
                memfs = repo(tether_home, agent)
                assert memfs.revision() == wrote["commit_sha"] != before
                assert memfs.log(1)[0].subject == "remember milk"
                assert memfs.read_head("notes/todo.md") == "buy milk\n"
                heard = await watcher.of_type("memory_updated")
                assert heard["agent_id"] == agent and heard["affected_paths"] == ["notes/todo.md"]

                read = await ask(c, "read_memory_file", agent_id=agent, path="notes/todo.md")
                assert read["content"] == "buy milk\n" and read["encoding"] == "utf8"
                image = bytes(range(256))
                await ask(c, "write_memory_file", agent_id=agent, path="face.png",
                          content=base64.b64encode(image).decode(), encoding="base64")
                back = await ask(c, "read_memory_file", agent_id=agent, path="face.png",
                                 encoding="base64")
                assert base64.b64decode(back["content"]) == image

                log = await ask(c, "memory_history", agent_id=agent, file_path="notes/todo.md")
                assert [x["message"] for x in log["commits"]] == ["remember milk"]
                assert log["file_path"] == "notes/todo.md"
                sha = log["commits"][0]["sha"]
                diff = await ask(c, "memory_commit_diff", agent_id=agent, sha=sha)
                assert "+buy milk" in diff["diff"] and diff["sha"] == sha
                await ask(c, "write_memory_file", agent_id=agent, path="notes/todo.md",
                          content="buy bread\n")
                old = await ask(c, "memory_file_at_ref", agent_id=agent,
                                file_path="notes/todo.md", ref=sha)
                assert old["content"] == "buy milk\n" and old["ref"] == sha
                for bad in ("--output=/tmp/x", "nothere"):
                    no = await ask(c, "memory_commit_diff", agent_id=agent, sha=bad)
                    assert no["success"] is False and no["diff"] is None, no
                enabled = await ask(c, "enable_memfs", agent_id=agent)
                assert enabled["memory_directory"] == str(memory_dir(tether_home, agent))

                for bad in ("../outside.md", "/etc/passwd", ".git/config"):
                    refused = await ask(c, "write_memory_file", agent_id=agent, path=bad,
                                        content="x")
                    assert refused["success"] is False and refused["path"] == bad, refused
                assert not (memory_dir(tether_home, agent).parent / "outside.md").exists()

                gone = await ask(c, "delete_memory_file", agent_id=agent, path="notes/todo.md")
                assert gone["committed"]
                assert repo(tether_home, agent).read_head("notes/todo.md") is None
                listed = await ask(c, "list_memory", agent_id=agent)
                assert "notes/todo.md" not in [e["relative_path"] for e in listed["entries"]]
                missing = await ask(c, "read_memory_file", agent_id=agent, path="notes/todo.md")
                assert missing["success"] is False and missing["content"] is None

        asyncio.run(scenario())


def test_scoped_token_reaches_only_its_agents_memory(
    project: Path, tether_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    with FakeProvider([]) as fake:
        point_at(fake, monkeypatch)

        async def scenario() -> None:
            async with (
                InProcess(project, policy=POLICY) as srv,
                srv.connect(additional_headers=token()) as ws,
            ):
                admin = Client(ws)
                a, b = [(await ask(admin, "agent_create", body={
                    "model": MODEL, "memory_blocks": BLOCKS}))["agent"]["id"] for _ in "ab"]
                async with srv.connect(additional_headers=token(agents=[a])) as ws2:
                    s = Client(ws2)
                    assert (await ask(s, "list_memory", agent_id=a))["success"]
                    b_before = repo(tether_home, b).revision()
                    guess = "agent-local-11111111-1111-1111-1111-111111111111"
                    for kind, extra in (
                        ("list_memory", {}),
                        ("read_memory_file", {"path": "system/persona.md"}),
                        ("write_memory_file", {"path": "x.md", "content": "x"}),
                        ("delete_memory_file", {"path": "system/persona.md"}),
                        ("memory_history", {}),
                        ("memory_commit_diff", {"sha": "HEAD"}),
                        ("memory_file_at_ref", {"file_path": "system/persona.md", "ref": "HEAD"}),
                        ("enable_memfs", {}),
                    ):
                        hidden = await ask(s, kind, agent_id=b, **extra)
                        absent = await ask(s, kind, agent_id=guess, **extra)
                        assert hidden["success"] is False, (kind, hidden)
                        assert same_answer(hidden, absent, (b, guess)), (hidden, absent)
                    assert repo(tether_home, b).revision() == b_before

                    await ask(admin, "write_memory_file", agent_id=b, path="b.md", content="b")
                    await ask(admin, "write_memory_file", agent_id=a, path="a.md", content="a")
                    heard = await s.of_type("memory_updated")
                    assert heard["agent_id"] == a

        asyncio.run(scenario())
